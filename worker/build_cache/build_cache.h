#pragma once

// A content-addressed cache of finished compile stages, so that identical
// candidates compile once (issue 6; docs/build-cache.md).
//
// THE KEY is the SHA-256 (OpenSSL libcrypto) of a canonical encoding of
// BuildKeyInputs: a format tag, then every field as `name=<byte length>:<bytes>\n`
// in a fixed order, so no two different inputs encode alike. What goes in, and why:
//
//   candidate_source  the code that runs in the compile stage and whose
//                     load_inline calls produce the build;
//   reference_source  the compile stage can read reference.py (src/ is bound
//                     into it), so a candidate may build differently by it;
//                     costs nothing in practice (a candidate fits one problem);
//   backend           decides the harness's build path (C++, CUDA, Triton);
//   precision         part of the compile stage's spec;
//   cuda_arch_list    TORCH_CUDA_ARCH_LIST the compile stage gets (empty on
//                     the CPU backend): the GPU code that is generated;
//   toolchain         the evaluator's fingerprint of everything else that can
//                     change a build: kbox's version and a digest of the
//                     harness directory's files, the worker interpreter (path
//                     and version), torch, CUDA and Triton versions (start-up
//                     probe), the environment the stages inherit (PATH,
//                     LD_LIBRARY_PATH, CUDA_HOME, CUDA_PATH) and the identity
//                     (resolved path, size, mtime) of c++, nvcc and ninja.
//
// Deliberately NOT in the key: tolerances, trial counts, timing settings and
// the seed (no loader reads them; the compile stage's seed is always 0), the
// GPU driver (builds do not depend on it), MAX_JOBS and sandbox settings
// (they change how a build runs, not what it produces).
//
// AN ENTRY is `<root>/<hex key>/` holding `tree/` (a copy of the finished build
// directory: directories and regular files only), `compile-output` (the
// compile stage's stdout/stderr tail, so a hit's output_tail matches a cold
// run's) and `MANIFEST` (key, and for every directory and regular file its
// relative path, plus size, SHA-256 and exec bit for files; ends with a count,
// so a truncated manifest is detected). Modes are normalised (0755 for
// directories and executables, 0644 otherwise). Lookup verifies every file
// against the manifest (size and hash; missing or extra files and anything
// but a directory or a regular file count as corruption); a corrupt entry is
// deleted and reported as a miss. Restore checks sizes and hashes again while
// it copies, so a file changed after Lookup is not restored either.
//
// Entries are written under `<root>/.tmp-*` and renamed into place, so a
// crash leaves no half entry under a key name. Least-recently-used entries
// (in memory; restored from the entries' directory mtimes at start-up) are
// evicted until the total size is at most max_bytes; entries in use (pinned
// by a live Entry) are never evicted. One daemon per cache directory (an
// flock on `<root>/.lock`).
//
// Thread-safe: a mutex guards the index; hashing and copying run outside it.

#include <sys/types.h>

#include <boost/system/result.hpp>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "policy/status.h"

namespace kbox {

// Everything that decides what a compile stage leaves in its build directory.
struct BuildKeyInputs {
  std::string candidate_source;
  std::string reference_source;
  std::string backend;         // v1::Backend name, e.g. "BACKEND_CPU".
  std::string precision;       // v1::Precision name.
  std::string cuda_arch_list;  // TORCH_CUDA_ARCH_LIST of the compile stage; empty on CPU.
  std::string toolchain;       // The evaluator's toolchain fingerprint.
};

// The cache key of `inputs`: 64 lower-case hex digits.
std::string BuildCacheKey(const BuildKeyInputs& inputs);

// SHA-256 over the relative path and content of every regular file under
// `dir`, in path order, skipping __pycache__ directories and *.pyc files: a
// content version of the harness. Empty when `dir` cannot be read.
std::string DirectoryDigest(const std::filesystem::path& dir);

struct BuildCacheOptions {
  std::filesystem::path root;  // Created (0700) when missing.
  uint64_t max_bytes = 0;      // Bound on the bytes of all entries; > 0.
  // Called outside the cache's lock: entries evicted for space, corrupt
  // entries found (and deleted), and the total size after every change.
  std::function<void(uint64_t entries)> on_evicted;
  std::function<void()> on_corrupt;
  std::function<void(uint64_t bytes)> on_size;
};

class BuildCache {
 public:
  // One file or directory of an entry's tree.
  struct Item {
    bool directory = false;
    std::string path;     // Relative to tree/, '/'-separated, never "." or "..".
    uint64_t size = 0;    // Files only.
    std::string sha256;   // Files only; hex.
    bool executable = false;
  };

