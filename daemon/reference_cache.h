#pragma once

// The reference timing cache (issue 6; docs/reference-cache.md): the
// reference's timing figures as a live run stage measured them, so that a
// later job with the same reference on the same device and software times
// the candidate alone. In memory only: a restarted kboxd measures again.
//
// THE KEY is the SHA-256 of a canonical encoding of ReferenceKeyInputs (the
// build cache's pattern: a format tag, then every field as
// `name=<byte length>:<bytes>\n` in a fixed order, so no two inputs encode
// alike). What goes in, and why:
//
//   reference_source   the code that is timed;
//   backend, precision what it runs on and the dtype it is cast to;
//   performance_trials the least number of timed calls (what settles);
//   warmup_calls       untimed calls before the first timed one;
//   device             the GPU's name, or "cpu <CPU model> cores=<job_cpu_cores>";
//   driver, cuda,
//   torch, python      the software under the reference's kernels (probe);
//   harness            kbox's version and a digest of the harness directory:
//                      how the judge times (cover, L2 flush, graph replay).
//
// Deliberately NOT in the key: the seed (kboxd draws a secret one per job,
// so a key with it would never hit; values do not change what the reference
// computes per call, and the shapes they might change are checked by the
// entry's input signature instead), tolerances and trial counts (they do
// not change how long a call takes), and the GPU's index (one model, one
// figure; a slower unit of the same model is what live rechecks catch).
//
// An entry is used for ttl after it was stored; past max_entries the least
// recently used is evicted. Thread-safe.

#include <chrono>
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "kbox/v1/harness.pb.h"

namespace kbox {

struct ReferenceKeyInputs {
  std::string reference_source;
  std::string backend;    // v1::Backend name.
  std::string precision;  // v1::Precision name.
  uint32_t performance_trials = 0;
  uint32_t warmup_calls = 0;
  std::string device;
  std::string driver;
  std::string cuda;
  std::string torch;
  std::string python;
  std::string harness;
};

// Lower-case hex SHA-256 of the canonical encoding of `inputs`.
std::string ReferenceCacheKey(const ReferenceKeyInputs& inputs);

class ReferenceCache {
 public:
  using Clock = std::chrono::steady_clock;

  struct Options {
    size_t max_entries = 10000;
    std::chrono::seconds ttl{86400};
  };

  explicit ReferenceCache(Options options) : options_(options) {}

  // The entry under `key` stored less than ttl before `now` (and marks it
  // most recently used); nullopt otherwise (an expired entry is dropped).
  std::optional<v1::ReferenceTimingEntry> Lookup(const std::string& key, Clock::time_point now);

  // Stores `entry` under `key` as of `now`, replacing an older one, and
  // evicts the least recently used entries past max_entries.
  void Insert(const std::string& key, v1::ReferenceTimingEntry entry, Clock::time_point now);

  size_t size() const;

 private:
  struct Entry {
    std::string key;
    v1::ReferenceTimingEntry value;
    Clock::time_point stored;
  };

  const Options options_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // Most recently used first.
  std::unordered_map<std::string, std::list<Entry>::iterator> by_key_;
};

}  // namespace kbox
