"""Load test of kboxd (docs/reliability.md, "Load" and "Faults").

Drives N jobs from C concurrent clients over several API tokens through
POST /v1/jobs (one job each, with an idempotency key) and the long poll
GET /v1/jobs/{id}?wait=S, plus static-only POST /v1/check calls; retries 429
after its Retry-After; with --kill-every, SIGKILLs kboxd's worker processes at
random points (scripts/kbox_load_faults.py). Then checks:

  * exactly once: every accepted job ends with one result; a key resubmitted
    (after a 429 or a dropped connection) names the same job; kboxd counted
    as many finished jobs (kbox_jobs_total) as were accepted;
  * verdicts: each job's status is the one its candidate must get; a job hit
    by a kill may instead end INFRA_ERROR, never another verdict;
  * every 429 carries Retry-After;
  * fair share: while every token has real jobs waiting, each token's share
    of the real jobs that finish.

and reports kboxd's peak RSS, p50/p99 of kboxd's own overhead per job (total
minus compile and run stage time), throughput and the 429 count. Exit status
1 when a check fails. Standard library only.
"""
import argparse
import collections
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kbox_load_daemon as daemon  # noqa: E402
import kbox_load_faults as faults  # noqa: E402
import kbox_load_mix as mix  # noqa: E402

WAIT_S = 30          # long-poll bound per GET
JOB_DEADLINE_S = 1800  # a job not DONE by then is lost
MAX_RETRY_SLEEP_S = 1.0  # Retry-After is honoured up to this (a load client's choice)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", help="kboxd's URL; default: start build/bin/kboxd")
    p.add_argument("--token", action="append", default=[],
                   help="NAME=SECRET of a token on --server (repeat); default: this run's own")
    p.add_argument("--bin-dir", default=os.path.join(mix.REPO, "build", "bin"))
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--tokens", type=int, default=4, help="tokens of the started kboxd")
    p.add_argument("--bulk-share", type=float, default=0.5,
                   help="share of the clients on the first token ('bulk'); the rest split evenly")
    p.add_argument("--token-limit", type=int, default=24, help="each token's max_concurrent_jobs")
    p.add_argument("--max-in-flight", type=int, default=64)
    p.add_argument("--cpu-run-slots", type=int, default=2)
    p.add_argument("--compile-workers", type=int, default=2)
    p.add_argument("--compile-time-limit", type=int, default=900,
                   help="compile_time_limit_s of the started kboxd (an overloaded host compiles slowly)")
    p.add_argument("--real-share", type=float, default=0.02, help="share of jobs that compile and run")
    p.add_argument("--check-share", type=float, default=0.1, help="extra /v1/check calls, per job drawn")
    p.add_argument("--real-candidates", default="",
                   help="comma-separated case files of real jobs (default: all of kbox_load_mix)")
    p.add_argument("--no-warmup", action="store_true",
                   help="do not run each real candidate once, alone, before the clients start")
    p.add_argument("--kill-every", type=float, default=0.0, help="SIGKILL a worker process every ~S s")
    p.add_argument("--kill-kinds", default=",".join(faults.Killer.KINDS),
                   help="what --kill-every kills; with --kill-script, the kinds in order")
    p.add_argument("--kill-script", action="store_true",
                   help="instead of --kill-every: kill one process of each --kill-kinds kind, in "
                        "order, each as soon as one runs (short runs)")
    p.add_argument("--fork-exec-run-stage", action="store_true",
                   help="run stages by fork+exec (preforked_run_stage: false) instead of kboxd's "
                        "single-use zygotes")
    p.add_argument("--infra-retries", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json-out", help="write the summary here")
    p.add_argument("--keep", action="store_true", help="keep the started kboxd's directory")
    return p.parse_args(argv)


def percentile(values, q):
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100.0 * (len(s) - 1))))]


