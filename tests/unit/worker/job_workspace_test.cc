#include "worker/job_workspace.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "tests/unit/temp_dir.h"

namespace kbox {
namespace {

namespace fs = std::filesystem;
using kbox::testing::TempDir;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

mode_t ModeOf(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

template <typename Edit>
WorkspaceOptions Options(Edit edit) {
  WorkspaceOptions options;
  edit(options);
  return options;
}

TEST(JobWorkspaceTest, CreatesPrivateDirectoriesAndSources) {
  TempDir tmp;
  auto ws = JobWorkspace::Create(tmp.path(), "job1", "ref source", "cand source");
  ASSERT_TRUE(ws) << ws.error().message();
  EXPECT_EQ(ws->root(), tmp.path() / "jobs" / "job1");
  EXPECT_EQ(ws->job_id(), "job1");
  for (const fs::path& dir : {ws->build_dir(), ws->home_dir(), ws->tmp_dir(), ws->triton_dir()}) {
    EXPECT_TRUE(fs::is_directory(dir)) << dir;
    // build/ is read by the run stage's judge, another uid than its owner.
    EXPECT_EQ(ModeOf(dir), dir == ws->build_dir() ? 0755u : 0700u) << dir;
    EXPECT_EQ(dir.parent_path(), ws->root()) << dir;
  }
  // Sources sit apart from the writable directories: the sandbox binds src/
  // read-only, so a compile stage cannot rewrite the reference.
  EXPECT_EQ(ws->reference_path().parent_path(), ws->src_dir());
  EXPECT_EQ(ReadAll(ws->reference_path()), "ref source");
  EXPECT_EQ(ReadAll(ws->candidate_path()), "cand source");
  EXPECT_EQ(ModeOf(ws->reference_path()) & 0222u, ModeOf(ws->reference_path()) & 0200u);
  EXPECT_FALSE(ws->scratch_capped());
}

// kboxd hands the writable directories to the sandbox's uid; the sources
// stay kboxd's.
TEST(JobWorkspaceTest, WritableDirectoriesBelongToTheGivenOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown needs root";
  TempDir tmp;
  auto ws = JobWorkspace::Create(tmp.path(), "job", "r", "c", Options([](WorkspaceOptions& o) {
                                   o.owner_uid = 65534;
                                   o.owner_gid = 65534;
                                 }));
  ASSERT_TRUE(ws) << ws.error().message();
  struct stat st {};
  ASSERT_EQ(::stat(ws->build_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  ASSERT_EQ(::stat(ws->reference_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid());
}

// A size-capped tmpfs on the job directory: a job cannot fill the host disk,
// and destroying the workspace drops everything at once.
TEST(JobWorkspaceTest, ScratchTmpfsCapsDiskUse) {
  if (::geteuid() != 0) GTEST_SKIP() << "mount needs root";
  TempDir tmp;
  fs::path root;
  {
    auto ws = JobWorkspace::Create(tmp.path(), "job", "r", "c",
                                   Options([](WorkspaceOptions& o) { o.scratch_bytes = 1 << 20; }));
    ASSERT_TRUE(ws) << ws.error().message();
    EXPECT_TRUE(ws->scratch_capped());
    root = ws->root();
    std::ofstream out(ws->home_dir() / "fill.bin", std::ios::binary);
    const std::string block(64 << 10, 'x');
    for (int i = 0; i < 64 && out; ++i) out << block;  // 4 MiB into a 1 MiB tmpfs.
    out.flush();
    EXPECT_FALSE(out.good());
  }
  EXPECT_FALSE(fs::exists(root));
}

TEST(JobWorkspaceTest, RefusesExistingJobDirectoryAndLeavesItAlone) {
  TempDir tmp;
  auto first = JobWorkspace::Create(tmp.path(), "same", "r", "c");
  ASSERT_TRUE(first);
  {
    auto second = JobWorkspace::Create(tmp.path(), "same", "r2", "c2");
    ASSERT_FALSE(second);
    EXPECT_NE(second.error().message().find("same"), std::string::npos) << second.error().message();
  }
  // The failed attempt must not have removed or rewritten the first job's files.
  EXPECT_EQ(ReadAll(first->reference_path()), "r");
  EXPECT_EQ(ReadAll(first->candidate_path()), "c");
}

TEST(JobWorkspaceTest, WriteFileCreatesNewFile) {
  TempDir tmp;
  auto ws = JobWorkspace::Create(tmp.path(), "job", "r", "c");
  ASSERT_TRUE(ws);
  EXPECT_TRUE(ws->WriteFile("spec.json", "{}").ok());
  EXPECT_EQ(ReadAll(ws->src_dir() / "spec.json"), "{}");
}

TEST(JobWorkspaceTest, WriteFileRefusesToOverwrite) {
  TempDir tmp;
  auto ws = JobWorkspace::Create(tmp.path(), "job", "original", "c");
  ASSERT_TRUE(ws);
  const auto error = ws->WriteFile("reference.py", "replaced");
  ASSERT_FALSE(error.ok());
  EXPECT_NE(error.message().find("reference.py"), std::string::npos) << error.message();
  EXPECT_EQ(ReadAll(ws->reference_path()), "original");
}

TEST(JobWorkspaceTest, WriteFileDoesNotFollowSymlink) {
  TempDir tmp;
  const fs::path outside = tmp.path() / "outside.txt";
  std::ofstream(outside) << "precious";
  auto ws = JobWorkspace::Create(tmp.path(), "job", "r", "c");
  ASSERT_TRUE(ws);
  fs::create_symlink(outside, ws->src_dir() / "X");

  EXPECT_FALSE(ws->WriteFile("X", "attack").ok());
  EXPECT_EQ(ReadAll(outside), "precious");

  // A dangling link must not be followed to create its target either.
  const fs::path missing = tmp.path() / "created-through-link";
  fs::create_symlink(missing, ws->src_dir() / "Y");
  EXPECT_FALSE(ws->WriteFile("Y", "attack").ok());
  EXPECT_FALSE(fs::exists(missing));
}

TEST(JobWorkspaceTest, DestructorRemovesTreeButNotLinkTargets) {
  TempDir tmp;
  const fs::path outside_dir = tmp.path() / "outside";
  fs::create_directory(outside_dir);
  std::ofstream(outside_dir / "keep.txt") << "keep";
  std::ofstream(tmp.path() / "keep-file.txt") << "keep";
  fs::path root;
  {
    auto ws = JobWorkspace::Create(tmp.path(), "job", "r", "c");
    ASSERT_TRUE(ws);
    root = ws->root();
    fs::create_directory_symlink(outside_dir, ws->build_dir() / "link-to-dir");
    fs::create_symlink(tmp.path() / "keep-file.txt", ws->root() / "link-to-file");
    std::ofstream(ws->tmp_dir() / "scratch") << "x";
  }
  EXPECT_FALSE(fs::exists(fs::symlink_status(root)));
  EXPECT_TRUE(fs::exists(outside_dir / "keep.txt"));
  EXPECT_EQ(ReadAll(tmp.path() / "keep-file.txt"), "keep");
}

TEST(JobWorkspaceTest, KeepLeavesTreeInPlace) {
  TempDir tmp;
  fs::path root;
  {
    auto ws = JobWorkspace::Create(tmp.path(), "job", "r", "c", Options([](WorkspaceOptions& o) { o.keep = true; }));
    ASSERT_TRUE(ws);
    root = ws->root();
  }
  EXPECT_TRUE(fs::is_directory(root));
  EXPECT_EQ(ReadAll(root / "src" / "candidate.py"), "c");
}

TEST(JobWorkspaceTest, MovedFromWorkspaceDoesNotRemoveTree) {
  TempDir tmp;
  auto created = JobWorkspace::Create(tmp.path(), "job", "r", "c");
  ASSERT_TRUE(created);
  const fs::path root = created->root();
  {
    std::optional<JobWorkspace> first(std::move(*created));
    JobWorkspace owner(std::move(*first));
    first.reset();  // The moved-from object's destructor must leave the tree alone.
    EXPECT_EQ(owner.root(), root);
    EXPECT_TRUE(fs::is_directory(root));
  }
  EXPECT_FALSE(fs::exists(root));
}

// Each run stage's judge gets a directory of its own in the job's root, which
// no stage can write: a fresh name every time, 0700, never one that exists.
TEST(JobWorkspaceTest, JudgeDirectoriesAreFreshAndPrivate) {
  TempDir tmp;
  auto ws = JobWorkspace::Create(tmp.path(), "job2", "r", "c");
  ASSERT_TRUE(ws) << ws.error().message();
  // Something already named like the first (kboxd never makes it: a stage
  // cannot write the job's root, but the name must not be reused either way).
  fs::create_directory(ws->root() / "judge-1");
  auto first = ws->CreateJudgeDir(std::nullopt, std::nullopt);
  auto second = ws->CreateJudgeDir(std::nullopt, std::nullopt);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(*first, ws->root() / "judge-2");
  EXPECT_EQ(*second, ws->root() / "judge-3");
  EXPECT_EQ(ModeOf(*first), 0700u);
  EXPECT_TRUE(fs::is_empty(*second));
}

}  // namespace
}  // namespace kbox
