#pragma once

// Request and response bodies: the proto3 JSON mapping or binary protobuf,
// chosen by Content-Type. Decoding never trusts the client: unknown fields,
// unknown enum names and malformed bodies are errors that name what is wrong.

#include <string>
#include <string_view>

#include <boost/system/result.hpp>
#include <google/protobuf/message.h>

#include "policy/field_error.h"

namespace kbox {

enum class Encoding { kJson, kProtobuf };

inline constexpr const char* kJsonContentType = "application/json";
inline constexpr const char* kProtobufContentType = "application/x-protobuf";

// Encoding named by a Content-Type header (parameters such as charset are
// ignored; an empty header means JSON). Unsupported types are an error.
boost::system::result<Encoding, FieldError> EncodingFromContentType(const std::string& content_type);

// Parses `body` into `message`. The error's field is the offending field's
// name when the parser says which, else "body".
boost::system::result<void, FieldError> DecodeMessage(const std::string& body, Encoding encoding,
                                                      google::protobuf::Message& message);

// Serialises `message`; JSON output uses proto field names and prints fields
// at their default values, so clients see every field of a result.
std::string EncodeMessage(const google::protobuf::Message& message, Encoding encoding);

const char* ContentTypeOf(Encoding encoding);

// `text` made fit for an error body: invalid UTF-8 bytes become U+FFFD,
// control characters a space, and at most `max_bytes` bytes are kept (at a
// character boundary). Error messages quote client bytes; JSON must be UTF-8.
std::string ClientText(std::string_view text, size_t max_bytes = 512);

// JSON request bodies nest at most this deep (objects and arrays); kboxd's
// messages need 5.
inline constexpr size_t kMaxJsonDepth = 32;

}  // namespace kbox
