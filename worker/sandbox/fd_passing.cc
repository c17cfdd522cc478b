#include "worker/sandbox/fd_passing.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstring>

namespace kbox::sandbox {

bool SendFds(int sock, std::span<const int> fds, std::string_view payload) {
  constexpr size_t kMaxFds = 4;
  if (fds.empty() || fds.size() > kMaxFds || payload.empty()) return false;
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(cmsg), fds.data(), fds.size() * sizeof(int));
  return ::sendmsg(sock, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(payload.size());
}

int ReceiveFd(int sock) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) != 1) return -1;
  cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
  if (!cmsg || cmsg->cmsg_type != SCM_RIGHTS) return -1;
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
  return fd;
}

}  // namespace kbox::sandbox