class Run(object):
    """Shared state of the clients; every list is appended under `lock`."""

    def __init__(self, args, server, tokens, killer):
        self.args, self.server, self.tokens, self.killer = args, server, tokens, killer
        names = list(tokens)
        self.real_candidates = None
        if args.real_candidates:
            self.real_candidates = [c for c in mix.REAL_CANDIDATES
                                    if c[0] in args.real_candidates.split(",")]
        self.mix = mix.Mix(args.seed, args.real_share, args.check_share, self.real_candidates)
        self.lock = threading.Lock()
        self.next_job = 0
        self.jobs = {}            # key -> record
        self.job_ids = collections.Counter()
        self.checks = 0
        self.too_many = 0
        self.too_many_without_retry_after = 0
        self.errors = []          # failures of the checks, in words
        bulk = max(1, int(round(args.clients * args.bulk_share))) if len(names) > 1 else args.clients
        self.client_tokens = [names[0]] * bulk
        for i in range(args.clients - bulk):
            self.client_tokens.append(names[1 + i % (len(names) - 1)])

    def fail(self, text):
        with self.lock:
            if len(self.errors) < 200:
                self.errors.append(text)

    def post(self, path, body, token):
        """POST with 429 retry; (status, headers, json or None)."""
        while True:
            try:
                status, headers, data = self.server.request("POST", path, body, token=token)
            except OSError as e:
                # A dropped connection: the same request again (the job's
                # idempotency key makes a resubmission safe).
                with self.lock:
                    self.errors_transport = getattr(self, "errors_transport", 0) + 1
                time.sleep(0.2)
                continue
            if status == 429:
                retry_after = headers.get("retry-after")
                with self.lock:
                    self.too_many += 1
                    if not retry_after:
                        self.too_many_without_retry_after += 1
                wait = float(retry_after) if retry_after and retry_after.isdigit() else 1.0
                time.sleep(min(wait, MAX_RETRY_SLEEP_S) * (0.5 + self.mix.rng.random() / 2))
                continue
            try:
                return status, headers, json.loads(data.decode("utf-8"))
            except ValueError:
                return status, headers, None

    def warm_up(self):
        """One job of each real candidate, alone, before the load: its build
        enters the cache before dozens of jobs wait for it. (A compile killed
        while jobs wait for its build makes each of them compile on its own:
        docs/reliability.md.) Counted among the N jobs."""
        token_name = self.client_tokens[0]
        threads = []
        for name, expected in (self.real_candidates or mix.REAL_CANDIDATES):
            with self.lock:
                n = self.next_job
                self.next_job += 1
            request, _, _ = mix.real_job(self.mix.rng, "warm%d" % n, [(name, expected)])
            threads.append(threading.Thread(target=self.run_job, args=(
                n, token_name, self.tokens[token_name], request, expected, name)))
        for t in threads:  # side by side: one compile each
            t.start()
        for t in threads:
            t.join()

    def client(self, index):
        token_name = self.client_tokens[index]
        secret = self.tokens[token_name]
        while True:
            with self.lock:
                if self.next_job >= self.args.jobs:
                    return
                n = self.next_job
                kind, payload, expected, variant = self.mix.draw("%s%d" % (token_name[:1], n))
                if kind == "job":
                    self.next_job += 1
            if kind == "check":
                status, _, body = self.post("/v1/check", payload, secret)
                with self.lock:
                    self.checks += 1
                if status != 200 or not body or not body.get("rejected"):
                    self.fail("check %s: %d %s" % (variant, status, str(body)[:300]))
                continue
            self.run_job(n, token_name, secret, payload, expected, variant)

    def run_job(self, n, token_name, secret, request, expected, variant):
        key = "load-%d-%d" % (self.args.seed, n)
        record = {"key": key, "token": token_name, "expected": expected, "variant": variant,
                  "real": variant in dict(mix.REAL_CANDIDATES), "submitted": time.monotonic()}
        submit = {"jobs": [{"idempotency_key": key, "request": request}]}
        status, _, body = self.post("/v1/jobs", submit, secret)
        if status != 200 or not body:
            self.fail("submit %s: %d %s" % (key, status, str(body)[:300]))
            return
        job_id = body["jobs"][0]["job_id"]
        record["job_id"] = job_id
        with self.lock:
            self.jobs[key] = record
            self.job_ids[job_id] += 1
        deadline = time.monotonic() + JOB_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                status, _, data = self.server.request(
                    "GET", "/v1/jobs/%s?wait=%d" % (job_id, WAIT_S), token=secret, timeout=WAIT_S + 60)
            except OSError:
                time.sleep(0.2)
                continue
            if status != 200:
                self.fail("job %s (%s): GET %d %s" % (job_id, key, status, data[:300]))
                return
            job = json.loads(data.decode("utf-8"))
            if job.get("state") == "DONE":
                record["done"] = time.monotonic()
                record["result"] = job.get("result", {})
                return
        self.fail("job %s (%s) not DONE within %d s: lost" % (job_id, key, JOB_DEADLINE_S))


