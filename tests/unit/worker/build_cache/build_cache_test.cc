#include "worker/build_cache/build_cache.h"

#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/temp_dir.h"
#include "worker/sha256.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;
using kbox::testing::TempDir;
using Role = BuildCache::Flight::Role;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteFile(const fs::path& path, const std::string& content, mode_t mode = 0644) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
  ::chmod(path.c_str(), mode);
}

mode_t ModeOf(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

// Every file under `root` (relative path -> content); directories as "<dir>".
std::map<std::string, std::string> Snapshot(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (it->is_symlink()) {
      out[rel] = "<symlink>";
    } else if (it->is_directory()) {
      out[rel] = "<dir>";
    } else {
      out[rel] = ReadAll(it->path());
    }
  }
  return out;
}

BuildKeyInputs BaseInputs() {
  return BuildKeyInputs{.candidate_source = "class ModelNew: pass\n",
                        .reference_source = "class Model: pass\n",
                        .backend = "BACKEND_CPU",
                        .precision = "PRECISION_FP32",
                        .cuda_arch_list = "",
                        .toolchain = "kbox 0.1.0\ntorch 1.13\n"};
}

std::string KeyFor(const std::string& candidate) {
  BuildKeyInputs in = BaseInputs();
  in.candidate_source = candidate;
  return BuildCacheKey(in);
}

// A build directory like load_inline leaves one.
fs::path MakeBuild(const fs::path& dir, const std::string& tag = "v1") {
  WriteFile(dir / "ext" / "ext.so", "ELF shared object " + tag, 0755);
  WriteFile(dir / "ext" / "main.cpp", "int main() { return 0; } // " + tag);
  WriteFile(dir / "ext" / "build.ninja", "rule cxx\n");
  fs::create_directories(dir / "ext" / "empty");
  return dir;
}

struct Fixture {
  TempDir tmp;
  uint64_t corrupt_events = 0;
  uint64_t evicted_events = 0;
  uint64_t last_size = 0;

  std::unique_ptr<BuildCache> Open(uint64_t max_bytes = 1ull << 30) {
    BuildCacheOptions options;
    options.root = tmp.path() / "cache";
    options.max_bytes = max_bytes;
    options.on_corrupt = [this] { ++corrupt_events; };
    options.on_evicted = [this](uint64_t n) { evicted_events += n; };
    options.on_size = [this](uint64_t bytes) { last_size = bytes; };
    auto cache = BuildCache::Open(std::move(options));
    EXPECT_TRUE(cache) << (cache ? "" : cache.error());
    return cache ? std::move(*cache) : nullptr;
  }
  fs::path Dir(const std::string& name) {
    const fs::path dir = tmp.path() / name;
    fs::create_directories(dir);
    return dir;
  }
};

TEST(BuildCacheKeyTest, IsSha256HexAndDeterministic) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string key = BuildCacheKey(BaseInputs());
  EXPECT_EQ(key.size(), 64u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(key, BuildCacheKey(BaseInputs()));
}

TEST(BuildCacheKeyTest, ChangesWithEachInput) {
  const std::string base = BuildCacheKey(BaseInputs());
  const std::vector<std::pair<const char*, void (*)(BuildKeyInputs&)>> edits = {
      {"candidate", [](BuildKeyInputs& in) { in.candidate_source += " "; }},
      {"reference", [](BuildKeyInputs& in) { in.reference_source += " "; }},
      {"backend", [](BuildKeyInputs& in) { in.backend = "BACKEND_CUDA"; }},
      {"precision", [](BuildKeyInputs& in) { in.precision = "PRECISION_FP16"; }},
      {"arch", [](BuildKeyInputs& in) { in.cuda_arch_list = "9.0"; }},
      {"toolchain", [](BuildKeyInputs& in) { in.toolchain += "nvcc 12.4\n"; }},
  };
  std::vector<std::string> keys = {base};
  for (const auto& [name, edit] : edits) {
    BuildKeyInputs in = BaseInputs();
    edit(in);
    const std::string key = BuildCacheKey(in);
    EXPECT_NE(key, base) << name;
    for (const auto& other : keys) EXPECT_NE(key, other) << name;
    keys.push_back(key);
  }
  // Lengths are encoded: moving bytes from one field to the next is another key.
  BuildKeyInputs a = BaseInputs(), b = BaseInputs();
  a.candidate_source = "ab";
  a.reference_source = "c";
  b.candidate_source = "a";
  b.reference_source = "bc";
  EXPECT_NE(BuildCacheKey(a), BuildCacheKey(b));
}

