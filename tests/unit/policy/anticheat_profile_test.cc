// The anti-cheat profiles: the shipped ones load and grade every rule, and a
// malformed profile is refused with the file and line.
#include "policy/static_check/anticheat_profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "policy/static_check/rule_catalog.h"

namespace kbox::static_check {
namespace {

const std::filesystem::path kDir = KBOX_ANTICHEAT_PROFILE_DIR;

TEST(AnticheatProfileTest, StrictNamesEveryRuleAndRejectsAllButWorkspaceStateAndDegenerateProblems) {
  std::ifstream in(kDir / "strict.profile");
  std::stringstream text;
  text << in.rdbuf();
  for (const RuleInfo& r : RuleCatalog()) {
    EXPECT_NE(text.str().find("\n" + std::string(r.id) + " "), std::string::npos) << r.id << " not named";
  }
  auto strict = AnticheatProfile::Load(kDir, "strict");
  ASSERT_TRUE(strict) << strict.error().field << ": " << strict.error().message;
  for (const RuleInfo& r : RuleCatalog()) {
    // A candidate may legitimately skip reading inputs, so a time below the
    // physical floor is reported, not rejected.
    const Severity expected = r.id == "py.forward-stores-state" || r.id == "run.below-physical-floor"
                                  ? Severity::kSuspicious
                              : r.id == "run.degenerate-problem" || r.id == "run.rounding-allowance"
                                  ? Severity::kInfo
                                                                 : Severity::kReject;
    EXPECT_EQ(strict->severity(r.id), expected) << r.id;
  }
  EXPECT_FALSE(strict->all_off());
}

TEST(AnticheatProfileTest, LenientKeepsEvaluatorAndEscapeRulesAtReject) {
  auto lenient = AnticheatProfile::Load(kDir, "lenient");
  ASSERT_TRUE(lenient) << lenient.error().field << ": " << lenient.error().message;
  EXPECT_EQ(lenient->severity("py.library-compute-in-forward"), Severity::kSuspicious);
  for (std::string_view id : {"py.patch-library", "py.evaluator-access", "py.process", "py.network",
                              "py.file-io", "py.forward-skips-kernel", "kernel.none", "cpp.include-path",
                              "py.tensor-subclass", "py.identity-key", "py.concurrency",
                              "run.forbidden-call", "run.timing-mismatch", "run.harness-tampering",
                              "cpp.dispatcher", "cpp.process-or-io", "cpp.dynamic-loading", "run.native-dispatcher",
                              "run.native-forbidden-call", "run.native-unreadable", "run.background-work"}) {
    EXPECT_EQ(lenient->severity(id), Severity::kReject) << id;
  }
  // Lenient tolerates passthrough, which may leave the candidate's own kernel unlaunched.
  EXPECT_EQ(lenient->severity("run.kernel-not-launched"), Severity::kSuspicious);
  EXPECT_EQ(lenient->severity("run.below-physical-floor"), Severity::kSuspicious);
  // Passthrough and threads in the built library are reported as the text rules are.
  for (std::string_view id : {"run.native-library-compute", "run.native-thread", "cpp.vendor-library",
                              "cpp.thread"}) {
    EXPECT_EQ(lenient->severity(id), Severity::kSuspicious) << id;
  }
}

TEST(AnticheatProfileTest, OffSwitchesEverythingOff) {
  auto off = AnticheatProfile::Load(kDir, "off");
  ASSERT_TRUE(off);
  EXPECT_TRUE(off->all_off());
}

TEST(AnticheatProfileTest, OverridesReplaceSeverityAndRefuseUnknownRules) {
  auto strict = AnticheatProfile::Load(kDir, "strict");
  ASSERT_TRUE(strict);
  auto relaxed = strict->WithOverrides({{"py.matmul-operator", Severity::kInfo}});
  ASSERT_TRUE(relaxed);
  EXPECT_EQ(relaxed->severity("py.matmul-operator"), Severity::kInfo);
  EXPECT_EQ(strict->severity("py.matmul-operator"), Severity::kReject);
  auto bad = strict->WithOverrides({{"py.no-such-rule", Severity::kOff}});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "anticheat_overrides[py.no-such-rule]");
}

TEST(AnticheatProfileTest, ParseErrorsNameFileAndLine) {
  struct Case {
    const char* text;
    const char* field;
    const char* message_part;
  };
  const Case cases[] = {
      {"default off\npy.bogus reject # x\n", "t.profile:2", "unknown rule"},
      {"default off\npy.matmul-operator fatal\n", "t.profile:2", "unknown severity"},
      {"default off\npy.matmul-operator reject\npy.matmul-operator info\n", "t.profile:3", "given twice"},
      {"default off\ndefault info\n", "t.profile:2", "twice"},
      {"default off\nextends strict\n", "t.profile:2", "must come first"},
      {"py.matmul-operator reject\n", "t.profile", "not graded"},
      {"default\n", "t.profile:1", "expected"},
      {"default off extra\n", "t.profile:1", "one value"},
  };
  for (const Case& c : cases) {
    auto p = AnticheatProfile::Parse(c.text, "t", kDir);
    ASSERT_FALSE(p) << c.text;
    EXPECT_EQ(p.error().field, c.field) << c.text;
    EXPECT_NE(p.error().message.find(c.message_part), std::string::npos) << p.error().message;
  }
}

TEST(AnticheatProfileTest, ExtendsCycleAndMissingProfilesAreRefused) {
  const auto dir = std::filesystem::temp_directory_path() / ("kbox-profile-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.profile") << "extends b\n";
  std::ofstream(dir / "b.profile") << "extends a\n";
  auto cyclic = AnticheatProfile::Load(dir, "a");
  EXPECT_FALSE(cyclic);
  auto missing = AnticheatProfile::Load(dir, "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().field, "anticheat_profile");
  auto traversal = AnticheatProfile::Load(dir, "../a");
  ASSERT_FALSE(traversal);
  EXPECT_NE(traversal.error().message.find("[a-z0-9_-]"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(AnticheatProfileTest, SeverityNamesRoundTrip) {
  for (Severity s : {Severity::kOff, Severity::kInfo, Severity::kSuspicious, Severity::kReject}) {
    Severity back = Severity::kOff;
    ASSERT_TRUE(ParseSeverity(SeverityName(s), &back));
    EXPECT_EQ(back, s);
  }
  Severity ignored;
  EXPECT_FALSE(ParseSeverity("REJECT", &ignored));
}

TEST(RuleCatalogTest, IdsAreSortedUniqueAndFindable) {
  const auto rules = RuleCatalog();
  for (size_t i = 1; i < rules.size(); ++i) EXPECT_LT(rules[i - 1].id, rules[i].id);
  for (const RuleInfo& r : rules) {
    EXPECT_EQ(FindRule(r.id), &r);
    EXPECT_FALSE(r.summary.empty());
    EXPECT_TRUE(r.id.starts_with("py.") || r.id.starts_with("cpp.") || r.id.starts_with("kernel.") ||
                r.id.starts_with("run."))
        << r.id;
  }
  EXPECT_EQ(FindRule("py.nope"), nullptr);
}

}  // namespace
}  // namespace kbox::static_check
