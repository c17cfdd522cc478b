#include "worker/build_cache/build_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "policy/status.h"
#include "worker/sha256.h"
#include "worker/unique_fd.h"

namespace kbox {
namespace fs = std::filesystem;

struct BuildCache::Entry::Record {
  uint64_t bytes = 0;
  uint64_t last_use = 0;  // BuildCache::tick_ at the last hit or insert.
  int pins = 0;           // Live Entry objects.
};

struct BuildCache::Flight::State {
  bool done = false;
  bool cached = false;
};

namespace {

constexpr std::string_view kManifestHeader = "kbox-build-cache-manifest 1";
constexpr const char* kManifestName = "MANIFEST";
constexpr const char* kOutputName = "compile-output";
constexpr const char* kTreeName = "tree";
constexpr const char* kLockName = ".lock";
constexpr std::string_view kTmpPrefix = ".tmp-";
constexpr std::string_view kTrashPrefix = ".trash-";
// A build directory is a handful of files; these bound what a hostile one
// can make kboxd do (manifest size, recursion depth, open descriptors).
constexpr size_t kMaxItems = 65536;
constexpr int kMaxDepth = 32;
constexpr uint64_t kMaxManifestBytes = 16ull << 20;
constexpr uint64_t kMaxOutputBytes = 1ull << 20;

std::string ErrnoText(const std::string& what) { return what + ": " + std::strerror(errno); }


bool IsHex(std::string_view s, size_t length) {
  return s.size() == length && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

bool IsKey(std::string_view s) { return IsHex(s, 64); }

// Paths in the manifest: bytes outside a plain set are %XX, so a name with
// spaces, newlines or any other byte a candidate chose stays one token.
std::string EscapePath(std::string_view path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '/' || c == '.' || c == '_' || c == '-' || c == '+';
    if (plain) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A relative path of a tree: no empty, "." or ".." component, no NUL.
bool ValidRelativePath(std::string_view path) {
  if (path.empty() || path.find('\0') != std::string_view::npos) return false;
  size_t begin = 0;
  while (begin <= path.size()) {
    size_t end = path.find('/', begin);
    if (end == std::string_view::npos) end = path.size();
    const std::string_view part = path.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    begin = end + 1;
  }
  return true;
}

std::optional<std::string> UnescapePath(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = HexValue(text[i + 1]);
    const int lo = HexValue(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  if (!ValidRelativePath(out)) return std::nullopt;
  return out;
}

std::optional<uint64_t> ParseCount(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

std::vector<std::string_view> Split(std::string_view line) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (begin <= line.size()) {
    size_t end = line.find(' ', begin);
    if (end == std::string_view::npos) end = line.size();
    parts.push_back(line.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

struct Manifest {
  std::string key;
  uint64_t output_size = 0;
  std::string output_sha256;
  std::vector<BuildCache::Item> items;  // Parents before their children.
};

std::string FormatManifest(const Manifest& m) {
  std::string text(kManifestHeader);
  text += "\nkey " + m.key + "\noutput " + std::to_string(m.output_size) + " " + m.output_sha256 + "\n";
  for (const auto& item : m.items) {
    if (item.directory) {
      text += "D " + EscapePath(item.path) + "\n";
    } else {
      text += "F " + std::to_string(item.size) + " " + item.sha256 + " " +
              (item.executable ? "x" : "-") + " " + EscapePath(item.path) + "\n";
    }
  }
  text += "end " + std::to_string(m.items.size()) + "\n";
  return text;
}

std::optional<Manifest> ParseManifest(std::string_view text) {
  Manifest m;
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) return std::nullopt;  // Truncated: no final newline.
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  if (lines.size() < 4 || lines[0] != kManifestHeader) return std::nullopt;
  const auto key = Split(lines[1]);
  if (key.size() != 2 || key[0] != "key" || !IsKey(key[1])) return std::nullopt;
  m.key = std::string(key[1]);
  const auto output = Split(lines[2]);
  if (output.size() != 3 || output[0] != "output" || !IsHex(output[2], 64)) return std::nullopt;
  const auto output_size = ParseCount(output[1]);
  if (!output_size) return std::nullopt;
  m.output_size = *output_size;
  m.output_sha256 = std::string(output[2]);
  std::map<std::string, bool> seen;  // path -> is a directory
  for (size_t i = 3; i + 1 < lines.size(); ++i) {
    const auto parts = Split(lines[i]);
    BuildCache::Item item;
    std::optional<std::string> path;
    if (parts.size() == 2 && parts[0] == "D") {
      item.directory = true;
      path = UnescapePath(parts[1]);
    } else if (parts.size() == 5 && parts[0] == "F" && IsHex(parts[2], 64) &&
               (parts[3] == "x" || parts[3] == "-")) {
      const auto size = ParseCount(parts[1]);
      if (!size) return std::nullopt;
      item.size = *size;
      item.sha256 = std::string(parts[2]);
      item.executable = parts[3] == "x";
      path = UnescapePath(parts[4]);
    } else {
      return std::nullopt;
    }
    if (!path || seen.count(*path)) return std::nullopt;
    // Every parent must be a directory listed before.
    const size_t slash = path->rfind('/');
    if (slash != std::string::npos) {
      const auto parent = seen.find(path->substr(0, slash));
      if (parent == seen.end() || !parent->second) return std::nullopt;
    }
    seen[*path] = item.directory;
    item.path = std::move(*path);
    m.items.push_back(std::move(item));
    if (m.items.size() > kMaxItems) return std::nullopt;
  }
  const auto end = Split(lines.back());
  if (end.size() != 2 || end[0] != "end") return std::nullopt;
  const auto count = ParseCount(end[1]);
  if (!count || *count != m.items.size()) return std::nullopt;
  return m;
}

// Reads a whole small file (no link followed), at most `limit` bytes.
std::optional<std::string> ReadSmallFile(const fs::path& path, uint64_t limit) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > limit) {
    return std::nullopt;
  }
  std::string data;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > limit) return std::nullopt;
  }
  return data;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Writes a new file (never following or overwriting) with `content`.
Status WriteNewFile(const fs::path& path, std::string_view content) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Status::Error(ErrnoText("cannot create " + path.string()));
  if (!WriteAll(fd.get(), content.data(), content.size()) || ::fchmod(fd.get(), 0644) != 0) {
    return Status::Error(ErrnoText("cannot write " + path.string()));
  }
  return Status::Ok();
}

// Names in the directory `dirfd`, sorted; nullopt when it cannot be read.
std::optional<std::vector<std::string>> ListDir(int dirfd) {
  const int dup = ::fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) return std::nullopt;
  DIR* dir = ::fdopendir(dup);
  if (dir == nullptr) {
    ::close(dup);
    return std::nullopt;
  }
  ::rewinddir(dir);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view name(e->d_name);
    if (name != "." && name != "..") names.emplace_back(name);
    if (names.size() > kMaxItems) break;
  }
  const bool failed = errno != 0;
  ::closedir(dir);
  if (failed) return std::nullopt;
  std::sort(names.begin(), names.end());
  return names;
}

// Streams `in` (a regular file) into `out` when given, hashing what it read.
// Stops at `limit` bytes (returns false with *over_limit set).
bool CopyAndHash(int in, int out, uint64_t limit, uint64_t& size, std::string& sha256,
                 bool* over_limit = nullptr) {
  Sha256 hash;
  size = 0;
  std::vector<char> buf(1 << 16);
  while (true) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    size += static_cast<uint64_t>(n);
    if (size > limit) {
      if (over_limit) *over_limit = true;
      return false;
    }
    hash.Update(buf.data(), static_cast<size_t>(n));
    if (out >= 0 && !WriteAll(out, buf.data(), static_cast<size_t>(n))) return false;
  }
  sha256 = hash.HexDigest();
  return true;
}