def fair_share(jobs, tokens):
    """Among the real jobs that finished while every token had a real job
    outstanding (submitted, not yet finished), each token's share."""
    real = [j for j in jobs if j["real"] and "done" in j]
    if len(tokens) < 2 or not real:
        return None
    counted = collections.Counter()
    for j in real:
        t = j["done"]
        busy = {o["token"] for o in real if o["submitted"] <= t <= o["done"]}
        if busy >= set(tokens):
            counted[j["token"]] += 1
    total = sum(counted.values())
    submitted = collections.Counter(j["token"] for j in real)
    return {"while_all_backlogged": total,
            "share": {t: round(counted[t] / total, 3) if total else None for t in tokens},
            "submitted_share": {t: round(submitted[t] / len(real), 3) for t in tokens}}


def metric_sum(metrics, name, **labels):
    total = 0.0
    for series, value in metrics.items():
        if series.split("{")[0] != name:
            continue
        if all('%s="%s"' % kv in series for kv in labels.items()):
            total += value
    return total


def by_label(metrics, name, label):
    out = {}
    for series, value in metrics.items():
        if series.split("{")[0] == name and value:
            part = series.split(label + '="', 1)
            if len(part) == 2:
                out[part[1].split('"', 1)[0]] = value
    return out


def evaluate(run, before, after, started, ended, rss_peak):
    jobs = list(run.jobs.values())
    killed_jobs = {k["job"] for k in (run.killer.kills if run.killer else []) if k["job"]}
    statuses = collections.Counter()
    overhead = {"rejected": [], "real": []}
    overhead_no_queue = []
    for j in jobs:
        if "result" not in j:
            continue
        r = j["result"]
        status = r.get("status", "STATUS_UNSPECIFIED")
        statuses[status] += 1
        hit = j["job_id"] in killed_jobs
        j["killed"] = hit
        if status != j["expected"] and not (hit and status == "INFRA_ERROR"):
            run.fail("job %s (%s, %s): %s, expected %s%s: %s" % (
                j["job_id"], j["key"], j["variant"], status, j["expected"],
                " (hit by a kill)" if hit else "", r.get("message", "")[:300]))
        d = r.get("durations", {})
        total = float(d.get("total_ms", d.get("totalMs", 0)))
        stages = float(d.get("compile_ms", d.get("compileMs", 0))) + float(d.get("run_ms", d.get("runMs", 0)))
        overhead["real" if j["real"] else "rejected"].append(total - stages)
        if j["real"]:
            overhead_no_queue.append(total - stages - float(d.get("queue_wait_ms", d.get("queueWaitMs", 0))))
    accepted = len(run.job_ids)
    duplicates = [jid for jid, n in run.job_ids.items() if n > 1]
    if duplicates:
        run.fail("job ids named by more than one key: %s" % duplicates[:10])
    finished = sum(1 for j in jobs if "result" in j)
    if finished != accepted:
        run.fail("%d jobs accepted, %d finished" % (accepted, finished))
    counted = metric_sum(after, "kbox_jobs_total") - metric_sum(before, "kbox_jobs_total")
    if counted != accepted:
        run.fail("kboxd counted %d finished jobs (kbox_jobs_total), %d were accepted" % (counted, accepted))
    if run.too_many_without_retry_after:
        run.fail("%d responses 429 without Retry-After" % run.too_many_without_retry_after)
    elapsed = ended - started
    hit = [j for j in jobs if j.get("killed")]
    summary = {
        "jobs": accepted, "checks": run.checks, "clients": run.args.clients,
        "tokens": {t: run.client_tokens.count(t) for t in run.tokens},
        "elapsed_s": round(elapsed, 1), "jobs_per_s": round(accepted / elapsed, 1) if elapsed else None,
        "requests_429": run.too_many, "statuses": dict(statuses),
        "real_jobs": sum(1 for j in jobs if j["real"]),
        "overhead_ms": {kind: {"p50": _r(percentile(v, 50)), "p99": _r(percentile(v, 99)), "n": len(v)}
                        for kind, v in overhead.items()},
        "real_overhead_without_queue_ms": {"p50": _r(percentile(overhead_no_queue, 50)),
                                           "p99": _r(percentile(overhead_no_queue, 99))},
        "kboxd_peak_rss_mib": round(rss_peak / 1024.0, 1) if rss_peak else None,
        "fair_share": fair_share(jobs, list(run.tokens)),
        "kills": collections.Counter(k["kind"] for k in run.killer.kills) if run.killer else {},
        "jobs_hit_by_kills": len(hit),
        "jobs_hit_by_kills_status": dict(collections.Counter(j["result"].get("status") for j in hit
                                                             if "result" in j)),
        "infra_errors": _delta(by_label(after, "kbox_infra_errors_total", "cause"),
                               by_label(before, "kbox_infra_errors_total", "cause")),
        "infra_retries": _delta(by_label(after, "kbox_infra_retries_total", "cause"),
                                by_label(before, "kbox_infra_retries_total", "cause")),
        "worker_crashes": _delta(by_label(after, "kbox_worker_crashes_total", "worker"),
                                 by_label(before, "kbox_worker_crashes_total", "worker")),
        "set_up_again": metric_sum(after, "kbox_set_up_again_total")
                        - metric_sum(before, "kbox_set_up_again_total"),
        "zygote_restarts": metric_sum(after, "kbox_zygote_restarts_total")
                           - metric_sum(before, "kbox_zygote_restarts_total"),
        "failures": run.errors,
    }
    return summary


