#!/usr/bin/env python3
"""Aggregate tok/s and GB read per generated token with 1, 2, 4, 8 concurrent sessions against a
running instance (waste up). Each session is one waste-hello process (libwaste) generating
--tokens greedy tokens from its own prompt; the figures come from `waste status` before/after.
"batch" is the mean sessions per compute step over the round (from the engine stats each
waste-hello prints when it ends; needs a previous round as the baseline, so the first shows "-").
Start the instance with `waste up --sessions 8` (the most sessions of a round): with fewer
session states in memory, the sessions past them wait for one instead of sharing steps.

  bench_sessions.py --run-dir D --waste build/tools/waste --hello build/tools/examples/waste-hello
"""
import argparse
import re
import subprocess
import time


def status(waste, run_dir):
    out = subprocess.run([waste, "status", "--run-dir", run_dir], capture_output=True, text=True).stdout
    m = re.search(r"tokens\s+(\d+) generated", out)
    g = re.search(r"cache\s+(\d+) hits, (\d+) misses, hit rate [\d.]+%, ([\d.]+) GB read", out)
    if not m or not g:
        raise SystemExit("cannot read `waste status`:\n" + out)
    return int(m.group(1)), int(g.group(1)), int(g.group(2)), float(g.group(3))


def engine_counters(stderr_text):
    """(batches, batched_sessions) from the "stats {json}" line waste-hello prints at its end
    (read with a pattern: waste-hello cuts the JSON at 4 KiB; "engine" sorts first)."""
    b = re.search(r'"batches":(\d+)', stderr_text)
    s = re.search(r'"batched_sessions":(\d+)', stderr_text)
    return (int(b.group(1)), int(s.group(1))) if b and s else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--waste", required=True)
    ap.add_argument("--hello", required=True)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--sessions", default="1,2,4,8")
    a = ap.parse_args()
    print("sessions  tokens  wall_s  agg_tok/s  GB_read  GB/token  hit_rate  batch")
    last = None  # engine counters at the end of the previous round
    for n in [int(x) for x in a.sessions.split(",")]:
        t0_tok, h0, m0, gb0 = status(a.waste, a.run_dir)
        t0 = time.time()
        procs = [subprocess.Popen([a.hello, a.run_dir, "Session %d says" % i, str(a.tokens)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for i in range(n)]
        outs = [p.communicate()[1] for p in procs]
        rcs = [p.returncode for p in procs]
        wall = time.time() - t0
        t1_tok, h1, m1, gb1 = status(a.waste, a.run_dir)
        if any(rcs):
            raise SystemExit("a session failed: %s" % rcs)
        toks = t1_tok - t0_tok
        hits, misses = h1 - h0, m1 - m0
        # The session that ended last saw every step of the round.
        counters = [c for c in map(engine_counters, outs) if c]
        now = max(counters) if counters else None
        batch = "-"
        if last and now and now[0] > last[0]:
            batch = "%.2f" % ((now[1] - last[1]) / (now[0] - last[0]))
        last = now
        print("%8d  %6d  %6.2f  %9.1f  %7.3f  %8.4f  %8.3f  %5s" % (
            n, toks, wall, toks / wall, gb1 - gb0, (gb1 - gb0) / max(1, toks),
            hits / max(1, hits + misses), batch))


if __name__ == "__main__":
    main()
