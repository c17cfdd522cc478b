#include "daemon/message_codec.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <regex>

namespace kbox {
namespace {

std::string MediaType(const std::string& content_type) {
  std::string media = content_type.substr(0, content_type.find(';'));
  media.erase(std::remove_if(media.begin(), media.end(),
                             [](unsigned char c) { return std::isspace(c); }),
              media.end());
  std::transform(media.begin(), media.end(), media.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return media;
}

// protobuf's JSON parser names the field in its messages: 3.21 (Debian 12)
// starts them with it ("bogus: Cannot find field.", "(backend): invalid
// value ..."); other versions put it later ("Cannot find field: bogus").
std::string FieldNamedIn(const std::string& message) {
  static const std::regex patterns[] = {
      std::regex(R"(^\(?([A-Za-z0-9_.\[\]]+)\)?: )"),
      std::regex(R"(Cannot find field: ([A-Za-z0-9_.]+))"),
      std::regex(R"(enum field ([A-Za-z0-9_.]+))"),
  };
  std::smatch match;
  for (const auto& pattern : patterns) {
    if (std::regex_search(message, match, pattern)) return match[1].str();
  }
  return "body";
}

}  // namespace

boost::system::result<Encoding, FieldError> EncodingFromContentType(
    const std::string& content_type) {
  const std::string media = MediaType(content_type);
  if (media.empty() || media == kJsonContentType) return Encoding::kJson;
  if (media == kProtobufContentType || media == "application/protobuf") {
    return Encoding::kProtobuf;
  }
  return FieldError{"Content-Type", "unsupported media type '" + media + "'; use " +
                                        kJsonContentType + " or " + kProtobufContentType};
}

boost::system::result<void, FieldError> DecodeMessage(const std::string& body, Encoding encoding,
                                                      google::protobuf::Message& message) {
  if (encoding == Encoding::kProtobuf) {
    if (!message.ParseFromString(body)) {
      return FieldError{"body", "is not a valid binary " + message.GetTypeName() + " message"};
    }
    return {};
  }
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return FieldError{"body", "is empty; expected a JSON " + message.GetTypeName() + " object"};
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(body, &message, options);
  if (!status.ok()) {
    const std::string text(status.message());
    return FieldError{FieldNamedIn(text), "invalid JSON " + message.GetTypeName() + ": " + text};
  }
  return {};
}

std::string EncodeMessage(const google::protobuf::Message& message, Encoding encoding) {
  std::string out;
  if (encoding == Encoding::kProtobuf) {
    message.SerializeToString(&out);
    return out;
  }
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(message, &out, options).ok()) {
    // Only invalid UTF-8 makes this fail; results are sanitised before this.
    return R"({"code":500,"field":"","message":"response could not be encoded"})";
  }
  out += '\n';
  return out;
}

const char* ContentTypeOf(Encoding encoding) {
  return encoding == Encoding::kProtobuf ? kProtobufContentType : kJsonContentType;
}

}  // namespace kbox
