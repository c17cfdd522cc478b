#pragma once

// Passing one descriptor over an AF_UNIX socket (SCM_RIGHTS): the sandboxed
// program hands its seccomp listener to init this way.

namespace kbox::sandbox {

// Sends descriptor `fd` over `sock` with a one-byte message; true on success.
bool SendFd(int sock, int fd);

// Receives a descriptor sent by SendFd (close-on-exec), or -1.
int ReceiveFd(int sock);

}  // namespace kbox::sandbox
