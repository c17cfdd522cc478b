#include "daemon/reference_cache.h"

#include <string_view>
#include <utility>

#include "worker/build_cache/build_cache.h"
#include "worker/sha256.h"

namespace kbox {

std::string ReferenceCacheKey(const ReferenceKeyInputs& in) {
  std::string encoded = "kbox-reference-cache-key 1\n";
  auto field = [&encoded](std::string_view name, std::string_view value) {
    encoded += name;
    encoded += '=';
    encoded += std::to_string(value.size());
    encoded += ':';
    encoded += value;
    encoded += '\n';
  };
  field("reference_source", in.reference_source);
  field("backend", in.backend);
  field("precision", in.precision);
  field("performance_trials", std::to_string(in.performance_trials));
  field("warmup_calls", std::to_string(in.warmup_calls));
  field("device", in.device);
  field("driver", in.driver);
  field("cuda", in.cuda);
  field("torch", in.torch);
  field("python", in.python);
  field("harness", in.harness);
  return Sha256Hex(encoded);
}

std::optional<v1::ReferenceTimingEntry> ReferenceCache::Lookup(const std::string& key,
                                                                Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto found = by_key_.find(key);
  if (found == by_key_.end()) return std::nullopt;
  const auto it = found->second;
  if (now - it->stored >= options_.ttl) {
    lru_.erase(it);
    by_key_.erase(found);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it);
  return it->value;
}

void ReferenceCache::Insert(const std::string& key, v1::ReferenceTimingEntry entry,
                            Clock::time_point now) {
  if (options_.max_entries == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto found = by_key_.find(key); found != by_key_.end()) {
    lru_.erase(found->second);
    by_key_.erase(found);
  }
  lru_.push_front(Entry{key, std::move(entry), now});
  by_key_[key] = lru_.begin();
  while (lru_.size() > options_.max_entries) {
    by_key_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

size_t ReferenceCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

}  // namespace kbox