TEST(BuildCacheKeyTest, DirectoryDigestFollowsContentNotCaches) {
  TempDir tmp;
  WriteFile(tmp.path() / "kbox_stage.py", "print(1)\n");
  WriteFile(tmp.path() / "pkg" / "mod.py", "x = 1\n");
  const std::string before = DirectoryDigest(tmp.path());
  EXPECT_EQ(before.size(), 64u);
  WriteFile(tmp.path() / "pkg" / "__pycache__" / "mod.cpython-311.pyc", "bytecode");
  EXPECT_EQ(DirectoryDigest(tmp.path()), before);
  WriteFile(tmp.path() / "pkg" / "mod.py", "x = 2\n");
  EXPECT_NE(DirectoryDigest(tmp.path()), before);
}

TEST(BuildCacheTest, InsertLookupRestoreRoundTrip) {
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const fs::path build = MakeBuild(f.Dir("job1-build"));
  const std::string key = KeyFor("a");
  EXPECT_FALSE(cache->Lookup(key));

  const auto inserted = cache->Insert(key, build, "No CUDA runtime is found\n");
  ASSERT_EQ(inserted.status, BuildCache::InsertStatus::kStored) << inserted.message;
  EXPECT_TRUE(fs::is_regular_file(cache->root() / key / "MANIFEST"));
  EXPECT_TRUE(fs::is_directory(cache->root() / key / "tree"));
  EXPECT_EQ(ModeOf(cache->root()), 0700u);

  auto entry = cache->Lookup(key);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->key(), key);
  EXPECT_EQ(entry->compile_output(), "No CUDA runtime is found\n");
  EXPECT_GT(entry->bytes(), 0u);

  const fs::path restored = f.Dir("job2-build");
  ASSERT_TRUE(cache->Restore(*entry, restored).ok());
  EXPECT_EQ(Snapshot(restored), Snapshot(build));
  EXPECT_EQ(ModeOf(restored / "ext" / "ext.so"), 0755u);
  EXPECT_EQ(ModeOf(restored / "ext" / "main.cpp"), 0644u);
  EXPECT_EQ(ModeOf(restored / "ext" / "empty"), 0755u);

  // A second insert of the same key keeps the first entry.
  EXPECT_EQ(cache->Insert(key, build, "").status, BuildCache::InsertStatus::kPresent);
  const auto s = cache->stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.inserts, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.corrupt, 0u);
  EXPECT_EQ(s.bytes, entry->bytes());
  EXPECT_EQ(f.last_size, s.bytes);
  // No temporary directories left behind.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(cache->root())) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".lock", key}));
}

TEST(BuildCacheTest, RestoreSetsOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown";
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const std::string key = KeyFor("owner");
  ASSERT_TRUE(cache->Insert(key, MakeBuild(f.Dir("build")), "").stored());
  auto entry = cache->Lookup(key);
  ASSERT_TRUE(entry);
  const fs::path restored = f.Dir("restored");
  ASSERT_TRUE(cache->Restore(*entry, restored, 65534, 65534).ok());
  for (const fs::path& p : {restored / "ext", restored / "ext" / "ext.so"}) {
    struct stat st {};
    ASSERT_EQ(::lstat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 65534u) << p;
    EXPECT_EQ(st.st_gid, 65534u) << p;
  }
}

