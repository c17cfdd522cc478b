"""Honest clamp-scale in plain torch (run with the static checks off) that, at
import, in the compile stage and again in the run stage, plants every name
kboxd makes for a job in every place a stage can write: its HOME, /tmp, the
extensions directory and its working directory get files, directories and
links to /etc called kbox_turn, kbox_turn_notes, kbox_secret.json,
run_spec.json, compile_spec.json, judge-1 and judge-2. kboxd makes its own
files where no stage writes (the judge's judge-N directory, the read-only
source directory), so the job must run as any honest one: CORRECT, no retry."""
import os

import torch
import torch.nn as nn

_NAMES = ("kbox_turn", "kbox_turn_notes", "kbox_secret.json", "run_spec.json",
          "compile_spec.json", "judge-1", "judge-2")


def _plant():
    places = {os.environ.get("HOME"), os.environ.get("TMPDIR"), "/tmp",
              os.environ.get("TORCH_EXTENSIONS_DIR"), os.getcwd()}
    planted = 0
    for place in sorted(p for p in places if p):
        for i, name in enumerate(_NAMES):
            path = os.path.join(place, name)
            try:
                if i % 3 == 0:
                    os.symlink("/etc", path)
                elif i % 3 == 1:
                    os.mkdir(path)
                else:
                    with open(path, "w") as f:
                        f.write("{\"planted\": true}\n")
                planted += 1
            except OSError:
                pass
    print("PLANTED %d" % planted, flush=True)


_plant()


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.gain = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return torch.clamp(x * self.gain, -1.0, 1.0)
