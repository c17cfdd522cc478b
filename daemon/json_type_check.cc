#include "daemon/json_type_check.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <optional>
#include <string_view>
#include <vector>

#include "daemon/message_codec.h"

namespace kbox {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Value;

// How a JSON value reads to a client, for error messages.
const char* KindName(const Value& value) {
  switch (value.kind_case()) {
    case Value::kNullValue: return "null";
    case Value::kBoolValue: return "a boolean";
    case Value::kNumberValue: return "a number";
    case Value::kStringValue: return "a string";
    case Value::kStructValue: return "an object";
    case Value::kListValue: return "an array";
    default: return "nothing";
  }
}

// The well-known types whose JSON form is not an object of their fields:
// the wrappers (checked as their `value` field) and the rest (left to the
// parser, which knows their special forms).
bool IsWrapper(const Descriptor& type) {
  static constexpr std::string_view kWrappers[] = {
      "google.protobuf.BoolValue",   "google.protobuf.Int32Value",  "google.protobuf.UInt32Value",
      "google.protobuf.Int64Value",  "google.protobuf.UInt64Value", "google.protobuf.FloatValue",
      "google.protobuf.DoubleValue", "google.protobuf.StringValue", "google.protobuf.BytesValue"};
  for (std::string_view name : kWrappers) {
    if (type.full_name() == name) return true;
  }
  return false;
}

bool HasSpecialJsonForm(const Descriptor& type) {
  return type.file()->name().starts_with("google/protobuf/") && !IsWrapper(type);
}

class TypeChecker {
 public:
  // Fields in the schema's order, so the first error named does not depend
  // on the order of a hash map. Each field is looked up under both names the
  // parser accepts: its proto name and its JSON name (lowerCamelCase unless
  // the schema says otherwise); keys it does not know it has refused already.
  std::optional<FieldError> Message(const google::protobuf::Struct& object, const Descriptor& type,
                                    const std::string& path) {
    const auto& keys = object.fields();
    for (int i = 0; i < type.field_count(); ++i) {
      const FieldDescriptor& field = *type.field(i);
      const std::string here = path.empty() ? field.name() : path + "." + field.name();
      for (const std::string& key : {field.name(), field.json_name()}) {
        const auto found = keys.find(key);
        if (found == keys.end()) continue;
        if (auto refused = Field(found->second, field, here)) return refused;
      }
    }
    return std::nullopt;
  }

 private:
  std::optional<FieldError> Field(const Value& value, const FieldDescriptor& field,
                                  const std::string& path) {
    if (value.kind_case() == Value::kNullValue) return std::nullopt;
    if (field.is_map()) {
      if (value.kind_case() != Value::kStructValue) return Refuse(path, "an object", value);
      const FieldDescriptor& mapped = *field.message_type()->map_value();
      const auto& entries = value.struct_value().fields();
      std::vector<std::string> keys;
      for (const auto& entry : entries) keys.push_back(entry.first);
      std::sort(keys.begin(), keys.end());
      for (const std::string& key : keys) {
        if (auto refused = Single(entries.at(key), mapped, path + "[" + ClientText(key, 128) + "]")) {
          return refused;
        }
      }
      return std::nullopt;
    }
    if (field.is_repeated()) {
      if (value.kind_case() != Value::kListValue) return Refuse(path, "an array", value);
      const auto& items = value.list_value().values();
      for (int i = 0; i < items.size(); ++i) {
        if (auto refused = Single(items[i], field, path + "[" + std::to_string(i) + "]")) {
          return refused;
        }
      }
      return std::nullopt;
    }
    return Single(value, field, path);
  }

  // One value of `field`'s type (an element, when the field is repeated).
  std::optional<FieldError> Single(const Value& value, const FieldDescriptor& field,
                                   const std::string& path) {
    const auto kind = value.kind_case();
    if (kind == Value::kNullValue) return std::nullopt;
    switch (field.cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL:
        if (kind != Value::kBoolValue) return Refuse(path, "true or false", value);
        return std::nullopt;
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_UINT32:
        if (kind != Value::kNumberValue) return Refuse(path, "a JSON number", value);
        return std::nullopt;
      case FieldDescriptor::CPPTYPE_INT64:
      case FieldDescriptor::CPPTYPE_UINT64:
        if (kind != Value::kNumberValue && kind != Value::kStringValue) {
          return Refuse(path, "a JSON number or a string of digits", value);
        }
        return std::nullopt;
      case FieldDescriptor::CPPTYPE_FLOAT:
      case FieldDescriptor::CPPTYPE_DOUBLE:
        if (kind == Value::kNumberValue) return std::nullopt;
        if (kind == Value::kStringValue) {
          const std::string& text = value.string_value();
          if (text == "NaN" || text == "Infinity" || text == "-Infinity") return std::nullopt;
        }
        return Refuse(path, "a JSON number (or \"NaN\", \"Infinity\", \"-Infinity\")", value);
      case FieldDescriptor::CPPTYPE_ENUM:
        if (kind != Value::kStringValue && kind != Value::kNumberValue) {
          return Refuse(path, "an enum value name or number", value);
        }
        return std::nullopt;
      case FieldDescriptor::CPPTYPE_STRING:
        if (kind != Value::kStringValue) return Refuse(path, "a string", value);
        return std::nullopt;
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        const Descriptor& type = *field.message_type();
        if (IsWrapper(type)) return Single(value, *type.FindFieldByName("value"), path);
        if (HasSpecialJsonForm(type)) return std::nullopt;
        if (kind != Value::kStructValue) return Refuse(path, "an object", value);
        return Message(value.struct_value(), type, path);
      }
    }
    return std::nullopt;
  }

  static FieldError Refuse(const std::string& path, const char* wanted, const Value& got) {
    std::string message = "must be " + std::string(wanted) + ", not " + KindName(got);
    if (got.kind_case() == Value::kStringValue) {
      message += " (\"" + ClientText(got.string_value(), 64) + "\")";
    }
    return FieldError{path, message};
  }
};

}  // namespace

boost::system::result<void, FieldError> CheckJsonTypes(const std::string& body,
                                                       const Descriptor& type) {
  // Parsed by the same parser as the message, so both see the same keys and
  // values (a second JSON library could disagree on escapes or duplicates).
  Value parsed;
  if (!google::protobuf::util::JsonStringToMessage(body, &parsed).ok()) {
    return FieldError{"body", "could not be parsed for its JSON types"};
  }
  if (parsed.kind_case() != Value::kStructValue) {
    return FieldError{"body", "must be a JSON object"};
  }
  if (auto refused = TypeChecker().Message(parsed.struct_value(), type, "")) return *refused;
  return {};
}

}  // namespace kbox