// Damages a stored entry's tree; the next lookup must miss and drop it.
void ExpectDamageDetected(const std::function<void(const fs::path& tree)>& damage) {
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const std::string key = KeyFor("damaged");
  ASSERT_TRUE(cache->Insert(key, MakeBuild(f.Dir("build")), "out").stored());
  damage(cache->root() / key / "tree");
  EXPECT_FALSE(cache->Lookup(key));
  EXPECT_FALSE(fs::exists(cache->root() / key)) << "corrupt entry not removed";
  const auto s = cache->stats();
  EXPECT_EQ(s.corrupt, 1u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_EQ(f.corrupt_events, 1u);
  // Rebuilt: the next insert stores a fresh, valid entry.
  ASSERT_EQ(cache->Insert(key, MakeBuild(f.Dir("rebuild")), "out").status,
            BuildCache::InsertStatus::kStored);
  EXPECT_TRUE(cache->Lookup(key));
}

TEST(BuildCacheTest, ChangedByteIsCorrupt) {
  ExpectDamageDetected([](const fs::path& tree) {
    const fs::path so = tree / "ext" / "ext.so";
    std::string data = ReadAll(so);
    data[3] = static_cast<char>(data[3] ^ 1);  // Same size, one byte differs.
    WriteFile(so, data, 0755);
  });
}

TEST(BuildCacheTest, TruncatedFileIsCorrupt) {
  ExpectDamageDetected([](const fs::path& tree) { fs::resize_file(tree / "ext" / "ext.so", 4); });
}

TEST(BuildCacheTest, ExtraFileIsCorrupt) {
  ExpectDamageDetected([](const fs::path& tree) { WriteFile(tree / "ext" / "evil.so", "x"); });
}

TEST(BuildCacheTest, MissingFileIsCorrupt) {
  ExpectDamageDetected([](const fs::path& tree) { fs::remove(tree / "ext" / "main.cpp"); });
}

TEST(BuildCacheTest, SymlinkInCachedTreeIsCorrupt) {
  ExpectDamageDetected([](const fs::path& tree) {
    fs::remove(tree / "ext" / "ext.so");
    fs::create_symlink("/etc/hostname", tree / "ext" / "ext.so");
  });
}

TEST(BuildCacheTest, TruncatedManifestIsCorrupt) {
  ExpectDamageDetected([](const fs::path& tree) {
    const fs::path manifest = tree.parent_path() / "MANIFEST";
    fs::resize_file(manifest, fs::file_size(manifest) - 10);
  });
}

TEST(BuildCacheTest, ChangedCompileOutputIsCorrupt) {
  ExpectDamageDetected(
      [](const fs::path& tree) { WriteFile(tree.parent_path() / "compile-output", "OUT"); });
}

TEST(BuildCacheTest, RestoreRechecksHashesAndCleansUp) {
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const std::string key = KeyFor("toctou");
  ASSERT_TRUE(cache->Insert(key, MakeBuild(f.Dir("build")), "").stored());
  auto entry = cache->Lookup(key);
  ASSERT_TRUE(entry);
  // Changed after the lookup verified it.
  const fs::path so = cache->root() / key / "tree" / "ext" / "ext.so";
  std::string data = ReadAll(so);
  data.back() = static_cast<char>(data.back() ^ 1);
  WriteFile(so, data, 0755);
  const fs::path restored = f.Dir("restored");
  const Status error = cache->Restore(*entry, restored);
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.message().find("changed"), std::string::npos) << error.message();
  EXPECT_TRUE(fs::is_empty(restored)) << "a failed restore must leave the build dir empty";
  EXPECT_FALSE(fs::exists(cache->root() / key));
  EXPECT_EQ(cache->stats().corrupt, 1u);
}

