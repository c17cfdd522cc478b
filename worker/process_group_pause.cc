#include "worker/process_group_pause.h"

#include <dirent.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace kbox {
namespace {

// Fields of /proc/<pid>[/task/<tid>]/stat after the command's closing paren:
// state is the first, the process group the third.
struct StatFields {
  char state = '?';
  long group = 0;
};

bool ReadStat(const std::string& path, StatFields& out) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto paren = line.rfind(')');  // The command may contain spaces and parens.
  if (paren == std::string::npos) return false;
  long parent = 0;
  return std::sscanf(line.c_str() + paren + 1, " %c %ld %ld", &out.state, &parent, &out.group) == 3;
}

std::vector<long> NumericEntries(const char* dir_path) {
  std::vector<long> out;
  DIR* dir = ::opendir(dir_path);
  if (!dir) return out;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long n = std::strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0' && n > 0) out.push_back(n);
  }
  ::closedir(dir);
  return out;
}

// A thread that has exited or is a zombie can no longer run either.
bool Halted(char state) { return state == 'T' || state == 't' || state == 'Z' || state == 'X'; }

std::string Wchan(const std::string& task) {
  std::ifstream in(task + "/wchan");
  std::string name;
  std::getline(in, name);
  return name.empty() || name == "0" ? "-" : name;
}

// Processes of `group`, and whether every thread of them is halted; threads
// still running are described in `running` when given.
bool GroupHalted(pid_t group, size_t& members, std::string* running = nullptr) {
  members = 0;
  bool halted = true;
  for (const long pid : NumericEntries("/proc")) {
    StatFields process;
    const std::string base = "/proc/" + std::to_string(pid);
    if (!ReadStat(base + "/stat", process) || process.group != group) continue;
    ++members;
    for (const long tid : NumericEntries((base + "/task").c_str())) {
      StatFields thread;
      // A thread gone between the listing and the read has exited.
      const std::string task = base + "/task/" + std::to_string(tid);
      if (ReadStat(task + "/stat", thread) && !Halted(thread.state)) {
        halted = false;
        if (running) {
          *running += (running->empty() ? "" : ", ") + std::string("thread ") + std::to_string(tid) +
                      " of " + std::to_string(pid) + " in state " + thread.state + " at " + Wchan(task);
        }
      }
    }
  }
  return halted;
}

}  // namespace

bool ProcessGroupStopped(pid_t group) {
  size_t members = 0;
  return GroupHalted(group, members) && members > 0;
}

bool StopProcessGroup(pid_t group, std::chrono::milliseconds limit, std::string* running) {
  if (group <= 1 || ::kill(-group, SIGSTOP) != 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (auto pause = std::chrono::microseconds(200);; pause = std::min(pause * 2, std::chrono::microseconds(5000))) {
    if (ProcessGroupStopped(group)) return true;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
  }
  if (running) {
    size_t members = 0;
    running->clear();
    GroupHalted(group, members, running);
  }
  ::kill(-group, SIGCONT);
  return false;
}

void ContinueProcessGroup(pid_t group) {
  if (group > 1) ::kill(-group, SIGCONT);
}

void PausableGroup::Publish(pid_t group) {
  std::lock_guard lock(mu_);
  group_ = group;
  reaped_ = false;
  // A fresh process is in no driver call, so the stop takes at once; it is
  // kept even unconfirmed (a pending SIGSTOP takes effect on the way back to
  // user space), since the holder already times.
  if (paused_ && group_ > 1) {
    ::kill(-group_, SIGSTOP);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!ProcessGroupStopped(group_) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

void PausableGroup::Withdraw() {
  std::lock_guard lock(mu_);
  // A stopped group that is being reaped is killed, not continued: SIGKILL
  // ends stopped processes too.
  group_ = 0;
  reaped_ = true;
  paused_ = false;
}

bool PausableGroup::Pause(std::chrono::milliseconds limit, std::string* running) {
  std::lock_guard lock(mu_);
  if (reaped_) return false;
  paused_ = group_ == 0 || StopProcessGroup(group_, limit, running);
  return paused_;
}

void PausableGroup::Resume() {
  std::lock_guard lock(mu_);
  if (group_ != 0 && paused_) ContinueProcessGroup(group_);
  paused_ = false;
}

}  // namespace kbox
