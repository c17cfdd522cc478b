"""kbox_client.feedback on real results: what the model is told, and that
no seed or reference value gets into it."""
import re

from conftest import case, python_job, rejected_job
from kbox_client import Client
from kbox_client.feedback import next_turn_feedback, next_turn_message

REQUEST_SEED = 1234567891


def all_seeds(result):
    seeds = {str(result["settings"]["seed"])} | {str(t["seed"]) for t in result["trials"]}
    return {s for s in seeds if s != "0"}


def assert_no_secrets(message, result):
    for seed in all_seeds(result) | {str(REQUEST_SEED)}:
        assert seed not in message, (seed, message)
    for t in result["trials"]:
        expected = (t.get("first_mismatch") or {}).get("expected")
        if expected is not None and abs(expected) > 1e-3:
            for text in (repr(expected), "%.4g" % expected, "%.3g" % expected, "%.6f" % expected):
                assert text not in message, (text, message)
    assert "seed" not in message.lower()


def test_compile_error_message(build_jobs):
    result = build_jobs.result("syntax_error")
    line = result["compile_log"]["first_error_line"]
    message = next_turn_message(result, case("cand_cpp_syntax_error.py"))
    assert result["status"] == "COMPILE_ERROR" and line > 0
    assert re.search(r"candidate\.py:%d:\d+: error:" % line, message), message
    assert "Line %d of your candidate:" % line in message
    assert "ninja" not in message and "[command omitted]" not in message
    assert_no_secrets(message, result)


def test_incorrect_messages(kboxd):
    client = Client(kboxd.url)
    wrong, shape = client.evaluate_batch([
        python_job("cand_matmul_wrong_values.py", seed=str(REQUEST_SEED), correctness_trials=3),
        python_job("cand_matmul_wrong_shape.py", seed=str(REQUEST_SEED))])
    assert wrong["status"] == "INCORRECT" and shape["status"] == "INCORRECT", (wrong, shape)
    message = next_turn_message(wrong)
    assert "max abs diff" in message and "first wrong element: output 0 at index [" in message
    # The three trials failed alike: one line names them and their inputs.
    assert "- trials 1, 2, 3 (inputs as-drawn, " in message, message
    assert_no_secrets(message, wrong)
    assert wrong["trials"][0]["first_mismatch"]["expected"] is not None  # there was one to leak
    message = next_turn_message(shape)
    assert "shape mismatch: expected [16, 8], got [16, 7]" in message, message
    assert_no_secrets(message, shape)


def test_correct_message(build_jobs):
    result = build_jobs.result("example")
    message = next_turn_message(result)
    assert message.startswith("Your candidate is correct on all 3 trial(s).")
    assert re.search(r"Speedup \d+\.\d\dx \((faster|slower) than the reference", message), message
    assert "What dominated its time:" in message
    for v in result["verdicts"]:  # e.g. run.timing-mismatch, reported but not rejecting here
        if v["severity"] == "SUSPICIOUS":
            assert "- %s (candidate.py" % v["rule_id"] in message, message
    assert_no_secrets(message, result)


def test_rejected_message(kboxd):
    result = Client(kboxd.url).evaluate(rejected_job())
    message = next_turn_message(result)
    assert "py.matmul-operator (candidate.py:" in message
    assert "the @ operator in forward is a library matmul" in message
    assert_no_secrets(message, result)


def test_structured_feedback_for_each_status(build_jobs, kboxd):
    broken = build_jobs.result("syntax_error")
    fb = next_turn_feedback(broken, case("cand_cpp_syntax_error.py"))
    assert fb["status"] == "COMPILE_ERROR" and fb["text"] == next_turn_message(broken, case("cand_cpp_syntax_error.py"))
    assert fb["compile_errors"] and all("candidate.py:" in e for e in fb["compile_errors"]), fb
    client = Client(kboxd.url)
    wrong = client.evaluate(python_job("cand_matmul_wrong_values.py", seed=str(REQUEST_SEED)))
    fb = next_turn_feedback(wrong)
    assert fb["trials_failed"] == fb["trials"] == 2 and not fb["rewardable"], fb
    rejected = client.evaluate(rejected_job())
    fb = next_turn_feedback(rejected)
    assert [r["rule"] for r in fb["rejected_by"]] == ["py.matmul-operator"] and fb["rejected_by"][0]["line"] > 0
    for result in (broken, wrong, rejected):
        assert_no_secrets(repr(next_turn_feedback(result)), result)
