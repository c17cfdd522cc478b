#include "daemon/job_journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include <boost/crc.hpp>

namespace kbox {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[4] = {'K', 'B', 'J', '1'};
constexpr size_t kHeaderBytes = 12;
constexpr const char* kSuffix = ".job";
constexpr const char* kTempPrefix = ".tmp-";

uint32_t Crc32(const std::string& bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

void PutU32(std::string& out, uint32_t v) {
  for (unsigned i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffu));
}

uint32_t GetU32(const std::string& in, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  }
  return v;
}

// Job ids become file names: kboxd's own ids are hex and digits, and nothing
// else is ever let near a path.
bool SafeJobId(const std::string& id) {
  return !id.empty() && id.size() <= 128 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' ||
           c == '_';
  });
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

// Writes all of `bytes` to a new file at `path` and fsyncs it.
boost::system::result<void, std::string> WriteDurably(const fs::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("open " + path.string());
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string error = Errno("write " + path.string());
      ::close(fd);
      return error;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string error = Errno("fsync " + path.string());
    ::close(fd);
    return error;
  }
  ::close(fd);
  return {};
}

}  // namespace

int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string EncodeJournalRecord(const v1::JournalRecord& record) {
  const std::string payload = record.SerializeAsString();
  std::string out(kMagic, sizeof kMagic);
  PutU32(out, static_cast<uint32_t>(payload.size()));
  PutU32(out, Crc32(payload));
  out += payload;
  return out;
}

boost::system::result<v1::JournalRecord, std::string> DecodeJournalRecord(const std::string& bytes) {
  if (bytes.size() < kHeaderBytes) {
    return std::string("truncated: ") + std::to_string(bytes.size()) + " bytes, shorter than the header";
  }
  if (bytes.compare(0, sizeof kMagic, kMagic, sizeof kMagic) != 0) return std::string("not a journal record");
  const uint32_t length = GetU32(bytes, 4);
  if (bytes.size() - kHeaderBytes != length) {
    return "truncated: " + std::to_string(bytes.size() - kHeaderBytes) + " payload bytes of " +
           std::to_string(length);
  }
  const std::string payload = bytes.substr(kHeaderBytes);
  if (Crc32(payload) != GetU32(bytes, 8)) return std::string("checksum mismatch");
  v1::JournalRecord record;
  if (!record.ParseFromString(payload)) return std::string("checksum matches but the record does not parse");
  if (!SafeJobId(record.job_id())) return "bad job id " + record.job_id();
  return record;
}

boost::system::result<std::unique_ptr<JobJournal>, std::string> JobJournal::Open(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create " + dir.string() + ": " + ec.message();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno("open " + dir.string());
  if (::access(dir.c_str(), W_OK) != 0) {
    const std::string error = Errno(dir.string() + " is not writable");
    ::close(fd);
    return error;
  }
  return std::unique_ptr<JobJournal>(new JobJournal(dir, fd));
}

JobJournal::~JobJournal() { ::close(dir_fd_); }

fs::path JobJournal::PathOf(const std::string& job_id) const { return dir_ / (job_id + kSuffix); }

boost::system::result<void, std::string> JobJournal::Write(
    const std::vector<const v1::JournalRecord*>& records) {
  for (const v1::JournalRecord* record : records) {
    if (!SafeJobId(record->job_id())) return "bad job id " + record->job_id();
    const fs::path temp = dir_ / (kTempPrefix + record->job_id());
    if (auto written = WriteDurably(temp, EncodeJournalRecord(*record)); !written) {
      ::unlink(temp.c_str());
      return written.error();
    }
    if (::rename(temp.c_str(), PathOf(record->job_id()).c_str()) != 0) {
      const std::string error = Errno("rename " + temp.string());
      ::unlink(temp.c_str());
      return error;
    }
  }
  // One directory fsync makes every rename above durable.
  if (::fsync(dir_fd_) != 0) return Errno("fsync " + dir_.string());
  return {};
}

void JobJournal::Remove(const std::string& job_id) {
  if (!SafeJobId(job_id)) return;
  // Not fsync'ed: a removal lost to a crash is redone at the next expiry.
  ::unlink(PathOf(job_id).c_str());
}

JobJournal::Loaded JobJournal::Load() {
  Loaded loaded;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(kTempPrefix)) {
      fs::remove(entry.path(), ec);
      continue;
    }
    if (!name.ends_with(kSuffix) || !entry.is_regular_file(ec)) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto record = DecodeJournalRecord(bytes);
    if (record && record->job_id() + kSuffix != name) record = std::string("names job ") + record->job_id();
    if (!record) {
      loaded.corrupt.push_back(name + ": " + record.error());
      fs::remove(entry.path(), ec);
      continue;
    }
    loaded.records.push_back(std::move(*record));
  }
  return loaded;
}

}  // namespace kbox
