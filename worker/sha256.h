#pragma once

// SHA-256 through OpenSSL's libcrypto: incremental, or of one buffer. What
// kbox names by content (build cache keys and files, the harness's digest,
// the compile tier's artifacts, API token digests) is hashed here.

#include <openssl/evp.h>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace kbox {

class Sha256 {
 public:
  using Digest = std::array<unsigned char, 32>;
  // Throws std::runtime_error only when libcrypto itself fails.
  Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  ~Sha256();

  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Ends the hash: call one of them once.
  Digest Final();
  std::string HexDigest();

 private:
  EVP_MD_CTX* ctx_;
};

// The digest of `data`, raw and as 64 lower-case hex digits.
Sha256::Digest Sha256Digest(std::string_view data);
std::string Sha256Hex(std::string_view data);

}  // namespace kbox
