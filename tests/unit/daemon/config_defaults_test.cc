// Every default that config.proto's comments state is the one the loader
// applies: a comment that says "Default 16 GiB" while ApplyConfigDefaults
// sets 8 GiB misleads every operator who reads the proto instead of the code.
//
// Each field's comment is read for "Default <value>" or "Absent: <value>"
// where <value> is a literal: a quoted string, true/false, "empty", or a
// number with an optional KiB/MiB/GiB unit. Defaults given as prose ("the one
// beside kboxd", "compile_time_limit_s + 60") or as templates of other
// settings ("$TMPDIR/kbox-<pid>") are not literals and are skipped; the test counts what it checked, so a comment
// style that stops matching fails it too.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/config_loader.h"

namespace kbox {
namespace {

struct StatedDefault {
  std::string field;
  std::string value;  // As written: "\"strict\"", "4 MiB", "true", "empty", "0.01".
};

// The stated default of each field of `message` (a section of DaemonConfig)
// in the proto source `text`.
std::vector<StatedDefault> StatedDefaults(const std::string& text, const std::string& message) {
  std::vector<StatedDefault> out;
  std::istringstream in(text);
  std::string line, comment;
  bool inside = false;
  const std::regex field_re(R"(^\s+(?:optional\s+|repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*;)");
  const std::regex default_re(
      R"((?:\bDefault|\bAbsent:)\s+("[^"]*"|true\b|false\b|empty\b|-?\d+(?:\.\d+)?(?:\s*(?:KiB|MiB|GiB)\b)?))");
  while (std::getline(in, line)) {
    if (!inside) {
      inside = line.rfind("message " + message + " {", 0) == 0;
      continue;
    }
    if (line == "}") break;
    const auto slash = line.find("//");
    if (slash != std::string::npos && line.find_first_not_of(" ") == slash) {
      comment += " " + line.substr(slash + 2);
      continue;
    }
    std::smatch field;
    if (std::regex_search(line, field, field_re)) {
      std::smatch stated;
      if (std::regex_search(comment, stated, default_re)) out.push_back({field[1], stated[1]});
    }
    comment.clear();
  }
  return out;
}

// `value` read as a number of the field's unit (KiB/MiB/GiB scale bytes).
std::optional<double> Number(const std::string& value) {
  std::smatch m;
  if (!std::regex_match(value, m, std::regex(R"((-?\d+(?:\.\d+)?)\s*(KiB|MiB|GiB)?)"))) return std::nullopt;
  double n = std::stod(m[1]);
  if (m[2] == "KiB") n *= 1024.0;
  if (m[2] == "MiB") n *= 1024.0 * 1024.0;
  if (m[2] == "GiB") n *= 1024.0 * 1024.0 * 1024.0;
  return n;
}

TEST(ConfigDefaultsTest, EveryDefaultACommentStatesIsTheLoadersDefault) {
  std::ifstream file(std::string(KBOX_SOURCE_DIR) + "/proto/kbox/v1/config.proto");
  ASSERT_TRUE(file) << "cannot read config.proto";
  std::stringstream text;
  text << file.rdbuf();
  const auto applied_config = ApplyConfigDefaults(v1::DaemonConfig(), 4);
  ASSERT_TRUE(applied_config);
  namespace pb = google::protobuf;
  const pb::Descriptor* top = applied_config->GetDescriptor();
  // Each field of DaemonConfig is a section; its settings' comments are in
  // the section's own message.
  std::vector<std::pair<StatedDefault, const pb::Message*>> stated;
  for (int i = 0; i < top->field_count(); ++i) {
    const pb::FieldDescriptor* section = top->field(i);
    ASSERT_EQ(section->type(), pb::FieldDescriptor::TYPE_MESSAGE) << section->name() << " is not a section";
    const pb::Message& applied_section =
        applied_config->GetReflection()->GetMessage(*applied_config, section);
    for (auto& s : StatedDefaults(text.str(), section->message_type()->name())) {
      stated.push_back({s, &applied_section});
    }
  }
  int checked = 0;
  for (const auto& [stated_default, applied] : stated) {
    const auto& [name, value] = stated_default;
    const pb::Reflection* reflection = applied->GetReflection();
    const pb::FieldDescriptor* field = applied->GetDescriptor()->FindFieldByName(name);
    ASSERT_NE(field, nullptr) << name;
    if (field->is_repeated()) continue;
    // A default built from other settings ("$TMPDIR/kbox-<pid>",
    // "<work_dir>/build-cache") is a template, not a literal.
    if (value.find_first_of("$<") != std::string::npos) continue;
    SCOPED_TRACE(name + ": the comment says " + value);
    switch (field->cpp_type()) {
      case pb::FieldDescriptor::CPPTYPE_STRING: {
        const std::string got = reflection->GetString(*applied, field);
        if (value == "empty") {
          EXPECT_EQ(got, "");
        } else {
          ASSERT_EQ(value.front(), '"') << "a string field's default is not a string";
          EXPECT_EQ(got, value.substr(1, value.size() - 2));
        }
        break;
      }
      case pb::FieldDescriptor::CPPTYPE_BOOL:
        ASSERT_TRUE(value == "true" || value == "false");
        EXPECT_EQ(reflection->GetBool(*applied, field), value == "true");
        break;
      case pb::FieldDescriptor::CPPTYPE_UINT32:
      case pb::FieldDescriptor::CPPTYPE_UINT64:
      case pb::FieldDescriptor::CPPTYPE_INT32:
      case pb::FieldDescriptor::CPPTYPE_INT64:
      case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      case pb::FieldDescriptor::CPPTYPE_FLOAT: {
        const auto want = Number(value);
        ASSERT_TRUE(want.has_value()) << "a number field's default is not a number";
        double got = 0;
        switch (field->cpp_type()) {
          case pb::FieldDescriptor::CPPTYPE_UINT32: got = reflection->GetUInt32(*applied, field); break;
          case pb::FieldDescriptor::CPPTYPE_UINT64:
            got = static_cast<double>(reflection->GetUInt64(*applied, field));
            break;
          case pb::FieldDescriptor::CPPTYPE_INT32: got = reflection->GetInt32(*applied, field); break;
          case pb::FieldDescriptor::CPPTYPE_INT64:
            got = static_cast<double>(reflection->GetInt64(*applied, field));
            break;
          case pb::FieldDescriptor::CPPTYPE_DOUBLE: got = reflection->GetDouble(*applied, field); break;
          default: got = reflection->GetFloat(*applied, field); break;
        }
        EXPECT_NEAR(got, *want, 1e-9 * std::max(1.0, std::fabs(*want)));
        break;
      }
      default:
        ADD_FAILURE() << "no literal default is expected for this field's type";
    }
    ++checked;
  }
  // Today's comments state about 50 literal defaults; far fewer means the
  // reading above stopped matching them.
  EXPECT_GE(checked, 40) << "only " << checked << " stated defaults were found";
}

}  // namespace
}  // namespace kbox
