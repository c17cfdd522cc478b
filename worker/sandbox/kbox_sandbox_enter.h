#pragma once

/* C ABI of libkbox_sandbox_enter.so: the sandbox entered by the calling
 * process itself, for kbox's pre-forked run stages (docs/prefork.md). Loaded
 * with ctypes by worker/harness/kbox_zygote.py, in a freshly forked,
 * single-threaded child of the zygote, as the host's root. */

#include <stddef.h>

#define KBOX_SANDBOX_ENTER_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/* Builds the sandbox described by the binary kbox.v1.SandboxSpec at
 * `spec_path`; the calling process becomes its launcher. Returns 0 in the
 * sandboxed program process only, with every step of kbox-sandbox applied
 * (namespaces, root file system, cgroup, rlimits, unprivileged id,
 * no_new_privs, only 0-2 and the spec's keep_fds open, seccomp). The
 * environment and argv of the spec are NOT applied: the caller sets its own
 * (kbox_sandbox_spec_strings). Launcher and init never return: they exit as
 * kbox-sandbox does. Returns -1 with a message in `err` when nothing was
 * started (the caller is still unconfined and must exit). */
KBOX_SANDBOX_ENTER_API int kbox_sandbox_enter(const char* spec_path, char* err, size_t err_len);

/* The spec's argv (field 0) or env (field 1) as NUL-terminated strings back to
 * back in `buf`. Returns the bytes needed (nothing is written when `len` is
 * smaller), or -1 when the spec cannot be read. */
KBOX_SANDBOX_ENTER_API long kbox_sandbox_spec_strings(const char* spec_path, int field, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
