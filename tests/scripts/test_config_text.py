"""scripts/kbox_config_text.py: settings written one per line are filed
under their DaemonConfig sections as config.proto names them, and kboxd's
own loader accepts what it writes (tests/unit/daemon/config_loader_test.cc
holds the loader to the sections)."""
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import kbox_config_text as config_text  # noqa: E402


def test_every_setting_has_one_section_from_the_proto():
    where = config_text.section_of_each_setting()
    assert where["listen"] == "listener"
    assert where["compile_workers"] == "scheduling"
    assert where["job_memory_bytes"] == "limits"
    assert where["light_headers"] == "experimental"
    assert set(where.values()) == {"listener", "auth", "limits", "sandbox", "scheduling", "caches", "store",
                                   "experimental"}
    assert len(where) > 60


def test_lines_are_grouped_by_section_in_first_seen_order():
    text = ("default_time_limit_s: 60\n# a comment\n\ngpus: 0\nmax_time_limit_s: 120\n"
            "backends: [\"cpu\"]\nlisten: \"127.0.0.1:0\"\n")
    assert config_text.sectioned(text) == (
        "limits {\n  default_time_limit_s: 60\n  max_time_limit_s: 120\n}\n"
        "scheduling {\n  gpus: 0\n  backends: [\"cpu\"]\n}\n"
        "listener {\n  listen: \"127.0.0.1:0\"\n}\n")


def test_a_name_that_is_no_setting_is_refused():
    with pytest.raises(ValueError, match="compile_wrokers"):
        config_text.sectioned("compile_wrokers: 4\n")
