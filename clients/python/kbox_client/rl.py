"""Rewards for RL trainers, from kboxd's results (standard library only).

    from kbox_client import Client
    from kbox_client.rl import trl_reward_func
    trainer = GRPOTrainer(..., reward_funcs=[trl_reward_func(Client("http://kbox:8080"))])

What every adapter here shares:

- code_from_completion: the candidate is the last complete fenced code block
  of the model's reply that defines `class ModelNew` (an unfinished block,
  cut by the length limit, is not code); a reply without one scores
  reward.no_code, the reward of a candidate that does not compile.
- A Reward maps an EvaluateResult to a float. kbox's own failures
  (INFRA_ERROR, after the client's retries) and a broken reference
  (REFERENCE_ERROR) are not the candidate's outcome, nor is a job its
  caller cancelled (CANCELLED): they yield None, which
  each adapter passes on as its trainer's "no reward" (TRL: None; verl: a
  dict with "masked": True; the OpenRLHF server, whose protocol needs a
  number: 0.0 with kbox_masked 1.0 in its extra logs). Never a penalty.
- A result that is CORRECT but not rewardable (an anti-cheat verdict) is
  treated as not correct.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Dict, List, Optional, Sequence

from .messages import make_request

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$",
                    re.DOTALL | re.MULTILINE)
_MODEL_NEW = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)
_CODE_LANGS = {"", "python", "py", "python3"}


class NoCandidate(ValueError):
    """The completion holds no complete code block defining ModelNew."""


def code_from_completion(text) -> str:
    """The candidate module in a model's reply (a string, or a chat message
    list whose last message is the reply). Raises NoCandidate."""
    if isinstance(text, (list, tuple)):
        text = text[-1].get("content", "") if text and isinstance(text[-1], dict) else ""
    if not isinstance(text, str):
        raise NoCandidate("the completion is not text")
    blocks = [body for lang, body in _FENCE.findall(text)
              if lang.lower() in _CODE_LANGS and _MODEL_NEW.search(body)]
    if blocks:
        return blocks[-1]
    if "```" not in text and _MODEL_NEW.search(text):
        return text  # a bare module, no markdown around it
    raise NoCandidate("no complete ```python block defining class ModelNew in the completion")


def _correct(result: dict) -> bool:
    return result.get("status") == "CORRECT" and bool(result.get("rewardable"))


def _masked(result: dict) -> bool:
    return result.get("status") in ("INFRA_ERROR", "REFERENCE_ERROR", "CANCELLED")


def _speedup(result: dict) -> Optional[float]:
    value = result.get("speedup")
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value > 0 and math.isfinite(value) else None


class Reward(object):
    """A named map from EvaluateResult to reward (None: masked)."""

    def __init__(self, name: str, score: Callable[[dict], float], no_code: float):
        self.name = name
        self._score = score
        self.no_code = no_code

    def __call__(self, result: dict) -> Optional[float]:
        if _masked(result):
            return None
        return float(self._score(result))

    def __repr__(self):
        return "Reward(%s)" % self.name


def correct_plus_speedup(correct_bonus: float = 0.3, max_speedup: float = 10.0) -> Reward:
    """Kevin-32B's reward: correct_bonus for a correct candidate plus its
    speedup (capped at max_speedup; 0 when the job was not timed); 0 for
    anything else, a reply without code included."""
    def score(result):
        if not _correct(result):
            return 0.0
        return correct_bonus + min(_speedup(result) or 0.0, max_speedup)
    return Reward("correct_plus_speedup", score, no_code=0.0)


def tiered(compiled: float = 0.1, correct: float = 0.5, faster: float = 1.0) -> Reward:
    """Steps: 0 when it does not build or is rejected (COMPILE_ERROR,
    REJECTED, SANDBOX_VIOLATION, no code); `compiled` when it built but
    failed (INCORRECT, RUNTIME_ERROR, TIMEOUT); `correct` when correct;
    `faster` when correct with a speedup above 1."""
    def score(result):
        if _correct(result):
            speedup = _speedup(result)
            return faster if speedup is not None and speedup > 1.0 else correct
        if result.get("status") in ("INCORRECT", "RUNTIME_ERROR", "TIMEOUT"):
            return compiled
        return 0.0
    return Reward("tiered", score, no_code=0.0)


def speedup_log(floor: float = -2.0, cap: float = math.log(10.0)) -> Reward:
    """ln(speedup) of a correct, timed candidate, clipped to [floor, cap]
    (0 when correct but not timed); `floor` for anything else."""
    def score(result):
        if not _correct(result):
            return floor
        speedup = _speedup(result)
        return 0.0 if speedup is None else max(floor, min(cap, math.log(speedup)))
    return Reward("speedup_log", score, no_code=floor)


def score_completions(client, completions: Sequence, references: Sequence[str], *,
                      reward: Optional[Reward] = None, backend: str = "cuda",
                      **request_fields) -> List[Optional[float]]:
    """The reward of each completion against its reference, evaluated
    together through client.evaluate_many (a GRPO group's samples share a
    reference and so a daemon)."""
    if len(completions) != len(references):
        raise ValueError("%d completions for %d references" % (len(completions), len(references)))
    reward = reward or correct_plus_speedup()
    rewards: List[Optional[float]] = [reward.no_code] * len(completions)
    requests, owners = [], []
    for i, (completion, reference) in enumerate(zip(completions, references)):
        try:
            code = code_from_completion(completion)
        except NoCandidate:
            continue
        requests.append(make_request(reference, code, backend, **request_fields))
        owners.append(i)
    for k, outcome in client.evaluate_many(requests, return_exceptions=True):
        # A job the client could not finish is kbox's failure, not the sample's.
        rewards[owners[k]] = None if isinstance(outcome, Exception) else reward(outcome)
    return rewards


def trl_reward_func(client, *, reward: Optional[Reward] = None, reference_column: str = "reference",
                    backend: str = "cuda", **request_fields) -> Callable:
    """A reward function in TRL's shape, reward_funcs(prompts, completions,
    **kwargs) -> list: each sample's reference source comes from the
    dataset column `reference_column` (TRL passes columns as kwargs). Masked
    samples are None, which TRL's GRPOTrainer leaves out of the reward."""
    reward = reward or correct_plus_speedup()

    def kbox_reward(prompts, completions, **kwargs):
        if reference_column not in kwargs:
            raise KeyError("the dataset has no %r column with each prompt's reference source"
                           % reference_column)
        return score_completions(client, completions, kwargs[reference_column], reward=reward,
                                 backend=backend, **request_fields)

    kbox_reward.__name__ = "kbox_" + reward.name
    return kbox_reward


def verl_compute_score(data_source, solution_str, ground_truth, extra_info=None, *, client=None,
                       reward: Optional[Reward] = None, backend: str = "cuda",
                       **request_fields) -> Dict[str, object]:
    """verl's custom reward function (custom_reward_function.path/name):
    ground_truth is the reference source. Returns verl's dict form, {"score":
    float, "status": str, "masked": bool}; a masked result scores 0.0 with
    "masked": True, for the trainer to drop."""
    return verl_compute_score_batched([data_source], [solution_str], [ground_truth],
                                      [extra_info], client=client, reward=reward, backend=backend,
                                      **request_fields)[0]


def verl_compute_score_batched(data_sources, solution_strs, ground_truths, extra_infos=None, *,
                               client=None, reward: Optional[Reward] = None,
                               backend: str = "cuda", **request_fields) -> List[Dict[str, object]]:
    """The batched form (verl's BatchRewardManager): one dict per sample."""
    del data_sources, extra_infos  # the reference is the ground truth
    if client is None:
        from .client import Client
        client = Client()
    scores = score_completions(client, solution_strs, ground_truths, reward=reward,
                               backend=backend, **request_fields)
    return [{"score": 0.0 if s is None else s, "masked": s is None} for s in scores]