  // A verified entry. While it lives the entry is pinned (never evicted).
  class Entry {
   public:
    Entry(Entry&& other) noexcept;
    Entry& operator=(Entry&&) = delete;
    Entry(const Entry&) = delete;
    ~Entry();

    const std::string& key() const { return key_; }
    const std::filesystem::path& dir() const { return dir_; }
    std::filesystem::path tree() const { return dir_ / "tree"; }
    const std::string& compile_output() const { return compile_output_; }
    const std::vector<Item>& items() const { return items_; }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class BuildCache;
    struct Record;
    Entry(BuildCache* cache, std::shared_ptr<Record> record, std::string key,
          std::filesystem::path dir)
        : cache_(cache), record_(std::move(record)), key_(std::move(key)), dir_(std::move(dir)) {}

    BuildCache* cache_ = nullptr;
    std::shared_ptr<Record> record_;
    std::string key_;
    std::filesystem::path dir_;
    std::string compile_output_;
    std::vector<Item> items_;
    uint64_t bytes_ = 0;
  };

  enum class InsertStatus {
    kStored,           // A new entry.
    kPresent,          // An entry with the key was there already.
    kTooLarge,         // Larger than max_bytes: not stored.
    kUnsupportedFile,  // The build dir holds a symlink, device, FIFO, ...: not stored.
    kFailed,           // I/O error; `message` says which.
  };
  struct InsertResult {
    InsertStatus status = InsertStatus::kFailed;
    std::string message;
    bool stored() const { return status == InsertStatus::kStored || status == InsertStatus::kPresent; }
  };

  // Single-flight: what Acquire tells a job to do.
  class Flight {
   public:
    enum class Role {
      kHit,         // entry() holds a verified entry: restore it, do not compile.
      kBuild,       // Compile; jobs with the same key wait for Finish().
      kBuildAlone,  // The build waited for failed or was not cached: compile on your own.
    };
    Flight(Flight&& other) noexcept;
    Flight& operator=(Flight&&) = delete;
    Flight(const Flight&) = delete;
    ~Flight();  // An unfinished kBuild flight finishes as not cached.

    Role role() const { return role_; }
    std::optional<Entry>& entry() { return entry_; }
    // kBuild: wakes the waiting jobs; `cached`: the build is in the cache now
    // (they look it up), otherwise each compiles on its own. No-op otherwise.
    void Finish(bool cached);

   private:
    friend class BuildCache;
    struct State;
    Flight(Role role, BuildCache* cache, std::string key, std::shared_ptr<State> state)
        : role_(role), cache_(cache), key_(std::move(key)), state_(std::move(state)) {}

    Role role_;
    BuildCache* cache_ = nullptr;
    std::string key_;
    std::shared_ptr<State> state_;  // kBuild only.
    std::optional<Entry> entry_;
  };

  struct Stats {
    uint64_t hits = 0;       // Lookups that found a verified entry.
    uint64_t misses = 0;     // Lookups that did not (corrupt entries included).
    uint64_t inserts = 0;    // Entries stored.
    uint64_t evictions = 0;  // Entries evicted for space.
    uint64_t corrupt = 0;    // Entries found corrupt and deleted.
    uint64_t entries = 0;
    uint64_t bytes = 0;
  };

  // Opens (or creates) the cache at options.root: removes leftovers of
  // interrupted inserts and entries whose manifest does not parse, indexes
  // the rest (verified lazily, on lookup) and evicts down to max_bytes.
  // Files in the root that are not the cache's are left alone.
  static boost::system::result<std::unique_ptr<BuildCache>, std::string> Open(
      BuildCacheOptions options);

