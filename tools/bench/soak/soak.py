#!/usr/bin/env python3
"""Soak: SESSIONS clients for MINUTES on a synthetic model through waste-serve, each a bounded
loop of streamed requests on loopback; the resident memory of iod, compute and waste-serve is
sampled throughout. Passes with 0 errors (no request failed, was malformed or took longer than
--hang-seconds; no client died or hung), no process restarted (the soak injects no fault), and
every process's RSS flat after the warm-up: less than 5% growth from the end of the first fifth
to the end, within one pid, from at least MIN_SAMPLES samples after the warm-up each. Prints
p50/p99 request latency and an RSS table. Not in CI (it runs for minutes): a benchmark.

  tools/bench/soak/soak.py [--sessions 16] [--minutes 10] [--max-tokens 32] [--hang-seconds 60] [--json]
"""

import argparse
import json
import os
import random
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from waste_instance import Instance, rss_bytes, stream, positive_int, positive_number  # noqa: E402

PROMPTS = ["Hello", "The cat sat on", "Once upon a time", "1, 2, 3,", "Why is the sky", "Tell me about"]
NAMES = ("iod", "compute", "serve")
SAMPLE_SECONDS = 2.0  # the sampling period
MIN_SAMPLES = 10  # RSS samples after the warm-up each process needs for its flatness to mean something
MAX_SESSIONS = 254  # one loopback address each: 127.0.1.1 to 127.0.1.254