mode_t NormalMode(bool directory, bool executable) {
  return directory || executable ? 0755 : 0644;
}

// Copies a build directory (untrusted: written by candidate code) into the
// cache, refusing anything that is not a directory or a regular file.
struct CopyIn {
  uint64_t limit = 0;  // Bytes of file content allowed in all.
  uint64_t bytes = 0;
  std::vector<BuildCache::Item> items;
  BuildCache::InsertStatus status = BuildCache::InsertStatus::kStored;
  std::string message;

  bool Fail(BuildCache::InsertStatus s, std::string why) {
    status = s;
    message = std::move(why);
    return false;
  }

  bool Dir(int src, int dst, const std::string& prefix, int depth) {
    const auto names = ListDir(src);
    if (!names) return Fail(BuildCache::InsertStatus::kFailed, "cannot list " + prefix);
    for (const std::string& name : *names) {
      const std::string rel = prefix.empty() ? name : prefix + "/" + name;
      if (items.size() >= kMaxItems) {
        return Fail(BuildCache::InsertStatus::kTooLarge, "more than " + std::to_string(kMaxItems) + " files");
      }
      struct stat st {};
      if (::fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot stat " + rel));
      }
      if (S_ISDIR(st.st_mode)) {
        if (depth >= kMaxDepth) return Fail(BuildCache::InsertStatus::kUnsupportedFile, "nested too deep: " + rel);
        Fd sub(::openat(src, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (sub.get() < 0) return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot open " + rel));
        if (::mkdirat(dst, name.c_str(), 0700) != 0) {
          return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot create " + rel));
        }
        Fd dsub(::openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (dsub.get() < 0 || ::fchmod(dsub.get(), NormalMode(true, false)) != 0) {
          return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot open " + rel));
        }
        BuildCache::Item dir_item;
        dir_item.directory = true;
        dir_item.path = rel;
        items.push_back(std::move(dir_item));
        if (!Dir(sub.get(), dsub.get(), rel, depth + 1)) return false;
      } else if (S_ISREG(st.st_mode)) {
        if (!File(src, dst, name, rel)) return false;
      } else {
        return Fail(BuildCache::InsertStatus::kUnsupportedFile,
                    "not a regular file or directory: " + rel);
      }
    }
    return true;
  }

  bool File(int src, int dst, const std::string& name, const std::string& rel) {
    // O_NONBLOCK: a FIFO swapped in after the stat must not block kboxd.
    Fd in(::openat(src, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (in.get() < 0) {
      if (errno == ELOOP) return Fail(BuildCache::InsertStatus::kUnsupportedFile, "symbolic link: " + rel);
      return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot open " + rel));
    }
    struct stat st {};
    if (::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return Fail(BuildCache::InsertStatus::kUnsupportedFile, "not a regular file: " + rel);
    }
    const bool executable = (st.st_mode & 0111) != 0;
    Fd out(::openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0) return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot create " + rel));
    BuildCache::Item item;
    item.path = rel;
    item.executable = executable;
    bool over = false;
    if (!CopyAndHash(in.get(), out.get(), limit - bytes, item.size, item.sha256, &over)) {
      if (over) return Fail(BuildCache::InsertStatus::kTooLarge, "larger than the cache's bound");
      return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot copy " + rel));
    }
    if (::fchmod(out.get(), NormalMode(false, executable)) != 0) {
      return Fail(BuildCache::InsertStatus::kFailed, ErrnoText("cannot chmod " + rel));
    }
    bytes += item.size;
    items.push_back(std::move(item));
    return true;
  }
};

// Checks an entry's tree against its manifest: exactly the listed
// directories and regular files, each file of the listed size and hash.
bool VerifyTree(int dir, const std::string& prefix, int depth,
                const std::map<std::string, const BuildCache::Item*>& listed, size_t& seen) {
  const auto names = ListDir(dir);
  if (!names || depth > kMaxDepth) return false;
  for (const std::string& name : *names) {
    const std::string rel = prefix.empty() ? name : prefix + "/" + name;
    const auto it = listed.find(rel);
    if (it == listed.end()) return false;  // An extra file.
    const BuildCache::Item& item = *it->second;
    struct stat st {};
    if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
    ++seen;
    if (item.directory) {
      if (!S_ISDIR(st.st_mode)) return false;
      Fd sub(::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (sub.get() < 0 || !VerifyTree(sub.get(), rel, depth + 1, listed, seen)) return false;
      continue;
    }
    if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != item.size) return false;
    Fd in(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (in.get() < 0) return false;
    uint64_t size = 0;
    std::string sha;
    if (!CopyAndHash(in.get(), -1, item.size, size, sha) || size != item.size || sha != item.sha256) {
      return false;
    }
  }
  return true;
}

// Removes everything inside `dir` (not `dir` itself), never following links.
void EmptyDirectory(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> children;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    children.push_back(it->path());
  }
  for (const auto& child : children) fs::remove_all(child, ec);
}

}  // namespace

std::string BuildCacheKey(const BuildKeyInputs& in) {
  Sha256 hash;
  hash.Update("kbox-build-cache-key 1\n");
  const std::pair<std::string_view, const std::string*> fields[] = {
      {"candidate_source", &in.candidate_source}, {"reference_source", &in.reference_source},
      {"backend", &in.backend},                   {"precision", &in.precision},
      {"cuda_arch_list", &in.cuda_arch_list},     {"toolchain", &in.toolchain}};
  for (const auto& [name, value] : fields) {
    std::string head(name);
    head += '=';
    head += std::to_string(value->size());
    head += ':';
    hash.Update(head);
    hash.Update(*value);
    hash.Update("\n");
  }
  return hash.HexDigest();
}

std::string DirectoryDigest(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::pair<std::string, fs::path>> files;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) return "";
  for (; it != end; it.increment(ec)) {
    if (ec) return "";
    const fs::path& path = it->path();
    const auto status = it->symlink_status(ec);
    if (ec) return "";
    if (fs::is_directory(status) && path.filename() == "__pycache__") {
      it.disable_recursion_pending();
      continue;
    }
    if (!fs::is_regular_file(status) || path.extension() == ".pyc") continue;
    files.emplace_back(path.lexically_relative(dir).generic_string(), path);
  }
  std::sort(files.begin(), files.end());
  Sha256 hash;
  for (const auto& [rel, path] : files) {
    const auto content = ReadSmallFile(path, 64ull << 20);
    if (!content) return "";
    hash.Update(rel + "=" + std::to_string(content->size()) + ":");
    hash.Update(*content);
    hash.Update("\n");
  }
  return hash.HexDigest();
}

// ---------------------------------------------------------------------------
// Entry and Flight handles.

BuildCache::Entry::Entry(Entry&& other) noexcept
    : cache_(std::exchange(other.cache_, nullptr)),
      record_(std::move(other.record_)),
      key_(std::move(other.key_)),
      dir_(std::move(other.dir_)),
      compile_output_(std::move(other.compile_output_)),
      items_(std::move(other.items_)),
      bytes_(other.bytes_) {}

BuildCache::Entry::~Entry() {
  if (cache_ && record_) cache_->Unpin(record_);
}

BuildCache::Flight::Flight(Flight&& other) noexcept
    : role_(other.role_),
      cache_(std::exchange(other.cache_, nullptr)),
      key_(std::move(other.key_)),
      state_(std::move(other.state_)),
      entry_(std::move(other.entry_)) {
  other.entry_.reset();
}

BuildCache::Flight::~Flight() { Finish(false); }

void BuildCache::Flight::Finish(bool cached) {
  if (role_ != Role::kBuild || !cache_ || !state_) return;
  cache_->FinishFlight(key_, state_, cached);
  state_.reset();
}

// ---------------------------------------------------------------------------
// The cache.

boost::system::result<std::unique_ptr<BuildCache>, std::string> BuildCache::Open(
    BuildCacheOptions options) {
  if (options.max_bytes == 0) return std::string("max_bytes must be positive");
  std::unique_ptr<BuildCache> cache(new BuildCache(std::move(options)));
  const fs::path& root = cache->options_.root;
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return "cannot create " + root.string() + ": " + ec.message();
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return root.string() + " is not a directory";
  }
  // Only kboxd reads or writes it; stages never see it.
  if (::chmod(root.c_str(), 0700) != 0) return ErrnoText("cannot chmod " + root.string());
  const fs::path lock_path = root / kLockName;
  cache->lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (cache->lock_fd_ < 0) return ErrnoText("cannot open " + lock_path.string());
  if (::flock(cache->lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return root.string() + " is in use by another kboxd (" + std::strerror(errno) + ")";
  }

  struct Found {
    std::string key;
    uint64_t bytes;
    int64_t mtime_ns;
  };
  std::vector<Found> found;
  uint64_t corrupt = 0;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with(kTmpPrefix) || name.starts_with(kTrashPrefix)) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);  // An interrupted insert or delete.
      continue;
    }
    if (!IsKey(name)) continue;  // Not the cache's: left alone.
    struct stat est {};
    const fs::path manifest_path = it->path() / kManifestName;
    std::optional<std::string> text;
    if (::lstat(it->path().c_str(), &est) == 0 && S_ISDIR(est.st_mode)) {
      text = ReadSmallFile(manifest_path, kMaxManifestBytes);
    }
    std::optional<Manifest> manifest = text ? ParseManifest(*text) : std::nullopt;
    if (!manifest || manifest->key != name) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
      ++corrupt;
      continue;
    }
    uint64_t bytes = text->size() + manifest->output_size;
    for (const auto& item : manifest->items) bytes += item.size;
    found.push_back(Found{name, bytes,
                          static_cast<int64_t>(est.st_mtim.tv_sec) * 1'000'000'000 + est.st_mtim.tv_nsec});
  }
  if (ec) return "cannot list " + root.string() + ": " + ec.message();
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<fs::path> doomed;
  uint64_t evicted = 0;
  {
    std::lock_guard lock(cache->mu_);
    for (const auto& f : found) {
      auto record = std::make_shared<Entry::Record>();
      record->bytes = f.bytes;
      record->last_use = ++cache->tick_;
      cache->index_[f.key] = record;
      cache->total_bytes_ += f.bytes;
    }
    cache->stats_.corrupt += corrupt;
    doomed = cache->EvictLocked(evicted);
  }
  for (const auto& path : doomed) fs::remove_all(path, ec);
  const auto& o = cache->options_;
  for (uint64_t i = 0; i < corrupt && o.on_corrupt; ++i) o.on_corrupt();
  if (evicted > 0 && o.on_evicted) o.on_evicted(evicted);
  if (o.on_size) o.on_size(cache->stats().bytes);
  return cache;
}