  BuildCache(const BuildCache&) = delete;
  BuildCache& operator=(const BuildCache&) = delete;
  ~BuildCache();

  // A verified entry for `key`, or nothing (no entry, or a corrupt one, which
  // is deleted). A hit makes the entry the most recently used.
  std::optional<Entry> Lookup(const std::string& key);

  // Copies the finished build directory `build_dir` (written by candidate
  // code: no link is followed) into a new entry with `compile_output`.
  // Only directories and regular files are accepted; anything else refuses
  // the whole build. Then evicts LRU entries down to max_bytes.
  InsertResult Insert(const std::string& key, const std::filesystem::path& build_dir,
                      const std::string& compile_output);

  // Copies `entry`'s tree into `build_dir` (existing and empty; kboxd's, not
  // yet seen by a stage), owned by `owner_uid`/`owner_gid` when given,
  // checking every file's size and hash as it goes. On failure `build_dir`
  // is emptied again; a file that does not match deletes the entry (counted
  // as corrupt). Returns an error message on failure.
  Status Restore(const Entry& entry, const std::filesystem::path& build_dir,
                 std::optional<uid_t> owner_uid = std::nullopt,
                 std::optional<gid_t> owner_gid = std::nullopt);

  // Single-flight lookup: a hit; or the caller builds for every caller of
  // the same key (kBuild), who wait here until it finishes; or, when the
  // build waited for failed or was not cached, kBuildAlone. A failed
  // compile is never cached: its result is the compile log, not a tree.
  Flight Acquire(const std::string& key);

  Stats stats() const;
  const std::filesystem::path& root() const { return options_.root; }
  uint64_t max_bytes() const { return options_.max_bytes; }

 private:
  explicit BuildCache(BuildCacheOptions options) : options_(std::move(options)) {}

  void Unpin(const std::shared_ptr<Entry::Record>& record);
  void FinishFlight(const std::string& key, const std::shared_ptr<Flight::State>& state,
                    bool cached);
  // Takes `key` out of the index if `record` is still its record (returns
  // whether it was) and moves its directory aside to `trash` (empty when it
  // could not be moved), for the caller to delete outside mu_. Requires mu_.
  bool DetachLocked(const std::string& key, const std::shared_ptr<Entry::Record>& record,
                    std::filesystem::path& trash);
  // Evicts unpinned LRU entries until total <= max_bytes. Requires mu_.
  std::vector<std::filesystem::path> EvictLocked(uint64_t& evicted);
  void ReportCorrupt(std::vector<std::filesystem::path> doomed);
  std::filesystem::path TrashPathLocked(const std::string& key);

  BuildCacheOptions options_;
  int lock_fd_ = -1;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry::Record>> index_;
  std::map<std::string, std::shared_ptr<Flight::State>> flights_;
  std::condition_variable flight_done_;
  uint64_t total_bytes_ = 0;
  uint64_t tick_ = 0;      // LRU clock.
  uint64_t counter_ = 0;   // Unique temporary names.
  Stats stats_;
};

// A build as it travels from a compile-role kboxd to a run-role one
// (docs/compile-tier.md): the items of an entry's manifest with their bytes.
struct BuildFileData {
  BuildCache::Item item;
  std::string content;  // Files only.
};

// The files of the verified entry `entry`, read and hashed again (a file
// changed since Lookup fails the read), directories before what they hold.
boost::system::result<std::vector<BuildFileData>, std::string> ReadEntryFiles(
    const BuildCache::Entry& entry);

// Writes a build that came from another daemon into `build_dir` (existing,
// empty, kboxd's, not yet seen by a stage) as Restore writes an entry: every
// path checked as a manifest's are (relative, no "." or "..", its directory
// listed before it), every file's bytes against its size and SHA-256, no
// link followed, modes normalised, owned by `owner_uid`/`owner_gid` when
// given, at most `max_bytes` in all. On failure `build_dir` is emptied again
// and the message says which file.
Status WriteBuildFiles(const std::vector<BuildFileData>& files, const std::filesystem::path& build_dir,
                       uint64_t max_bytes, std::optional<uid_t> owner_uid = std::nullopt,
                       std::optional<gid_t> owner_gid = std::nullopt);

}  // namespace kbox
