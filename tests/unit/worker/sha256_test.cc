#include "worker/sha256.h"

#include <gtest/gtest.h>

#include <string>

namespace kbox {
namespace {

// FIPS 180-2's test vectors.
TEST(Sha256Test, KnownDigests) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256Test, IncrementalEqualsWhole) {
  const std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Sha256 hash;
  hash.Update(text.substr(0, 7));
  hash.Update(text.data() + 7, text.size() - 7);
  EXPECT_EQ(hash.HexDigest(), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const Sha256::Digest raw = Sha256Digest("abc");
  EXPECT_EQ(raw[0], 0xba);
  EXPECT_EQ(raw[31], 0xad);
}

}  // namespace
}  // namespace kbox
