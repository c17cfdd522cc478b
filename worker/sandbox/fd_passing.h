#pragma once

// Passing descriptors over an AF_UNIX socket (SCM_RIGHTS): the sandboxed
// program hands its seccomp listener to init this way, and kboxd hands a
// run stage's pipes to its zygote (worker/zygote.cc).

#include <span>
#include <string_view>

namespace kbox::sandbox {

// Sends `fds` with the message `payload` (not empty) over `sock`, without
// SIGPIPE; true when the whole message went.
bool SendFds(int sock, std::span<const int> fds, std::string_view payload);

// Sends descriptor `fd` over `sock` with a one-byte message; true on success.
inline bool SendFd(int sock, int fd) { return SendFds(sock, {&fd, 1}, "L"); }

// Receives a descriptor sent by SendFd (close-on-exec), or -1.
int ReceiveFd(int sock);

}  // namespace kbox::sandbox
