#!/usr/bin/env python3
"""Soak: SESSIONS clients for MINUTES on a synthetic model through waste-serve, each a bounded
loop of streamed requests on loopback; the resident memory of iod, compute and waste-serve is
sampled throughout. Passes with 0 errors and every process's RSS flat after the warm-up (less
than 5% growth from the end of the first fifth to the end); prints p50/p99 request latency and
an RSS table. Not in CI (it runs for minutes): a benchmark.

  tools/bench/soak/soak.py [--sessions 16] [--minutes 10] [--max-tokens 32] [--json]
"""

import argparse
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from waste_instance import Instance, rss_bytes, stream  # noqa: E402

PROMPTS = ["Hello", "The cat sat on", "Once upon a time", "1, 2, 3,", "Why is the sky", "Tell me about"]


def percentile(xs, q):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--preset", default="tiny-kimi-linear")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    # Sessions at most: twice the clients. A client's next request opens its session before
    # compute has seen the last one's connection close, so at exactly one per client the
    # admission bound (429) would be what the soak measures.
    inst = Instance(preset=args.preset, up_args=["--budget", "512M", "--ctx", "512", "--max-sessions",
                                                 str(2 * args.sessions)])
    latencies, errors, lock = [], [], threading.Lock()
    end = time.time() + args.minutes * 60
    samples = {}  # name -> [(t, rss)]

    def client(i):
        rng = random.Random(i)
        while time.time() < end:  # the loop is bounded by the run's end
            t0 = time.time()
            # Each session from its own loopback address, as separate users would be: one
            # address may hold only --max-connections-per-client (8) connections.
            outcome, detail = stream(inst.port, rng.choice(PROMPTS), args.max_tokens, source="127.0.1.%d" % (1 + i))
            with lock:
                if outcome == "ok":
                    latencies.append(time.time() - t0)
                else:
                    errors.append("%s: %s" % (outcome, detail))

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.sessions)]
    t_start = time.time()
    try:
        for t in threads:
            t.start()
        while time.time() < end:
            for name, pid in inst.pids().items():
                samples.setdefault(name, []).append((time.time() - t_start, rss_bytes(pid)))
            time.sleep(2.0)  # the sampling period
        for t in threads:
            t.join(120)
    finally:
        down = inst.stop()
    warm = args.minutes * 60 / 5
    rows, flat = [], True
    for name, s in sorted(samples.items()):
        after = [r for t, r in s if t >= warm and r > 0]
        if not after:
            continue
        growth = (after[-1] - after[0]) / after[0] * 100
        flat = flat and growth < 5.0
        rows.append({"process": name, "rss_start_mib": s[0][1] / 2**20, "rss_warm_mib": after[0] / 2**20,
                     "rss_end_mib": after[-1] / 2**20, "rss_max_mib": max(r for _, r in s) / 2**20,
                     "growth_after_warmup_pct": growth})
    report = {"sessions": args.sessions, "minutes": args.minutes, "requests": len(latencies) + len(errors),
              "errors": len(errors), "error_examples": errors[:5], "p50_s": percentile(latencies, 0.5),
              "p99_s": percentile(latencies, 0.99), "rss": rows, "rss_flat": flat,
              "down_ok": down.returncode == 0}
    if args.json:
        print(json.dumps(report))
    else:
        print("soak: %d sessions, %.1f min: %d requests, %d errors, latency p50 %.3f s, p99 %.3f s" % (
            args.sessions, args.minutes, report["requests"], report["errors"], report["p50_s"], report["p99_s"]))
        print("| process | RSS at start | after warm-up | at end | max | growth after warm-up |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print("| %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %+.2f%% |" % (
                r["process"], r["rss_start_mib"], r["rss_warm_mib"], r["rss_end_mib"], r["rss_max_mib"],
                r["growth_after_warmup_pct"]))
        for e in errors[:5]:
            print("soak: error: %s" % e)
    ok = report["errors"] == 0 and flat and report["down_ok"] and report["requests"] > 0
    if ok:
        inst.remove()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
