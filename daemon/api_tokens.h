#pragma once

// API bearer tokens (docs/api.md, "Authentication"): the tokens file, and
// which token an `Authorization: Bearer <secret>` header names.
//
// The tokens file is UTF-8 text, one token per line:
//
//   <name> <secret> [max_concurrent_jobs]
//
// whitespace separated; blank lines and lines starting with `#` are ignored.
// A name is 1-64 of [a-z0-9_-] and may be logged; a secret is 16-1024
// printable ASCII characters and is never logged, never echoed in an error,
// and kept only as its SHA-256 digest. max_concurrent_jobs (0 or absent: no
// per-token limit) bounds the token's jobs in flight (job_admission.h).
// Names and secrets are unique within a file.
//
// Secrets are compared in constant time: the presented secret's SHA-256
// against every token's digest with CRYPTO_memcmp, never stopping early, so
// the time taken does not tell how much of a guess was right.

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/system/result.hpp>

namespace kbox {

// One token, as far as anything besides the authentication may see it.
struct ApiToken {
  std::string name;
  uint32_t max_concurrent_jobs = 0;  // 0: no per-token limit.
};

// What an Authorization header amounts to.
struct Authentication {
  enum class Outcome {
    kAccepted,  // `token` is set.
    kMissing,   // No Authorization header.
    kMalformed, // Not "Bearer <secret>".
    kInvalid,   // A bearer secret no token has.
  };
  Outcome outcome = Outcome::kMissing;
  std::optional<ApiToken> token;
};

// An immutable, parsed tokens file.
class ApiTokenTable {
 public:
  // Parses a tokens file's text. Errors read "<source> line N: ..." and
  // never contain a field of the file.
  static boost::system::result<ApiTokenTable, std::string> Parse(std::string_view text,
                                                                const std::string& source);

  // The token whose secret is `secret`: compares against every entry in
  // constant time (see above).
  std::optional<ApiToken> Find(std::string_view secret) const;

  size_t size() const { return entries_.size(); }
  // Names in file order (for logs).
  std::vector<std::string> names() const;

 private:
  using Digest = std::array<unsigned char, 32>;
  struct Entry {
    ApiToken token;
    Digest digest;
  };
  static Digest Sha256(std::string_view bytes);

  std::vector<Entry> entries_;
};

// The daemon's tokens: a file read at start-up and again on Reload (SIGHUP).
// Thread-safe; a request authenticates against the table current when it
// arrives.
class ApiTokens {
 public:
  // Reads `path`; the error says why (file and line, never a secret).
  static boost::system::result<std::unique_ptr<ApiTokens>, std::string> Open(std::string path);

  // Re-reads the file. On success the new table replaces the old one (its
  // size is returned); on any error the old table stays and the error is
  // returned.
  boost::system::result<size_t, std::string> Reload();

  // The token an Authorization header value names.
  Authentication Authenticate(std::string_view authorization) const;

  const std::string& path() const { return path_; }
  std::shared_ptr<const ApiTokenTable> table() const;

 private:
  ApiTokens(std::string path, ApiTokenTable table);

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const ApiTokenTable> table_;
};

}  // namespace kbox
