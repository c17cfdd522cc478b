#pragma once

// The compile tier's wire (docs/compile-tier.md): a run-role kboxd sends a
// job's compile to compile-role kboxds (POST /v1/builds) and gets back the
// build as a build cache entry holds it, each file with its SHA-256, which it
// checks as it writes the files into the job's build directory. Builds stay
// untrusted (they are candidate code) and are loaded only inside run
// sandboxes, exactly as a local build or a cache hit is.

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include <boost/system/result.hpp>

#include "clients/http_client.h"
#include "kbox/v1/api.pb.h"
#include "worker/build_cache/build_cache.h"

namespace kbox {

// A build cache entry's files as a BuildArtifact, and back.
v1::BuildArtifact ArtifactOf(const std::vector<BuildFileData>& files);
std::vector<BuildFileData> FilesOf(const v1::BuildArtifact& artifact);

// Whether `list` is a TORCH_CUDA_ARCH_LIST a compile node builds for: one or
// more "MAJOR.MINOR" with an optional "+PTX" (or a letter suffix, as in
// "9.0a"), joined by ';'. Empty is valid (the CPU backend).
bool ValidCudaArchList(std::string_view list);

class RemoteBuilder {
 public:
  struct Options {
    ServerUrl server;
    std::string token;               // Sent as a bearer token; empty: none.
    std::chrono::seconds timeout{};  // The whole wait: queue, build and transfer.
  };
  explicit RemoteBuilder(Options options) : options_(std::move(options)) {}

  // The tier's answer for `request`, or why there is none, for the log (the
  // caller then builds locally). A busy tier (429, 503) is asked again
  // after its Retry-After while the timeout allows. Returns at once when
  // `cancel` becomes true (the request itself finishes in the background).
  boost::system::result<v1::BuildResponse, std::string> Build(const v1::BuildRequest& request,
                                                              const std::atomic<bool>* cancel) const;

 private:
  Options options_;
};

}  // namespace kbox