BuildCache::~BuildCache() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

BuildCache::Stats BuildCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.entries = index_.size();
  s.bytes = total_bytes_;
  return s;
}

void BuildCache::Unpin(const std::shared_ptr<Entry::Record>& record) {
  std::lock_guard lock(mu_);
  --record->pins;
}

fs::path BuildCache::TrashPathLocked(const std::string& key) {
  return options_.root / (std::string(kTrashPrefix) + key + "-" + std::to_string(++counter_));
}

bool BuildCache::DetachLocked(const std::string& key, const std::shared_ptr<Entry::Record>& record,
                              fs::path& trash) {
  trash.clear();
  const auto it = index_.find(key);
  if (it == index_.end() || it->second != record) return false;  // Already gone.
  total_bytes_ -= record->bytes;
  index_.erase(it);
  const fs::path aside = TrashPathLocked(key);
  if (::rename((options_.root / key).c_str(), aside.c_str()) == 0) trash = aside;
  return true;
}

std::vector<fs::path> BuildCache::EvictLocked(uint64_t& evicted) {
  std::vector<fs::path> doomed;
  while (total_bytes_ > options_.max_bytes) {
    auto victim = index_.end();
    for (auto it = index_.begin(); it != index_.end(); ++it) {
      if (it->second->pins > 0) continue;  // In use by a job.
      if (victim == index_.end() || it->second->last_use < victim->second->last_use) victim = it;
    }
    if (victim == index_.end()) break;
    const std::string key = victim->first;
    const std::shared_ptr<Entry::Record> record = victim->second;
    fs::path trash;
    DetachLocked(key, record, trash);
    if (!trash.empty()) doomed.push_back(trash);
    ++stats_.evictions;
    ++evicted;
  }
  return doomed;
}

