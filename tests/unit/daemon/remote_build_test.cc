// The compile tier's artifact (daemon/remote_build.h): a build cache entry
// sent as a BuildArtifact and written back checks every path and byte.
#include "daemon/remote_build.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/unit/temp_dir.h"
#include "worker/sha256.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;
using kbox::testing::TempDir;

void WriteFile(const fs::path& path, const std::string& content, mode_t mode = 0644) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  ::chmod(path.c_str(), mode);
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// An artifact made the way a compile node makes one: from a cache entry.
struct Built {
  TempDir tmp;
  std::unique_ptr<BuildCache> cache;
  v1::BuildArtifact artifact;

  Built() {
    BuildCacheOptions options;
    options.root = tmp.path() / "cache";
    options.max_bytes = 1 << 20;
    cache = std::move(*BuildCache::Open(std::move(options)));
    const fs::path build = tmp.path() / "build";
    WriteFile(build / "ext" / "ext.so", "ELF shared object", 0755);
    WriteFile(build / "ext" / "main.cpp", "int main() { return 0; }");
    fs::create_directories(build / "ext" / "empty");
    const std::string key = Sha256Hex("a build key");
    EXPECT_TRUE(cache->Insert(key, build, "built\n").stored());
    auto entry = cache->Lookup(key);
    auto files = ReadEntryFiles(*entry);
    EXPECT_TRUE(files) << (files ? "" : files.error());
    artifact = ArtifactOf(*files);
  }

  fs::path Fresh(const std::string& name) {
    const fs::path dir = tmp.path() / name;
    fs::create_directories(dir);
    return dir;
  }
};

TEST(RemoteBuildTest, AnArtifactWritesBackTheBuild) {
  Built b;
  ASSERT_EQ(b.artifact.files_size(), 4);  // ext, ext/empty, ext/ext.so, ext/main.cpp
  const fs::path dir = b.Fresh("job");
  ASSERT_TRUE(WriteBuildFiles(FilesOf(b.artifact), dir, 1 << 20).ok());
  EXPECT_EQ(ReadAll(dir / "ext" / "ext.so"), "ELF shared object");
  EXPECT_EQ(ReadAll(dir / "ext" / "main.cpp"), "int main() { return 0; }");
  EXPECT_TRUE(fs::is_directory(dir / "ext" / "empty"));
  struct stat st {};
  ASSERT_EQ(::stat((dir / "ext" / "ext.so").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
}

// Each way a build that does not check is refused, and leaves nothing behind.
void ExpectRefused(Built& b, const v1::BuildArtifact& artifact, const std::string& why) {
  const fs::path dir = b.Fresh("refused");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto error = WriteBuildFiles(FilesOf(artifact), dir, 1 << 20);
  ASSERT_FALSE(error.ok()) << why;
  EXPECT_TRUE(fs::is_empty(dir)) << why;
}

TEST(RemoteBuildTest, ChangedBytesAreRefused) {
  Built b;
  v1::BuildArtifact changed = b.artifact;
  for (auto& file : *changed.mutable_files()) {
    if (file.path() == "ext/ext.so") file.set_content("ELF shared object, patched");
  }
  ExpectRefused(b, changed, "content that is not its SHA-256's");
}

TEST(RemoteBuildTest, PathsOutsideTheBuildAreRefused) {
  Built b;
  for (const std::string path : {"../escape", "/etc/passwd", "ext/../../escape", "ext//x", "./x", ""}) {
    v1::BuildArtifact bad = b.artifact;
    auto* file = bad.add_files();
    file->set_path(path);
    file->set_content("x");
    file->set_sha256(Sha256Hex("x"));
    ExpectRefused(b, bad, "path '" + path + "'");
  }
  EXPECT_FALSE(fs::exists(b.tmp.path() / "escape"));
}

TEST(RemoteBuildTest, AFileBeforeItsDirectoryIsRefused) {
  Built b;
  v1::BuildArtifact bad;
  auto* file = bad.add_files();
  file->set_path("ext/ext.so");
  file->set_content("x");
  file->set_sha256(Sha256Hex("x"));
  ExpectRefused(b, bad, "a file whose directory was not listed first");
}

TEST(RemoteBuildTest, DuplicatesAndOversizeAreRefused) {
  Built b;
  v1::BuildArtifact twice = b.artifact;
  *twice.add_files() = b.artifact.files(2);
  ExpectRefused(b, twice, "a file listed twice");
  const fs::path dir = b.Fresh("small");
  EXPECT_FALSE(WriteBuildFiles(FilesOf(b.artifact), dir, 8).ok());
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(RemoteBuildTest, CudaArchLists) {
  for (const char* ok : {"", "9.0", "8.0;9.0", "9.0+PTX", "9.0a", "10.0;12.0+PTX"}) {
    EXPECT_TRUE(ValidCudaArchList(ok)) << ok;
  }
  for (const char* bad : {"9", "9.", ".0", "9.0;", "sm_90", "9.0 ; 8.0", "9.0;$(id)", "9.0\n"}) {
    EXPECT_FALSE(ValidCudaArchList(bad)) << bad;
  }
}

}  // namespace
}  // namespace kbox
