"""The RL adapters (kbox_client.rl, kbox-reward-server) in their trainers' call
shapes against a real kboxd, and evaluate_many fitting 500 jobs into a
daemon that admits 16 at once. The candidates are plain PyTorch (profile
"off" with one rule turned back on to reject), so nothing is built."""
import json
import threading
import urllib.request

import pytest

from conftest import case
from kbox_client import Client
from kbox_client import rl
from kbox_client.reward_server import serve

REFERENCE = case("ref_matmul_relu.py")
FIELDS = {"anticheat_profile": "off", "anticheat_overrides": {"py.patch-library": "reject"},
          "measure_performance": False, "correctness_trials": 2}


def reply(name, chat=False):
    text = "Here is my kernel.\n```python\n%s```\nIt should be fast." % case(name)
    return [{"role": "assistant", "content": text}] if chat else text


HONEST = "cand_matmul_python.py"
WRONG = "cand_matmul_wrong_values.py"
REJECTED = "cand_matmul_patches_torch.py"


def test_code_from_completion_takes_the_last_complete_model_new_block():
    text = ("```python\nclass ModelNew: first\n```\n```python\nclass ModelNew: second\n```\n"
            "```python\nclass ModelNew: cut off by the length limit")
    assert rl.code_from_completion(text) == "class ModelNew: second\n"
    assert rl.code_from_completion("class ModelNew:\n    pass\n").startswith("class ModelNew")
    for bad in ("no code at all", "```python\nclass Model: wrong name\n```", "```cpp\nclass ModelNew\n```"):
        with pytest.raises(rl.NoCandidate):
            rl.code_from_completion(bad)


def test_rewards_mask_kbox_failures_and_never_reward_an_unrewardable_result():
    for reward in (rl.correct_plus_speedup(), rl.tiered(), rl.speedup_log()):
        assert reward({"status": "INFRA_ERROR"}) is None
        assert reward({"status": "REFERENCE_ERROR"}) is None
        assert reward({"status": "CANCELLED"}) is None
        flagged = reward({"status": "CORRECT", "rewardable": False, "speedup": 3.0})
        clean = reward({"status": "CORRECT", "rewardable": True, "speedup": 3.0})
        assert flagged < clean, reward
    assert rl.correct_plus_speedup()({"status": "CORRECT", "rewardable": True, "speedup": 2.0}) == 2.3
    assert rl.correct_plus_speedup()({"status": "CORRECT", "rewardable": True, "speedup": 50}) == 10.3
    assert rl.tiered()({"status": "CORRECT", "rewardable": True, "speedup": 1.5}) == 1.0
    assert rl.tiered()({"status": "RUNTIME_ERROR"}) == 0.1
    assert rl.speedup_log()({"status": "COMPILE_ERROR"}) == -2.0


def test_trl_reward_function(kboxd):
    reward_func = rl.trl_reward_func(Client(kboxd.url), reward=rl.tiered(), reference_column="reference",
                                     backend="cpu", **FIELDS)
    assert reward_func.__name__ == "kbox_tiered"
    completions = [reply(HONEST), reply(WRONG), reply(REJECTED), "I could not write it.",
                   reply(HONEST, chat=True)]
    rewards = reward_func(prompts=["p"] * 5, completions=completions, reference=[REFERENCE] * 5,
                          completion_ids=[[0]] * 5)
    assert rewards == [0.5, 0.1, 0.0, 0.0, 0.5]


def test_verl_compute_score_and_its_batched_form(kboxd):
    client = Client(kboxd.url)
    one = rl.verl_compute_score("kernelbench/level1", reply(HONEST), REFERENCE, {"index": 0},
                                client=client, backend="cpu", **FIELDS)
    assert one == {"score": 0.3, "masked": False}
    many = rl.verl_compute_score_batched(["kb"] * 3, [reply(WRONG), reply(REJECTED), "nothing"],
                                         [REFERENCE] * 3, [{}] * 3, client=client, backend="cpu",
                                         **FIELDS)
    assert many == [{"score": 0.0, "masked": False}] * 3


def test_the_openrlhf_reward_server(kboxd):
    server = serve("127.0.0.1:0", Client(kboxd.url), rl.correct_plus_speedup(), "cpu", FIELDS)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        prompts = ["Write ModelNew.\n", "Write ModelNew.\n"]
        body = {"query": [prompts[0] + reply(HONEST), prompts[1] + reply(REJECTED)],
                "prompts": prompts, "labels": [REFERENCE, REFERENCE]}
        url = "http://127.0.0.1:%d/get_reward" % server.server_address[1]
        request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as answer:
            doc = json.loads(answer.read())
        assert doc["rewards"] == [0.3, 0.0] and doc["extra_logs"]["kbox_masked"] == [0.0, 0.0], doc
        bad = urllib.request.Request(url, b'{"query": ["x"]}', {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=30)
        assert refused.value.code == 400
    finally:
        server.shutdown()


def test_evaluate_many_fits_500_jobs_into_16_places(kboxd_sixteen):
    client = Client(kboxd_sixteen.url)
    assert client.info()["max_in_flight_jobs"] == 16
    rejected = {"reference_source": REFERENCE, "candidate_source": case("cand_matmul_operator.py"),
                "backend": "BACKEND_CPU"}
    honest = {"reference_source": REFERENCE, "candidate_source": case(HONEST), "backend": "BACKEND_CPU",
              "anticheat_profile": "off", "measure_performance": False, "correctness_trials": 1}
    requests = [dict(honest, seed=str(i)) if i % 50 == 0 else rejected for i in range(500)]
    seen = {}
    for index, result in client.evaluate_many(requests, timeout_s=600):
        assert index not in seen
        seen[index] = result["status"]
    assert sorted(seen) == list(range(500))
    assert all(status == ("CORRECT" if i % 50 == 0 else "REJECTED") for i, status in seen.items()), seen
