"""Honest clamp-scale (as cand_clamp_scale_ok.py) that also tries, from its
compiled code (no Python audit hook sees it), to reach the judge (the process
holding the reference's outputs and the trial seed) through /proc: the
memory, descriptors and environment of its parent and of every other process
its /proc lists. Each open must fail (the judge is another uid, which the
stage's procfs hides, and is not dumpable); it prints what it got."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_source = r"""
#include <torch/extension.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <unistd.h>

// "JUDGE_PROBE <what> opened|errno=N" for each /proc path of the parent, and
// "OTHER_PROBE <pid> <what> opened" for any other process's that opens.
std::string probe_judge() {
    std::string seen;
    const char* whats[] = {"mem", "fd/0", "environ"};
    for (const char* what : whats) {
        char path[64];
        std::snprintf(path, sizeof path, "/proc/%d/%s", (int)getppid(), what);
        const int fd = open(path, O_RDONLY);
        const int err = errno;
        char line[96];
        if (fd >= 0) {
            close(fd);
            std::snprintf(line, sizeof line, "JUDGE_PROBE %s opened\n", what);
        } else {
            std::snprintf(line, sizeof line, "JUDGE_PROBE %s errno=%d\n", what, err);
        }
        seen += line;
    }
    char self[64] = "";
    const ssize_t n = readlink("/proc/self", self, sizeof self - 1);
    if (n > 0) self[n] = 0;
    if (DIR* dir = opendir("/proc")) {
        int others = 0;
        while (dirent* e = readdir(dir)) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9' || std::strcmp(e->d_name, self) == 0) continue;
            ++others;
            for (const char* what : whats) {
                char path[300];
                std::snprintf(path, sizeof path, "/proc/%s/%s", e->d_name, what);
                const int fd = open(path, O_RDONLY);
                if (fd >= 0) {
                    close(fd);
                    seen += std::string("OTHER_PROBE ") + e->d_name + " " + what + " opened\n";
                }
            }
        }
        closedir(dir);
        seen += "OTHER_PROBE looked at " + std::to_string(others) + " processes\n";
    }
    return seen;
}

torch::Tensor clamp_scale(torch::Tensor x, torch::Tensor gain) {
    auto out = (x.contiguous() * gain.contiguous());
    float* op = out.data_ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) {
        float v = op[i] < -1.0f ? -1.0f : op[i];
        op[i] = v > 1.0f ? 1.0f : v;
    }
    return out;
}
"""

_ext = load_inline(
    name="kbox_it_reads_judge_memory",
    cpp_sources=_source,
    functions=["clamp_scale", "probe_judge"],
)


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
        print(_ext.probe_judge(), flush=True)
        return _ext.clamp_scale(x, self.gain)
