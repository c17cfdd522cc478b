#include "daemon/api_tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"

namespace kbox {
namespace {

constexpr const char* kAliceSecret = "alice-secret-0123456789";
constexpr const char* kBobSecret = "bob-secret-abcdefghijkl";

std::string ParseError(const std::string& text) {
  auto table = ApiTokenTable::Parse(text, "tokens");
  EXPECT_FALSE(table.has_value()) << "parsed: " << text;
  return table ? "" : table.error();
}

TEST(ApiTokenTableTest, ParsesNamesSecretsAndLimits) {
  auto table = ApiTokenTable::Parse(
      "# trainers\n"
      "\n"
      "alice alice-secret-0123456789 2\n"
      "  bob\tbob-secret-abcdefghijkl   \r\n"
      "ci_runner-1 ci-secret-000000000000 0\n",
      "tokens");
  ASSERT_TRUE(table.has_value()) << table.error();
  EXPECT_EQ(table->size(), 3u);
  EXPECT_EQ(table->names(), (std::vector<std::string>{"alice", "bob", "ci_runner-1"}));
  auto alice = table->Find(kAliceSecret);
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->max_concurrent_jobs, 2u);
  auto bob = table->Find(kBobSecret);
  ASSERT_TRUE(bob.has_value());
  EXPECT_EQ(bob->name, "bob");
  EXPECT_EQ(bob->max_concurrent_jobs, 0u);  // Absent: no per-token limit.
}

TEST(ApiTokenTableTest, FindsOnlyTheExactSecret) {
  auto table = ApiTokenTable::Parse("alice alice-secret-0123456789\n", "tokens");
  ASSERT_TRUE(table.has_value());
  EXPECT_FALSE(table->Find("alice-secret-012345678").has_value());    // A prefix.
  EXPECT_FALSE(table->Find("alice-secret-01234567890").has_value());  // Longer.
  EXPECT_FALSE(table->Find("alice-secret-0123456788").has_value());   // Last char differs.
  EXPECT_FALSE(table->Find("ALICE-SECRET-0123456789").has_value());
  EXPECT_FALSE(table->Find("").has_value());
  EXPECT_FALSE(table->Find("alice").has_value());  // A name is not a secret.
}

TEST(ApiTokenTableTest, BadLinesNameTheLineAndNeverTheSecret) {
  const std::string secret = "s3cret-that-must-not-leak";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"alice " + secret + " 1 extra\n", "tokens line 1: expected '<name> <secret> [max_concurrent_jobs]', got 4 fields"},
      {"# ok\n" + secret + "\n", "tokens line 2: expected '<name> <secret> [max_concurrent_jobs]', got a name only"},
      {"Alice " + secret + "\n", "tokens line 1: the name must be 1 to 64 of a-z, 0-9, '_' and '-'"},
      {std::string(65, 'a') + " " + secret + "\n", "tokens line 1: the name must be 1 to 64 of a-z, 0-9, '_' and '-'"},
      // Columns swapped: the secret lands in the name column.
      {secret + "X alice\n", "tokens line 1: the name must be 1 to 64 of a-z, 0-9, '_' and '-'"},
      {"alice short\n", "tokens line 1: the secret must be at least 16 characters"},
      {"alice " + std::string(1025, 'x') + "\n", "tokens line 1: the secret must be at most 1024 characters"},
      {"alice s3cret-\x01-must-not-leak\n", "tokens line 1: the secret must be printable ASCII"},
      {"alice " + secret + " -1\n", "tokens line 1: max_concurrent_jobs must be a whole number from 0 to 4096"},
      {"alice " + secret + " 4097\n", "tokens line 1: max_concurrent_jobs must be a whole number from 0 to 4096"},
      {"alice " + secret + " 2x\n", "tokens line 1: max_concurrent_jobs must be a whole number from 0 to 4096"},
      {"alice " + secret + "\n\nalice other-secret-0123456789\n", "tokens line 3: the same name as line 1"},
      {"alice " + secret + "\nbob " + secret + "\n", "tokens line 2: the same secret as line 1"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string error = ParseError(text);
    EXPECT_EQ(error, expected) << text;
    EXPECT_EQ(error.find("s3cret"), std::string::npos) << error;
  }
}

TEST(ApiTokenTableTest, AFileWithoutTokensIsAnError) {
  EXPECT_NE(ParseError("# nobody yet\n\n").find("tokens: no tokens"), std::string::npos);
  EXPECT_NE(ParseError("").find("no tokens"), std::string::npos);
}