def percentile(xs, q):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=positive_int, default=16, help="concurrent clients (16; at most %d)" % MAX_SESSIONS)
    ap.add_argument("--minutes", type=positive_number, default=10.0, help="how long (10)")
    ap.add_argument("--max-tokens", type=positive_int, default=32, help="tokens per completion (32)")
    ap.add_argument("--hang-seconds", type=positive_number, default=60.0,
                    help="a request with no end after this long in all is hung (60)")
    ap.add_argument("--preset", default="tiny-kimi-linear")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.sessions > MAX_SESSIONS:
        ap.error("argument --sessions: at most %d (one loopback address each), not %d" % (MAX_SESSIONS, args.sessions))
    after_warm = args.minutes * 60 * 4 / 5
    if after_warm / SAMPLE_SECONDS < 2 * MIN_SAMPLES:  # twice the samples needed: sampling takes time too
        ap.error("argument --minutes: %g leaves %.0f s after the warm-up, room for %d RSS samples; at least %.2f "
                 "minutes (%d samples of each process are needed)" % (
                     args.minutes, after_warm, int(after_warm / SAMPLE_SECONDS),
                     2 * MIN_SAMPLES * SAMPLE_SECONDS * 5 / 4 / 60, MIN_SAMPLES))
    hang = args.hang_seconds
    # Sessions at most: twice the clients. A client's next request opens its session before
    # compute has seen the last one's connection close, so at exactly one per client the
    # admission bound (429) would be what the soak measures. A state in memory for every client:
    # the soak is of sessions running together, not of requests waiting for a state.
    inst = Instance(preset=args.preset, up_args=["--budget", "512M", "--ctx", "512", "--max-sessions",
                                                 str(2 * args.sessions), "--sessions", str(args.sessions)])
    latencies, errors, lock = [], [], threading.Lock()
    counts = {"requests": 0, "hung": 0}
    finished = set()  # clients whose loop ended normally (a client missing here died)
    end = time.time() + args.minutes * 60
    samples = {}  # (name, pid) -> [(t, rss)]
    problems = []

    def client(i):
        rng = random.Random(i)
        while time.time() < end:  # the loop is bounded by the run's end
            t0 = time.monotonic()
            try:
                # Each session from its own loopback address, as separate users would be: one
                # address may hold only --max-connections-per-client (8) connections.
                outcome, detail = stream(inst.port, rng.choice(PROMPTS), args.max_tokens, hang,
                                         source="127.0.1.%d" % (1 + i))
            except Exception as e:  # an answer stream() did not expect: an error, counted, not a dead client
                outcome, detail = "exception", "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())
            took = time.monotonic() - t0
            with lock:
                counts["requests"] += 1
                if outcome == "hung" or took > hang:
                    counts["hung"] += 1
                    errors.append("hung: %.1f s (bound %g s): %s: %s" % (took, hang, outcome, detail))
                elif outcome == "ok":
                    latencies.append(took)
                else:
                    errors.append("%s: %s" % (outcome, detail))
        with lock:
            finished.add(i)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.sessions)]
    t_start = time.time()
    st0 = st = None
    try:
        st0 = inst.state()
        for t in threads:
            t.start()
        while time.time() < end:
            for name, pid in inst.pids().items():
                samples.setdefault((name, pid), []).append((time.time() - t_start, rss_bytes(pid)))
            time.sleep(SAMPLE_SECONDS)  # the sampling period
        deadline = time.monotonic() + hang + 30
        for i, t in enumerate(threads):
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                with lock:
                    counts["hung"] += 1
                problems.append("client %d did not end within %g s of the end of the run: a request hung past "
                                "every deadline" % (i, hang + 30))
            elif i not in finished:
                problems.append("client %d died" % i)
        st = inst.state()
    finally:
        down = inst.stop()

    # The soak injects no fault: a process that restarted (a new pid, or a restart or wedge kill
    # the supervisor counted) is a failure, and its RSS is compared only within one pid.
    pids = {}
    for name, pid in samples:
        pids.setdefault(name, []).append(pid)
    for name in NAMES:
        if name not in pids:
            problems.append("no RSS sample of %s: the soak cannot say it is flat" % name)
        elif len(pids[name]) > 1:
            problems.append("%s restarted during the soak (pids %s) and no fault was injected" % (
                name, ", ".join(str(p) for p in pids[name])))
    if st0 is None or st is None:
        problems.append("supervise.json could not be read (at the start: %s, at the end: %s): no restart counts" % (
            st0 is not None, st is not None))
    else:
        first = {c["name"]: (c["restarts"], c.get("wedged", 0)) for c in st0["children"]}
        for c in st["children"]:
            r0, w0 = first.get(c["name"], (0, 0))
            if c["restarts"] != r0 or c.get("wedged", 0) != w0:
                problems.append("the supervisor restarted %s %d times (%d wedge kills) during the soak" % (
                    c["name"], c["restarts"] - r0, c.get("wedged", 0) - w0))
    warm = args.minutes * 60 / 5
    rows, flat = [], True
    for (name, pid), s in sorted(samples.items()):
        after = [r for t, r in s if t >= warm and r > 0]
        gone = sum(1 for t, r in s if r == 0)
        row = {"process": name, "pid": pid, "samples_after_warmup": len(after), "samples_gone": gone,
               "rss_start_mib": s[0][1] / 2**20, "rss_max_mib": max(r for _, r in s) / 2**20}
        if gone:
            problems.append("%s pid %d was gone at %d of its %d samples" % (name, pid, gone, len(s)))
        if len(after) < MIN_SAMPLES:
            flat = False
            problems.append("%s pid %d: %d RSS samples after the warm-up, fewer than %d: no verdict on its growth" % (
                name, pid, len(after), MIN_SAMPLES))
        else:
            growth = (after[-1] - after[0]) / after[0] * 100
            if growth >= 5.0:
                flat = False
                problems.append("%s pid %d grew %.2f%% after the warm-up (%.1f to %.1f MiB)" % (
                    name, pid, growth, after[0] / 2**20, after[-1] / 2**20))
            row.update({"rss_warm_mib": after[0] / 2**20, "rss_end_mib": after[-1] / 2**20,
                        "growth_after_warmup_pct": growth})
        rows.append(row)
    if not rows:
        flat = False
    if counts["requests"] == 0:
        problems.append("no request was made")
    if errors:
        problems.append("%d requests failed (the first: %s)" % (len(errors), errors[0].splitlines()[0]))
    if down.returncode != 0:
        problems.append("waste down failed: %s" % down.stderr)
    report = {"sessions": args.sessions, "minutes": args.minutes, "requests": counts["requests"],
              "errors": len(errors), "hung": counts["hung"], "error_examples": errors[:5],
              "p50_s": percentile(latencies, 0.5), "p99_s": percentile(latencies, 0.99),
              "max_s": max(latencies, default=0.0), "rss": rows, "rss_flat": flat,
              "down_ok": down.returncode == 0, "problems": problems}
    if args.json:
        print(json.dumps(report))
    else:
        print("soak: %d sessions, %.1f min: %d requests, %d errors, %d hung, latency p50 %.3f s, p99 %.3f s, "
              "max %.3f s" % (args.sessions, args.minutes, report["requests"], report["errors"], report["hung"],
                              report["p50_s"], report["p99_s"], report["max_s"]))
        print("| process | pid | RSS at start | after warm-up | at end | max | growth after warm-up | samples |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "growth_after_warmup_pct" in r:
                print("| %s | %d | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %+.2f%% | %d |" % (
                    r["process"], r["pid"], r["rss_start_mib"], r["rss_warm_mib"], r["rss_end_mib"], r["rss_max_mib"],
                    r["growth_after_warmup_pct"], r["samples_after_warmup"]))
            else:
                print("| %s | %d | %.1f MiB | - | - | %.1f MiB | - | %d |" % (
                    r["process"], r["pid"], r["rss_start_mib"], r["rss_max_mib"], r["samples_after_warmup"]))
        for e in errors[:5]:
            print("soak: error: %s" % e)
        for p in problems:
            print("soak: PROBLEM: %s" % p)
    if not problems:
        inst.remove()
    else:
        print("soak: logs kept in %s" % inst.run_dir)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
