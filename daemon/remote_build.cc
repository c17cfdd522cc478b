#include "daemon/remote_build.h"

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace kbox {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting job looks at its cancel flag.
constexpr auto kCancelPoll = std::chrono::milliseconds(100);
// The longest pause between two asks of a busy tier.
constexpr auto kMaxRetryPause = std::chrono::seconds(5);

// One HTTP call on a thread of its own, so the caller can stop waiting for
// it when its job is cancelled; the thread ends with the call's own timeout.
boost::system::result<HttpReply, ClientError> CallCancellable(const ServerUrl& server,
                                                              const std::string& body,
                                                              std::chrono::seconds timeout,
                                                              const std::string& token,
                                                              const std::atomic<bool>* cancel) {
  struct Shared {
    std::mutex mu;
    std::condition_variable done;
    std::optional<boost::system::result<HttpReply, ClientError>> reply;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, server, body, timeout, token] {
    auto reply = HttpCall(server, "POST", "/v1/builds", "application/x-protobuf", body, timeout, token);
    std::lock_guard lock(shared->mu);
    shared->reply.emplace(std::move(reply));
    shared->done.notify_all();
  }).detach();
  std::unique_lock lock(shared->mu);
  while (!shared->reply) {
    if (cancel && cancel->load()) return ClientError{"the job was cancelled"};
    shared->done.wait_for(lock, kCancelPoll);
  }
  return std::move(*shared->reply);
}

// HttpReply keeps no headers (no Retry-After): back off 1, 2, 4, 5, 5... s.
std::chrono::seconds RetryPause(int attempt) {
  return std::min<std::chrono::seconds>(std::chrono::seconds(1 << std::min(attempt, 3)), kMaxRetryPause);
}

}  // namespace

v1::BuildArtifact ArtifactOf(const std::vector<BuildFileData>& files) {
  v1::BuildArtifact artifact;
  for (const BuildFileData& data : files) {
    v1::BuildFile* file = artifact.add_files();
    file->set_path(data.item.path);
    file->set_directory(data.item.directory);
    if (!data.item.directory) {
      file->set_content(data.content);
      file->set_sha256(data.item.sha256);
      file->set_executable(data.item.executable);
    }
  }
  return artifact;
}

std::vector<BuildFileData> FilesOf(const v1::BuildArtifact& artifact) {
  std::vector<BuildFileData> files;
  files.reserve(static_cast<size_t>(artifact.files_size()));
  for (const v1::BuildFile& file : artifact.files()) {
    BuildFileData data;
    data.item.path = file.path();
    data.item.directory = file.directory();
    if (!file.directory()) {
      data.item.size = file.content().size();
      data.item.sha256 = file.sha256();
      data.item.executable = file.executable();
      data.content = file.content();
    }
    files.push_back(std::move(data));
  }
  return files;
}

bool ValidCudaArchList(std::string_view list) {
  if (list.empty()) return true;
  if (list.size() > 256) return false;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(';', begin);
    if (end == std::string_view::npos) end = list.size();
    std::string_view arch = list.substr(begin, end - begin);
    if (arch.ends_with("+PTX")) arch.remove_suffix(4);
    if (!arch.empty() && arch.back() >= 'a' && arch.back() <= 'z') arch.remove_suffix(1);
    const size_t dot = arch.find('.');
    if (dot == std::string_view::npos || dot == 0 || dot + 1 == arch.size()) return false;
    for (size_t i = 0; i < arch.size(); ++i) {
      if (i != dot && (arch[i] < '0' || arch[i] > '9')) return false;
    }
    begin = end + 1;
  }
  return true;
}

boost::system::result<v1::BuildResponse, std::string> RemoteBuilder::Build(
    const v1::BuildRequest& request, const std::atomic<bool>* cancel) const {
  const auto deadline = Clock::now() + options_.timeout;
  std::string body;
  if (!request.SerializeToString(&body)) return std::string("cannot encode the build request");
  for (int attempt = 0;; ++attempt) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now());
    if (left.count() <= 0) return "no answer within " + std::to_string(options_.timeout.count()) + " s";
    auto reply = CallCancellable(options_.server, body, left, options_.token, cancel);
    if (!reply) return reply.error().message;
    if (reply->status == 429 || reply->status == 503) {
      // The tier is full or draining: ask again while there is time.
      const auto pause = RetryPause(attempt);
      if (Clock::now() + pause >= deadline) return "the compile tier stayed busy (HTTP " + std::to_string(reply->status) + ")";
      for (auto until = Clock::now() + pause; Clock::now() < until;) {
        if (cancel && cancel->load()) return std::string("the job was cancelled");
        std::this_thread::sleep_for(kCancelPoll);
      }
      continue;
    }
    if (reply->status != 200) {
      v1::ErrorResponse error;
      std::string why = "HTTP " + std::to_string(reply->status);
      if (error.ParseFromString(reply->body) && !error.message().empty()) why += ": " + error.message();
      return why;
    }
    v1::BuildResponse response;
    if (!response.ParseFromString(reply->body)) return std::string("the compile tier's answer does not parse");
    if (response.has_artifact() && response.artifact().key() != request.key()) {
      return std::string("the compile tier answered with the build of another key");
    }
    if (!response.has_artifact() && !response.has_result()) {
      return std::string("the compile tier's answer holds neither a build nor a result");
    }
    return response;
  }
}

}  // namespace kbox