void BuildCache::ReportCorrupt(std::vector<fs::path> doomed) {
  std::error_code ec;
  for (const auto& path : doomed) fs::remove_all(path, ec);
  if (options_.on_corrupt) options_.on_corrupt();
  if (options_.on_size) options_.on_size(stats().bytes);
}

std::optional<BuildCache::Entry> BuildCache::Lookup(const std::string& key) {
  if (!IsKey(key)) return std::nullopt;
  std::shared_ptr<Entry::Record> record;
  {
    std::lock_guard lock(mu_);
    const auto it = index_.find(key);
    if (it == index_.end()) {
      ++stats_.misses;
      return std::nullopt;
    }
    record = it->second;
    ++record->pins;  // Not evicted while it is verified and restored.
  }
  Entry entry(this, record, key, options_.root / key);

  bool valid = false;
  const auto text = ReadSmallFile(entry.dir_ / kManifestName, kMaxManifestBytes);
  std::optional<Manifest> manifest = text ? ParseManifest(*text) : std::nullopt;
  if (manifest && manifest->key == key) {
    std::map<std::string, const Item*> listed;
    for (const auto& item : manifest->items) listed[item.path] = &item;
    const auto output = ReadSmallFile(entry.dir_ / kOutputName, kMaxOutputBytes);
    Fd tree(::open(entry.tree().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    size_t seen = 0;
    valid = output && output->size() == manifest->output_size &&
            Sha256Hex(*output) == manifest->output_sha256 && tree.get() >= 0 &&
            VerifyTree(tree.get(), "", 0, listed, seen) && seen == listed.size();
    // Nothing but the three names in the entry's directory.
    if (valid) {
      Fd dir(::open(entry.dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      const auto names = dir.get() >= 0 ? ListDir(dir.get()) : std::nullopt;
      valid = names && *names == std::vector<std::string>{kManifestName, kOutputName, kTreeName};
    }
    if (valid) {
      entry.compile_output_ = *output;
      entry.items_ = std::move(manifest->items);
      entry.bytes_ = record->bytes;
    }
  }
  if (!valid) {
    fs::path doomed;
    bool detached = false;
    {
      std::lock_guard lock(mu_);
      detached = DetachLocked(key, record, doomed);
      if (detached) ++stats_.corrupt;  // Else another job found it first.
      ++stats_.misses;
    }
    if (detached) ReportCorrupt({doomed});
    return std::nullopt;  // `entry` unpins.
  }
  {
    std::lock_guard lock(mu_);
    record->last_use = ++tick_;
    ++stats_.hits;
  }
  ::utimensat(AT_FDCWD, entry.dir_.c_str(), nullptr, 0);  // LRU order after a restart.
  return entry;
}

BuildCache::InsertResult BuildCache::Insert(const std::string& key, const fs::path& build_dir,
                                            const std::string& compile_output) {
  if (!IsKey(key)) return {InsertStatus::kFailed, "malformed key"};
  {
    std::lock_guard lock(mu_);
    if (index_.count(key)) return {InsertStatus::kPresent, ""};
  }
  if (compile_output.size() > kMaxOutputBytes || compile_output.size() >= options_.max_bytes) {
    return {InsertStatus::kTooLarge, "compile output too large"};
  }
  fs::path tmp;
  {
    std::lock_guard lock(mu_);
    tmp = options_.root / (std::string(kTmpPrefix) + key + "-" + std::to_string(++counter_));
  }
  std::error_code ec;
  auto discard = [&](InsertStatus status, std::string message) {
    fs::remove_all(tmp, ec);
    return InsertResult{status, std::move(message)};
  };
  if (::mkdir(tmp.c_str(), 0700) != 0) return {InsertStatus::kFailed, ErrnoText("cannot create " + tmp.string())};
  const fs::path tree = tmp / kTreeName;
  if (::mkdir(tree.c_str(), 0755) != 0 || ::chmod(tree.c_str(), 0755) != 0) {
    return discard(InsertStatus::kFailed, ErrnoText("cannot create " + tree.string()));
  }
  Manifest manifest;
  manifest.key = key;
  {
    Fd src(::open(build_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (src.get() < 0) return discard(InsertStatus::kFailed, ErrnoText("cannot open " + build_dir.string()));
    Fd dst(::open(tree.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (dst.get() < 0) return discard(InsertStatus::kFailed, ErrnoText("cannot open " + tree.string()));
    CopyIn copy;
    copy.limit = options_.max_bytes - compile_output.size();
    if (!copy.Dir(src.get(), dst.get(), "", 0)) return discard(copy.status, copy.message);
    manifest.items = std::move(copy.items);
  }
  manifest.output_size = compile_output.size();
  manifest.output_sha256 = Sha256Hex(compile_output);
  if (Status e = WriteNewFile(tmp / kOutputName, compile_output); !e.ok()) {
    return discard(InsertStatus::kFailed, e.message());
  }
  const std::string text = FormatManifest(manifest);
  uint64_t bytes = text.size() + compile_output.size();
  for (const auto& item : manifest.items) bytes += item.size;
  if (bytes > options_.max_bytes) return discard(InsertStatus::kTooLarge, "larger than the cache's bound");
  if (Status e = WriteNewFile(tmp / kManifestName, text); !e.ok())
    return discard(InsertStatus::kFailed, e.message());

  const fs::path final_dir = options_.root / key;
  std::vector<fs::path> doomed;
  uint64_t evicted = 0;
  {
    std::lock_guard lock(mu_);
    if (index_.count(key)) return discard(InsertStatus::kPresent, "");
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
      // A directory under the key that the index does not know (left by a
      // failed delete): move it aside and try once more.
      const fs::path stale = TrashPathLocked(key);
      if (::rename(final_dir.c_str(), stale.c_str()) != 0 ||
          ::rename(tmp.c_str(), final_dir.c_str()) != 0) {
        return discard(InsertStatus::kFailed, ErrnoText("cannot rename into " + final_dir.string()));
      }
      doomed.push_back(stale);
    }
    auto record = std::make_shared<Entry::Record>();
    record->bytes = bytes;
    record->last_use = ++tick_;
    index_[key] = record;
    total_bytes_ += bytes;
    ++stats_.inserts;
    auto evicted_dirs = EvictLocked(evicted);
    doomed.insert(doomed.end(), evicted_dirs.begin(), evicted_dirs.end());
  }
  ::utimensat(AT_FDCWD, final_dir.c_str(), nullptr, 0);
  for (const auto& path : doomed) fs::remove_all(path, ec);
  if (evicted > 0 && options_.on_evicted) options_.on_evicted(evicted);
  if (options_.on_size) options_.on_size(stats().bytes);
  return {InsertStatus::kStored, ""};
}

Status BuildCache::Restore(const Entry& entry, const fs::path& build_dir, std::optional<uid_t> owner_uid,
                           std::optional<gid_t> owner_gid) {
  Fd tree(::open(entry.tree().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  Fd dst(::open(build_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dst.get() < 0) return Status::Error(ErrnoText("cannot open " + build_dir.string()));
  bool corrupt = tree.get() < 0;
  std::string error = corrupt ? "the entry's tree is missing" : "";
  const uid_t uid = owner_uid.value_or(static_cast<uid_t>(-1));
  const gid_t gid = owner_gid.value_or(static_cast<gid_t>(-1));
  const bool chown = owner_uid.has_value() || owner_gid.has_value();
  for (const Item& item : entry.items()) {
    if (!error.empty()) break;
    const char* rel = item.path.c_str();
    if (item.directory) {
      if (::mkdirat(dst.get(), rel, 0700) != 0 ||
          ::fchmodat(dst.get(), rel, NormalMode(true, false), 0) != 0 ||
          (chown && ::fchownat(dst.get(), rel, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)) {
        error = ErrnoText("cannot create " + item.path);
      }
      continue;
    }
    Fd in(::openat(tree.get(), rel, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (in.get() < 0 || ::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<uint64_t>(st.st_size) != item.size) {
      corrupt = true;
      error = "cached file " + item.path + " is missing or changed";
      break;
    }
    Fd out(::openat(dst.get(), rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0) {
      error = ErrnoText("cannot create " + item.path);
      break;
    }
    uint64_t size = 0;
    std::string sha;
    bool over = false;
    if (!CopyAndHash(in.get(), out.get(), item.size, size, sha, &over)) {
      corrupt = over;
      error = over ? "cached file " + item.path + " changed" : ErrnoText("cannot copy " + item.path);
      break;
    }
    if (size != item.size || sha != item.sha256) {
      corrupt = true;
      error = "cached file " + item.path + " changed";
      break;
    }
    if (::fchmod(out.get(), NormalMode(false, item.executable)) != 0 ||
        (chown && ::fchown(out.get(), uid, gid) != 0)) {
      error = ErrnoText("cannot set the owner of " + item.path);
    }
  }
  if (error.empty()) return Status::Ok();
  EmptyDirectory(build_dir);
  if (corrupt) {
    fs::path doomed;
    bool detached = false;
    {
      std::lock_guard lock(mu_);
      detached = DetachLocked(entry.key(), entry.record_, doomed);
      if (detached) ++stats_.corrupt;
    }
    if (detached) ReportCorrupt({doomed});
  }
  return Status::Error(error);
}

BuildCache::Flight BuildCache::Acquire(const std::string& key) {
  std::unique_lock lock(mu_);
  if (const auto it = flights_.find(key); it != flights_.end()) {
    // Another job is building this key: wait for its outcome.
    const std::shared_ptr<Flight::State> state = it->second;
    flight_done_.wait(lock, [&] { return state->done; });
    const bool cached = state->cached;
    lock.unlock();
    if (cached) {
      if (auto entry = Lookup(key)) {
        Flight flight(Flight::Role::kHit, this, key, nullptr);
        flight.entry_.emplace(std::move(*entry));
        return flight;
      }
    }
    return Flight(Flight::Role::kBuildAlone, this, key, nullptr);
  }
  auto state = std::make_shared<Flight::State>();
  flights_[key] = state;
  lock.unlock();
  Flight flight(Flight::Role::kBuild, this, key, state);
  if (auto entry = Lookup(key)) {
    flight.Finish(true);  // Anyone who came meanwhile looks it up too.
    flight.role_ = Flight::Role::kHit;
    flight.entry_.emplace(std::move(*entry));
  }
  return flight;
}

void BuildCache::FinishFlight(const std::string& key, const std::shared_ptr<Flight::State>& state,
                              bool cached) {
  {
    std::lock_guard lock(mu_);
    state->done = true;
    state->cached = cached;
    const auto it = flights_.find(key);
    if (it != flights_.end() && it->second == state) flights_.erase(it);
  }
  flight_done_.notify_all();
}

boost::system::result<std::vector<BuildFileData>, std::string> ReadEntryFiles(
    const BuildCache::Entry& entry) {
  Fd tree(::open(entry.tree().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (tree.get() < 0) return ErrnoText("cannot open " + entry.tree().string());
  std::vector<BuildFileData> files;
  for (const BuildCache::Item& item : entry.items()) {
    BuildFileData data{.item = item, .content = {}};
    if (!item.directory) {
      Fd in(::openat(tree.get(), item.path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      struct stat st {};
      if (in.get() < 0 || ::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
          static_cast<uint64_t>(st.st_size) != item.size) {
        return "cached file " + item.path + " is missing or changed";
      }
      data.content.resize(item.size);
      size_t done = 0;
      while (done < data.content.size()) {
        const ssize_t n = ::read(in.get(), data.content.data() + done, data.content.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return ErrnoText("cannot read cached file " + item.path);
        done += static_cast<size_t>(n);
      }
      if (Sha256Hex(data.content) != item.sha256) return "cached file " + item.path + " changed";
    }
    files.push_back(std::move(data));
  }
  return files;
}

Status WriteBuildFiles(const std::vector<BuildFileData>& files, const fs::path& build_dir, uint64_t max_bytes,
                       std::optional<uid_t> owner_uid, std::optional<gid_t> owner_gid) {
  Fd dst(::open(build_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dst.get() < 0) return Status::Error(ErrnoText("cannot open " + build_dir.string()));
  const uid_t uid = owner_uid.value_or(static_cast<uid_t>(-1));
  const gid_t gid = owner_gid.value_or(static_cast<gid_t>(-1));
  const bool chown = owner_uid.has_value() || owner_gid.has_value();
  std::set<std::string> directories;
  uint64_t total = 0;
  std::string error;
  for (const BuildFileData& file : files) {
    const BuildCache::Item& item = file.item;
    const std::string& path = item.path;
    if (!ValidRelativePath(path)) {
      error = "the build names an invalid path '" + EscapePath(path) + "'";
      break;
    }
    // Every parent listed (and so made by this function) before its child:
    // nothing is ever written through a directory this function did not make.
    if (const auto slash = path.rfind('/');
        slash != std::string::npos && !directories.contains(path.substr(0, slash))) {
      error = "the build lists " + EscapePath(path) + " before its directory";
      break;
    }
    const char* rel = path.c_str();
    if (item.directory) {
      if (::mkdirat(dst.get(), rel, 0700) != 0 ||
          ::fchmodat(dst.get(), rel, NormalMode(true, false), 0) != 0 ||
          (chown && ::fchownat(dst.get(), rel, uid, gid, AT_SYMLINK_NOFOLLOW) != 0)) {
        error = ErrnoText("cannot create " + EscapePath(path));
        break;
      }
      directories.insert(path);
      continue;
    }
    total += file.content.size();
    if (total > max_bytes) {
      error = "the build is larger than " + std::to_string(max_bytes) + " bytes";
      break;
    }
    if (file.content.size() != item.size || Sha256Hex(file.content) != item.sha256) {
      error = "file " + EscapePath(path) + " does not match its size and SHA-256";
      break;
    }
    Fd out(::openat(dst.get(), rel, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (out.get() < 0 || !WriteAll(out.get(), file.content.data(), file.content.size()) ||
        ::fchmod(out.get(), NormalMode(false, item.executable)) != 0 ||
        (chown && ::fchown(out.get(), uid, gid) != 0)) {
      error = ErrnoText("cannot write " + EscapePath(path));
      break;
    }
  }
  if (error.empty()) return Status::Ok();
  EmptyDirectory(build_dir);
  return Status::Error(error);
}

}  // namespace kbox
