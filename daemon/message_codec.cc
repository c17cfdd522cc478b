#include "daemon/message_codec.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/unknown_field_set.h>

#include "daemon/json_type_check.h"

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

// The path of the first field in `message` (depth first) that the schema
// does not know, as "field.sub (field number N)", or "" when there is none.
// A binary parse keeps unknown fields instead of refusing them; the JSON
// parser refuses them, and the two encodings must accept the same requests.
std::string FirstUnknownField(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return (path.empty() ? "" : path + " ") + "(field number " +
           std::to_string(unknown.field(0).number()) + ")";
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const auto* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    const std::string here = path.empty() ? field->name() : path + "." + field->name();
    if (!field->is_repeated()) {
      auto found = FirstUnknownField(reflection->GetMessage(message, field), here);
      if (!found.empty()) return found;
      continue;
    }
    for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
      auto found = FirstUnknownField(reflection->GetRepeatedMessage(message, field, i),
                                     here + "[" + std::to_string(i) + "]");
      if (!found.empty()) return found;
    }
  }
  return "";
}

// Length of the valid UTF-8 sequence at the start of `s`, 0 when invalid
// (overlong forms, surrogates and code points past U+10FFFF included).
size_t Utf8Length(std::string_view s) {
  const auto c = static_cast<unsigned char>(s[0]);
  size_t n = 0;
  uint32_t cp = 0;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1Fu;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0Fu;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07u;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto cc = static_cast<unsigned char>(s[k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3Fu);
  }
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
      (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
    return 0;
  }
  return n;
}

// What protobuf 3.21's JSON parser lets through: a key given twice in one
// object (it keeps the last value silently, so a request could say one thing
// to a reader and another to kboxd), and nesting as deep as the body is
// long. One pass over the structure, strings skipped; anything malformed is
// left for the parser to report. Keys are compared as written (an escaped
// spelling of a key is not caught here).
std::optional<FieldError> CheckJsonStructure(std::string_view body) {
  struct Level {
    bool object;
    bool expect_key;
    std::set<std::string_view, std::less<>> keys;
  };
  std::vector<Level> stack;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '{' || c == '[') {
      if (stack.size() == kMaxJsonDepth) {
        return FieldError{"body", "nests objects and arrays deeper than " +
                                      std::to_string(kMaxJsonDepth) + " levels"};
      }
      stack.push_back(Level{.object = c == '{', .expect_key = c == '{', .keys = {}});
    } else if (c == '}' || c == ']') {
      if (stack.empty()) return std::nullopt;
      stack.pop_back();
    } else if (c == ',') {
      if (!stack.empty() && stack.back().object) stack.back().expect_key = true;
    } else if (c == '"') {
      const size_t start = i + 1;
      for (++i; i < body.size() && body[i] != '"'; ++i) {
        if (body[i] == '\\') ++i;
      }
      if (i >= body.size()) return std::nullopt;
      if (!stack.empty() && stack.back().object && stack.back().expect_key) {
        const std::string_view key = body.substr(start, i - start);
        if (!stack.back().keys.insert(key).second) {
          if (key.empty()) return FieldError{"body", "gives the key \"\" twice in one JSON object"};
          return FieldError{ClientText(key, 128), "is given twice in one JSON object"};
        }
        stack.back().expect_key = false;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::string ClientText(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  size_t i = 0;
  while (i < text.size()) {
    const size_t len = Utf8Length(text.substr(i));
    std::string_view piece = len == 0 ? std::string_view("\xEF\xBF\xBD") : text.substr(i, len);
    const auto c = static_cast<unsigned char>(text[i]);
    if (len == 1 && (c < 0x20 || c == 0x7f)) piece = " ";
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece);
    i += len == 0 ? 1 : len;
  }
  return out;
}

boost::system::result<Encoding, FieldError> EncodingFromContentType(
    const std::string& content_type) {
  const std::string media = MediaType(content_type);
  if (media.empty() || media == kJsonContentType) return Encoding::kJson;
  if (media == kProtobufContentType || media == "application/protobuf") {
    return Encoding::kProtobuf;
  }
  return FieldError{"Content-Type", "unsupported media type '" + ClientText(media, 128) + "'; use " +
                                        kJsonContentType + " or " + kProtobufContentType};
}

boost::system::result<void, FieldError> DecodeMessage(const std::string& body, Encoding encoding,
                                                      google::protobuf::Message& message) {
  if (encoding == Encoding::kProtobuf) {
    if (!message.ParseFromString(body)) {
      return FieldError{"body", "is not a valid binary " + message.GetTypeName() + " message"};
    }
    if (const std::string unknown = FirstUnknownField(message, ""); !unknown.empty()) {
      return FieldError{"body", "has a field unknown to " + message.GetTypeName() + ": " + unknown};
    }
    return {};
  }
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) {
    return FieldError{"body", "is empty; expected a JSON " + message.GetTypeName() + " object"};
  }
  if (auto refused = CheckJsonStructure(body)) return *refused;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(body, &message, options);
  if (!status.ok()) {
    // The parser's message may quote the body's bytes, valid UTF-8 or not.
    const std::string text = ClientText(std::string(status.message()));
    return FieldError{FieldNamedIn(text), "invalid JSON " + message.GetTypeName() + ": " + text};
  }
  // What the parser accepted may still hold a string where the schema says
  // bool or number (json_type_check.h says why that is refused).
  return CheckJsonTypes(body, *message.GetDescriptor());
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
