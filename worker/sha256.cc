#include "worker/sha256.h"

#include <stdexcept>

namespace kbox {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::runtime_error("OpenSSL cannot initialise SHA-256");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(const void* data, size_t size) {
  if (size > 0 && EVP_DigestUpdate(ctx_, data, size) != 1) {
    throw std::runtime_error("OpenSSL SHA-256 update failed");
  }
}

Sha256::Digest Sha256::Final() {
  Digest digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_, digest.data(), &length) != 1 || length != digest.size()) {
    throw std::runtime_error("OpenSSL SHA-256 final failed");
  }
  return digest;
}

std::string Sha256::HexDigest() {
  static constexpr char kHex[] = "0123456789abcdef";
  const Digest digest = Final();
  std::string hex;
  hex.reserve(2 * digest.size());
  for (unsigned char byte : digest) {
    hex += kHex[byte >> 4];
    hex += kHex[byte & 0xf];
  }
  return hex;
}

Sha256::Digest Sha256Digest(std::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.Final();
}

std::string Sha256Hex(std::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.HexDigest();
}

}  // namespace kbox