TEST(BuildCacheTest, SymlinksInBuildDirAreNotCopied) {
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const fs::path secret = f.tmp.path() / "host-secret";
  WriteFile(secret, "HOST-SECRET-CONTENT");
  fs::create_directories(f.tmp.path() / "host-dir");
  WriteFile(f.tmp.path() / "host-dir" / "key", "HOST-SECRET-CONTENT");

  // A link to a file, and a link to a directory, each next to a real build.
  const fs::path b1 = MakeBuild(f.Dir("b1"));
  fs::create_symlink(secret, b1 / "ext" / "leak.so");
  const fs::path b2 = MakeBuild(f.Dir("b2"));
  fs::create_directory_symlink(f.tmp.path() / "host-dir", b2 / "linked");
  // A FIFO must be refused without blocking.
  const fs::path b3 = MakeBuild(f.Dir("b3"));
  ASSERT_EQ(::mkfifo((b3 / "ext" / "pipe").c_str(), 0644), 0);

  int n = 0;
  for (const fs::path& build : {b1, b2, b3}) {
    const std::string key = KeyFor("link" + std::to_string(n++));
    const auto r = cache->Insert(key, build, "");
    EXPECT_EQ(r.status, BuildCache::InsertStatus::kUnsupportedFile) << build << ": " << r.message;
    EXPECT_FALSE(cache->Lookup(key));
  }
  for (const auto& [rel, content] : Snapshot(cache->root())) {
    EXPECT_EQ(content.find("HOST-SECRET"), std::string::npos) << rel;
    EXPECT_NE(content, "<symlink>") << rel;
  }
  EXPECT_EQ(cache->stats().entries, 0u);
  EXPECT_EQ(Snapshot(cache->root()).size(), 1u);  // Only .lock: no leftovers.
}