def _r(x):
    return None if x is None else round(x, 2)


def _delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def main(argv=None):
    args = parse_args(argv)
    started_daemon = None
    if args.server:
        server = daemon.parse_server(args.server)
        tokens = dict(t.split("=", 1) for t in args.token)
    else:
        names = ["bulk"] + ["tenant%d" % i for i in range(1, args.tokens)]
        tokens = {n: "kbox-load-%s-%d-0123456789" % (n, os.getpid()) for n in names}
        config = ("max_in_flight_jobs: %d\ncpu_run_slots: %d\ncompile_workers: %d\n"
                  "default_time_limit_s: 60\ncompile_time_limit_s: %d\njob_memory_bytes: 3221225472\n"
                  "job_scratch_bytes: 1073741824\n"
                  % (args.max_in_flight, args.cpu_run_slots, args.compile_workers,
                     args.compile_time_limit))
        if args.infra_retries is not None:
            config += "infra_retries: %d\n" % args.infra_retries
        if args.fork_exec_run_stage:
            config += "preforked_run_stage: false\n"
        flags = []
        # No start-up PCH build: --kill-script's "compiler" kill must find the
        # job's compiler, not the PCH builder's (docs/compile-speed.md).
        flags.append("--no-precompiled-header")
        started_daemon = daemon.Daemon(args.bin_dir, {n: (s, args.token_limit) for n, s in tokens.items()},
                                       config, flags, keep=args.keep)
        server = started_daemon.server
    killer = None
    try:
        before = server.metrics(next(iter(tokens.values()), None))
        if args.kill_every > 0 or args.kill_script:
            if not server.pid:
                raise SystemExit("kills need a kboxd this run starts (no --server)")
            killer = faults.Killer(server.pid, 0 if args.kill_script else args.kill_every,
                                   args.seed, kinds=args.kill_kinds.split(","))
        run = Run(args, server, tokens, killer)
        rss_peak = [0]
        stop = threading.Event()

        def sample_rss():
            while not stop.wait(0.5):
                _, hwm = server.rss_kib()
                rss_peak[0] = max(rss_peak[0], hwm or 0)

        threading.Thread(target=sample_rss, daemon=True).start()
        started = time.monotonic()
        # --kill-script kills during the warm-up too (its first kind may be
        # the warm-up's compiler); --kill-every starts once the builds are
        # cached: a compile killed while the load's real jobs wait for it
        # sends each of them to compile on its own (docs/reliability.md).
        if killer and args.kill_script:
            killer.start()
        if args.real_share > 0 and not args.no_warmup:
            run.warm_up()
        if killer and not args.kill_script:
            killer.start()
        clients = [threading.Thread(target=run.client, args=(i,)) for i in range(args.clients)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        ended = time.monotonic()
        if killer:
            killer.stop()
        stop.set()
        _, hwm = server.rss_kib()
        rss_peak[0] = max(rss_peak[0], hwm or 0)
        after = server.metrics(next(iter(tokens.values()), None))
        summary = evaluate(run, before, after, started, ended, rss_peak[0])
        summary["kill_log"] = killer.kills if killer else []
    finally:
        if killer and killer._thread.is_alive():
            killer.stop()
        if started_daemon:
            code = started_daemon.stop()
            if code not in (0, None):
                print("kbox-load: kboxd exited with %s; its log:\n%s" % (code, started_daemon.stderr()[-3000:]),
                      file=sys.stderr)
    text = json.dumps(summary, indent=2, sort_keys=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text + "\n")
    shown = dict(summary)
    shown["kill_log"] = "%d kills" % len(summary["kill_log"])
    print(json.dumps(shown, indent=2, sort_keys=True))
    if summary["failures"]:
        print("kbox-load: %d checks failed" % len(summary["failures"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