// The lookup compares against every token whatever matched: finding the
// first of many tokens takes as long as finding the last or none. A lookup
// that stopped at the first match would be hundreds of times faster for the
// first token; the bound below allows for a noisy machine, not for that.
TEST(ApiTokenTableTest, LookupTimeDoesNotDependOnWhichTokenMatches) {
  constexpr int kTokens = 2000;
  std::string text;
  for (int i = 0; i < kTokens; ++i) {
    text += "t" + std::to_string(i) + " secret-number-" + std::to_string(1000000 + i) + "\n";
  }
  auto table = ApiTokenTable::Parse(text, "tokens");
  ASSERT_TRUE(table.has_value()) << table.error();
  const std::string first = "secret-number-" + std::to_string(1000000);
  const std::string last = "secret-number-" + std::to_string(1000000 + kTokens - 1);
  const std::string none = "secret-number-none-of-them";
  auto median_ns = [&](const std::string& secret) {
    std::vector<int64_t> samples;
    for (int i = 0; i < 101; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      auto found = table->Find(secret);
      const auto t1 = std::chrono::steady_clock::now();
      EXPECT_EQ(found.has_value(), secret != none);
      samples.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    }
    std::nth_element(samples.begin(), samples.begin() + 50, samples.end());
    return static_cast<double>(samples[50]);
  };
  const double t_first = median_ns(first);
  const double t_last = median_ns(last);
  const double t_none = median_ns(none);
  EXPECT_GT(t_first, t_last / 4) << "first " << t_first << " ns, last " << t_last << " ns";
  EXPECT_GT(t_first, t_none / 4) << "first " << t_first << " ns, none " << t_none << " ns";
}

class ApiTokensTest : public ::testing::Test {
 protected:
  void Write(const std::string& text) {
    std::ofstream out(path_, std::ios::trunc);
    out << text;
  }
  testing::TempDir dir_;
  std::string path_ = (dir_.path() / "tokens").string();
};

TEST_F(ApiTokensTest, AuthenticatesBearerHeaders) {
  Write(std::string("alice ") + kAliceSecret + " 3\n");
  auto tokens = ApiTokens::Open(path_);
  ASSERT_TRUE(tokens.has_value()) << tokens.error();
  using Outcome = Authentication::Outcome;
  const auto ok = (*tokens)->Authenticate(std::string("Bearer ") + kAliceSecret);
  EXPECT_EQ(ok.outcome, Outcome::kAccepted);
  ASSERT_TRUE(ok.token.has_value());
  EXPECT_EQ(ok.token->name, "alice");
  EXPECT_EQ(ok.token->max_concurrent_jobs, 3u);
  // The scheme is case-insensitive (RFC 6750), the secret is not.
  EXPECT_EQ((*tokens)->Authenticate(std::string("bearer  ") + kAliceSecret).outcome,
            Outcome::kAccepted);
  EXPECT_EQ((*tokens)->Authenticate("").outcome, Outcome::kMissing);
  EXPECT_EQ((*tokens)->Authenticate(std::string("Basic ") + kAliceSecret).outcome,
            Outcome::kMalformed);
  EXPECT_EQ((*tokens)->Authenticate("Bearer").outcome, Outcome::kMalformed);
  EXPECT_EQ((*tokens)->Authenticate("Bearer    ").outcome, Outcome::kMalformed);
  EXPECT_EQ((*tokens)->Authenticate(std::string("Bearer") + kAliceSecret).outcome,
            Outcome::kMalformed);
  EXPECT_EQ((*tokens)->Authenticate(std::string("Bearer ") + kBobSecret).outcome,
            Outcome::kInvalid);
  EXPECT_FALSE((*tokens)->Authenticate(std::string("Bearer ") + kBobSecret).token.has_value());
}

TEST_F(ApiTokensTest, StartupErrorNamesTheFile) {
  auto missing = ApiTokens::Open(path_);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error(), "cannot read tokens file " + path_);
  Write("alice tooshort\n");
  auto bad = ApiTokens::Open(path_);
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error(), path_ + " line 1: the secret must be at least 16 characters");
}

TEST_F(ApiTokensTest, ReloadAddsAndRevokes) {
  Write(std::string("alice ") + kAliceSecret + "\n");
  auto tokens = ApiTokens::Open(path_);
  ASSERT_TRUE(tokens.has_value());
  const std::string alice = std::string("Bearer ") + kAliceSecret;
  const std::string bob = std::string("Bearer ") + kBobSecret;
  EXPECT_EQ((*tokens)->Authenticate(bob).outcome, Authentication::Outcome::kInvalid);
  Write(std::string("bob ") + kBobSecret + " 1\n");
  auto reloaded = (*tokens)->Reload();
  ASSERT_TRUE(reloaded.has_value()) << reloaded.error();
  EXPECT_EQ(*reloaded, 1u);
  EXPECT_EQ((*tokens)->Authenticate(bob).outcome, Authentication::Outcome::kAccepted);
  EXPECT_EQ((*tokens)->Authenticate(alice).outcome, Authentication::Outcome::kInvalid);
}

TEST_F(ApiTokensTest, BadReloadKeepsTheOldTokens) {
  Write(std::string("alice ") + kAliceSecret + "\n");
  auto tokens = ApiTokens::Open(path_);
  ASSERT_TRUE(tokens.has_value());
  Write(std::string("bob ") + kBobSecret + "\nbroken-line-without-secret\n");
  auto reloaded = (*tokens)->Reload();
  ASSERT_FALSE(reloaded.has_value());
  EXPECT_EQ(reloaded.error(), path_ +
                                  " line 2: expected '<name> <secret> [max_concurrent_jobs]', got "
                                  "a name only");
  EXPECT_EQ((*tokens)->Authenticate(std::string("Bearer ") + kAliceSecret).outcome,
            Authentication::Outcome::kAccepted);
  EXPECT_EQ((*tokens)->Authenticate(std::string("Bearer ") + kBobSecret).outcome,
            Authentication::Outcome::kInvalid);
}

}  // namespace
}  // namespace kbox