TEST(BuildCacheTest, EvictsLeastRecentlyUsedBySize) {
  Fixture f;
  const std::string payload(4000, 'x');
  // Room for two entries of ~4.5 KB, not three.
  auto cache = f.Open(10'000);
  ASSERT_TRUE(cache);
  auto build = [&](const std::string& name) {
    const fs::path dir = f.Dir(name);
    WriteFile(dir / "ext" / "ext.so", payload + name);
    return dir;
  };
  const std::string a = KeyFor("A"), b = KeyFor("B"), c = KeyFor("C");
  ASSERT_TRUE(cache->Insert(a, build("a"), "").stored());
  ASSERT_TRUE(cache->Insert(b, build("b"), "").stored());
  EXPECT_EQ(cache->stats().entries, 2u);
  ASSERT_TRUE(cache->Lookup(a));  // A is now more recent than B.
  ASSERT_EQ(cache->Insert(c, build("c"), "").status, BuildCache::InsertStatus::kStored);
  EXPECT_TRUE(fs::exists(cache->root() / a));
  EXPECT_FALSE(fs::exists(cache->root() / b)) << "the least recently used entry must go";
  EXPECT_TRUE(fs::exists(cache->root() / c));
  const auto s = cache->stats();
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_LE(s.bytes, 10'000u);
  EXPECT_EQ(f.evicted_events, 1u);
  EXPECT_TRUE(cache->Lookup(a));
  EXPECT_FALSE(cache->Lookup(b));
  EXPECT_TRUE(cache->Lookup(c));
}

TEST(BuildCacheTest, PinnedEntryIsNotEvicted) {
  Fixture f;
  auto cache = f.Open(10'000);
  ASSERT_TRUE(cache);
  const fs::path dir = f.Dir("b");
  WriteFile(dir / "lib.so", std::string(6000, 'y'));
  const std::string a = KeyFor("A"), b = KeyFor("B");
  ASSERT_TRUE(cache->Insert(a, dir, "").stored());
  {
    auto held = cache->Lookup(a);  // A job is restoring it.
    ASSERT_TRUE(held);
    WriteFile(dir / "lib.so", std::string(6000, 'z'));
    ASSERT_TRUE(cache->Insert(b, dir, "").stored());
    EXPECT_TRUE(fs::exists(cache->root() / a)) << "an entry in use was evicted";
    EXPECT_TRUE(cache->Restore(*held, f.Dir("restored")).ok());
  }
  EXPECT_LE(cache->stats().bytes, 10'000u);
}

TEST(BuildCacheTest, EntryLargerThanBoundIsNotStored) {
  Fixture f;
  auto cache = f.Open(1000);
  ASSERT_TRUE(cache);
  const fs::path dir = f.Dir("big");
  WriteFile(dir / "ext" / "ext.so", std::string(2000, 'b'));
  const std::string key = KeyFor("big");
  EXPECT_EQ(cache->Insert(key, dir, "").status, BuildCache::InsertStatus::kTooLarge);
  EXPECT_FALSE(cache->Lookup(key));
  EXPECT_EQ(cache->stats().bytes, 0u);
  EXPECT_EQ(Snapshot(cache->root()).size(), 1u);  // Only .lock.
}

TEST(BuildCacheTest, ReopenKeepsEntriesAndCleansLeftovers) {
  Fixture f;
  const std::string key = KeyFor("persist");
  {
    auto cache = f.Open();
    ASSERT_TRUE(cache);
    ASSERT_TRUE(cache->Insert(key, MakeBuild(f.Dir("build")), "out").stored());
    // A second daemon on the same directory is refused while this one runs.
    BuildCacheOptions options;
    options.root = cache->root();
    options.max_bytes = 1 << 20;
    auto second = BuildCache::Open(std::move(options));
    EXPECT_FALSE(second);
  }
  const fs::path root = f.tmp.path() / "cache";
  fs::create_directories(root / (".tmp-" + key + "-9") / "tree");  // An interrupted insert.
  fs::create_directories(root / std::string(64, 'a'));             // A key without a manifest.
  WriteFile(root / "README", "not the cache's");
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->stats().entries, 1u);
  EXPECT_EQ(cache->stats().corrupt, 1u);
  EXPECT_FALSE(fs::exists(root / (".tmp-" + key + "-9")));
  EXPECT_FALSE(fs::exists(root / std::string(64, 'a')));
  EXPECT_TRUE(fs::exists(root / "README"));
  auto entry = cache->Lookup(key);
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->compile_output(), "out");
}

TEST(BuildCacheTest, SingleFlightBuildsOnce) {
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const std::string key = KeyFor("popular");
  std::atomic<int> builds{0}, hits{0}, alone{0}, restored{0};
  // The build callback: slow enough that every thread arrives while it runs.
  auto build = [&](const fs::path& dir) {
    ++builds;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    MakeBuild(dir);
  };
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    const fs::path dir = f.Dir("job" + std::to_string(i));
    threads.emplace_back([&, dir] {
      BuildCache::Flight flight = cache->Acquire(key);
      if (flight.role() == Role::kHit) {
        ++hits;
        if (cache->Restore(*flight.entry(), dir).ok()) ++restored;
        return;
      }
      if (flight.role() == Role::kBuildAlone) ++alone;
      build(dir);
      flight.Finish(cache->Insert(key, dir, "").stored());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ(hits.load(), kThreads - 1);
  EXPECT_EQ(restored.load(), kThreads - 1);
  EXPECT_EQ(alone.load(), 0);
  // The builder's directory and every restored one hold the same tree.
  const auto first = Snapshot(f.tmp.path() / "job0");
  EXPECT_EQ(first.size(), 5u);
  for (int i = 1; i < kThreads; ++i) {
    EXPECT_EQ(Snapshot(f.tmp.path() / ("job" + std::to_string(i))), first) << i;
  }
}

TEST(BuildCacheTest, SingleFlightFailureLetsWaitersBuildAlone) {
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const std::string key = KeyFor("broken");
  BuildCache::Flight leader = cache->Acquire(key);
  ASSERT_EQ(leader.role(), Role::kBuild);
  std::atomic<int> alone{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      if (cache->Acquire(key).role() == Role::kBuildAlone) ++alone;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(alone.load(), 0) << "waiters must wait for the builder";
  leader.Finish(false);  // The compile failed: nothing cached.
  for (auto& t : waiters) t.join();
  EXPECT_EQ(alone.load(), 3);
  // The flight is over: the next caller builds (and leads) again.
  EXPECT_EQ(cache->Acquire(key).role(), Role::kBuild);
}

TEST(BuildCacheTest, AcquireHitsAnExistingEntry) {
  Fixture f;
  auto cache = f.Open();
  ASSERT_TRUE(cache);
  const std::string key = KeyFor("stored");
  ASSERT_TRUE(cache->Insert(key, MakeBuild(f.Dir("build")), "").stored());
  BuildCache::Flight flight = cache->Acquire(key);
  ASSERT_EQ(flight.role(), Role::kHit);
  ASSERT_TRUE(flight.entry());
  // No flight is left open: a second caller does not wait.
  EXPECT_EQ(cache->Acquire(key).role(), Role::kHit);
}

}  // namespace
}  // namespace kbox
