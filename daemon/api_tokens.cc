#include "daemon/api_tokens.h"

#include <openssl/crypto.h>

#include <charconv>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "worker/sha256.h"

namespace kbox {

namespace {

constexpr size_t kMinSecretChars = 16;
// Longer than any sane secret, short enough that a header cannot make us
// hash megabytes.
constexpr size_t kMaxSecretChars = 1024;
constexpr size_t kMaxNameChars = 64;
// Same bound as max_in_flight_jobs: a larger per-token limit means nothing.
constexpr uint32_t kMaxConcurrentJobs = 4096;
// A tokens file holds names and secrets, not data: refuse anything larger.
constexpr std::streamsize kMaxFileBytes = 1 << 20;

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameChars) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Printable ASCII without spaces: what fits in an HTTP header unquoted.
bool ValidSecretChars(std::string_view secret) {
  for (char c : secret) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

// The file's text, or the error (empty when read).
std::string ReadTokensFile(const std::string& path, std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read tokens file " + path;
  text.assign(static_cast<size_t>(kMaxFileBytes) + 1, '\0');
  in.read(text.data(), kMaxFileBytes + 1);
  if (in.bad()) return "cannot read tokens file " + path;
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxFileBytes)) {
    return "tokens file " + path + " is larger than 1 MiB";
  }
  return "";
}

}  // namespace

ApiTokenTable::Digest ApiTokenTable::Sha256(std::string_view bytes) {
  // Throws only when libcrypto is broken: authenticating nobody is the safe answer.
  return Sha256Digest(bytes);
}

boost::system::result<ApiTokenTable, std::string> ApiTokenTable::Parse(std::string_view text,
                                                                      const std::string& source) {
  ApiTokenTable table;
  std::map<std::string, size_t, std::less<>> line_of_name;
  std::map<Digest, size_t> line_of_digest;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto fields = SplitFields(line);
    if (fields.empty() || fields[0].front() == '#') continue;
    // Errors below name the line and what is wrong, never a field: a
    // secret written in the wrong column must not reach a log.
    const std::string where = source + " line " + std::to_string(line_number) + ": ";
    if (fields.size() > 3) {
      return where + "expected '<name> <secret> [max_concurrent_jobs]', got " +
             std::to_string(fields.size()) + " fields";
    }
    if (fields.size() < 2) {
      return where + "expected '<name> <secret> [max_concurrent_jobs]', got a name only";
    }
    if (!ValidName(fields[0])) return where + "the name must be 1 to 64 of a-z, 0-9, '_' and '-'";
    const std::string_view secret = fields[1];
    if (secret.size() < kMinSecretChars) return where + "the secret must be at least 16 characters";
    if (secret.size() > kMaxSecretChars) {
      return where + "the secret must be at most 1024 characters";
    }
    if (!ValidSecretChars(secret)) return where + "the secret must be printable ASCII";
    uint32_t limit = 0;
    if (fields.size() == 3) {
      const std::string_view value = fields[2];
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), limit);
      if (ec != std::errc() || end != value.data() + value.size() || limit > kMaxConcurrentJobs) {
        return where + "max_concurrent_jobs must be a whole number from 0 to 4096";
      }
    }
    if (auto seen = line_of_name.find(fields[0]); seen != line_of_name.end()) {
      return where + "the same name as line " + std::to_string(seen->second);
    }
    Entry entry{.token = ApiToken{.name = std::string(fields[0]), .max_concurrent_jobs = limit},
                .digest = Sha256(secret)};
    if (auto seen = line_of_digest.find(entry.digest); seen != line_of_digest.end()) {
      return where + "the same secret as line " + std::to_string(seen->second);
    }
    line_of_name.emplace(entry.token.name, line_number);
    line_of_digest.emplace(entry.digest, line_number);
    table.entries_.push_back(std::move(entry));
  }
  if (table.entries_.empty()) {
    return source + ": no tokens (every request would be refused; to turn authentication off, "
                    "leave api_tokens_file empty)";
  }
  return table;
}

std::optional<ApiToken> ApiTokenTable::Find(std::string_view secret) const {
  const Digest presented = Sha256(secret);
  const Entry* match = nullptr;
  // Every entry is compared, whatever matched before: the time taken depends
  // on the table's size only.
  for (const Entry& entry : entries_) {
    const bool equal = CRYPTO_memcmp(entry.digest.data(), presented.data(), presented.size()) == 0;
    if (equal) match = &entry;
  }
  if (match == nullptr) return std::nullopt;
  return match->token;
}

std::vector<std::string> ApiTokenTable::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& entry : entries_) out.push_back(entry.token.name);
  return out;
}

ApiTokens::ApiTokens(std::string path, ApiTokenTable table)
    : path_(std::move(path)), table_(std::make_shared<const ApiTokenTable>(std::move(table))) {}

boost::system::result<std::unique_ptr<ApiTokens>, std::string> ApiTokens::Open(std::string path) {
  std::string text;
  if (auto error = ReadTokensFile(path, text); !error.empty()) return error;
  auto table = ApiTokenTable::Parse(text, path);
  if (!table) return table.error();
  return std::unique_ptr<ApiTokens>(new ApiTokens(std::move(path), std::move(*table)));
}

boost::system::result<size_t, std::string> ApiTokens::Reload() {
  std::string text;
  if (auto error = ReadTokensFile(path_, text); !error.empty()) return error;
  auto table = ApiTokenTable::Parse(text, path_);
  if (!table) return table.error();
  const size_t size = table->size();
  auto fresh = std::make_shared<const ApiTokenTable>(std::move(*table));
  std::lock_guard<std::mutex> lock(mu_);
  table_ = std::move(fresh);
  return size;
}

std::shared_ptr<const ApiTokenTable> ApiTokens::table() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_;
}

Authentication ApiTokens::Authenticate(std::string_view authorization) const {
  Authentication auth;
  if (authorization.empty()) return auth;  // kMissing
  // RFC 6750: the scheme is case-insensitive; one or more spaces follow it.
  constexpr std::string_view kScheme = "bearer";
  bool bearer = authorization.size() > kScheme.size() &&
                (authorization[kScheme.size()] == ' ' || authorization[kScheme.size()] == '\t');
  for (size_t i = 0; bearer && i < kScheme.size(); ++i) {
    const char c = authorization[i];
    bearer = (c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) == kScheme[i];
  }
  std::string_view secret;
  if (bearer) {
    secret = authorization.substr(kScheme.size());
    const size_t first = secret.find_first_not_of(" \t");
    secret = first == std::string_view::npos
                 ? std::string_view()
                 : secret.substr(first, secret.find_last_not_of(" \t") - first + 1);
  }
  if (!bearer || secret.empty() || secret.size() > kMaxSecretChars) {
    auth.outcome = Authentication::Outcome::kMalformed;
    return auth;
  }
  auth.token = table()->Find(secret);
  auth.outcome =
      auth.token ? Authentication::Outcome::kAccepted : Authentication::Outcome::kInvalid;
  return auth;
}

}  // namespace kbox
