#!/usr/bin/env python3
"""Chaos test: N streaming clients against `waste up --http` while iod, compute and waste-serve
are killed (-9) or stopped (SIGSTOP, then SIGCONT) at random moments.

Every request must either complete with exactly the text it gets alone (greedy, computed before
the chaos) or end with a clear error (an HTTP error object, an error event in the stream, a
refused or reset connection while waste-serve is down) within a bounded time; none may hang.
After the faults the supervisor must have brought every process back, every prompt must give its
text again, and after `waste down` no process, socket or shared-memory segment may be left.

  tests/chaos/chaos.py [--faults N] [--clients N] [--seed S] [--json]

Binaries come from $WASTE_BIN, $WASTE_SUPERVISE (and the supervisor's own $WASTE_IOD, ...), as
in the integration tests. Exit 0 when every rule held, 1 otherwise (the report says which).
Python 3 standard library only.
"""

import argparse
import os
import random
import re
import signal
import json
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench"))
from waste_instance import Instance, alive, complete, stream  # noqa: E402

PROMPTS = ["Hello", "The cat sat on", "Once upon a time", "1, 2, 3,", "Why is the sky", "Tell me about"]
MAX_TOKENS = 24
HANG_SECONDS = 60.0  # a request with no end after this long is hung (the deadlines are ~1.5 s)


def instance_segments(run_dir):
    """The shared-memory segments this instance's iods said they serve (iod.log): other
    instances on the machine have segments of their own."""
    try:
        with open(os.path.join(run_dir, "iod.log"), errors="replace") as f:
            return set(re.findall(r"\(segment (waste-iod-[0-9a-f]+-[0-9a-f]+)\)", f.read()))
    except OSError:
        return set()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faults", type=int, default=20, help="faults to inject (20)")
    ap.add_argument("--clients", type=int, default=4, help="concurrent streaming clients (4)")
    ap.add_argument("--seed", type=int, default=1, help="random seed of the fault schedule (1)")
    ap.add_argument("--gap", type=float, default=1.0, help="mean seconds from a recovered instance to the next fault (1.0)")
    ap.add_argument("--json", action="store_true", help="the report as one JSON object")
    ap.add_argument("--keep", action="store_true", help="keep the run directory and logs even when all went well")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    problems = []
    # Short deadlines, so a stopped process costs a request ~1.5 s; a child silent for 15 s is
    # killed by the supervisor (a SIGSTOP here lasts at most 3 s: that should not happen).
    inst = Instance(up_args=["--budget", "512M", "--ctx", "256", "--iod-timeout", "1500", "--compute-timeout", "1500",
                             "--wedge-timeout", "15"])
    port, run_dir = inst.port, inst.run_dir
    counts = {"requests": 0, "completed": 0, "errors": 0, "hung": 0, "mismatched": 0, "truncated": 0}
    kinds = {}
    lock = threading.Lock()
    stop = threading.Event()
    faults, restarts, wedged, last_pids = {}, {}, {}, {}
    try:
        # Each prompt alone, before any fault: the text every completed request must equal.
        reference = {}
        for p in PROMPTS:
            status, text = complete(port, p, MAX_TOKENS)
            if status != 200:
                print("chaos: the reference request %r failed: %d %s (logs in %s)" % (p, status, text, run_dir))
                return 1
            reference[p] = text

        def serve_killed(pid):
            """Whether the waste-serve of `pid` is gone: the supervisor reaps a killed child
            within its 0.2 s loop, so its pid leaves the state file at once after."""
            deadline = time.time() + 3.0
            while time.time() < deadline:
                if not pid or inst.pids().get("serve") != pid:
                    return True
                time.sleep(0.05)  # polling the supervisor's state file
            return False

        def client(i):
            r = random.Random(args.seed * 1000 + i)
            while not stop.is_set():
                p = r.choice(PROMPTS)
                serve_before = inst.pids().get("serve")
                outcome, detail = stream(port, p, MAX_TOKENS, HANG_SECONDS)
                # A stream cut without [DONE] is all a client can get when waste-serve itself
                # is killed under it (nobody is left to send an error): a clear end then, a
                # defect otherwise.
                if outcome == "truncated" and serve_killed(serve_before):
                    outcome, detail = "error", "stream cut: waste-serve was killed"
                with lock:
                    counts["requests"] += 1
                    if outcome == "ok" and detail == reference[p]:
                        counts["completed"] += 1
                    elif outcome == "ok":
                        counts["mismatched"] += 1
                        problems.append("%r gave %r, alone %r" % (p, detail, reference[p]))
                    elif outcome == "error":
                        counts["errors"] += 1
                        kinds[detail] = kinds.get(detail, 0) + 1
                    else:
                        counts[outcome] += 1
                        problems.append("%r: %s: %s" % (p, outcome, detail))
                if outcome == "error":
                    time.sleep(0.1)  # a client's back-off after an error, not a synchronisation

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        for n in range(args.faults):
            # Each fault hits a running instance: first everything answers again (the supervisor
            # restarted what the last fault killed), then a random moment while clients stream.
            if not inst.wait_healthy(120):
                problems.append("the instance did not answer /health within 120 s after fault %d" % n)
                break
            time.sleep(rng.expovariate(1.0 / args.gap))  # the schedule: random moments
            victim = rng.choice(["iod", "compute", "serve"])
            how = rng.choice(["kill", "stop"])
            pid = inst.pids().get(victim)
            if not pid or not alive(pid):
                how = "skipped (restarting)"
            elif how == "kill":
                os.kill(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(rng.uniform(0.2, 3.0))  # how long it stays stopped
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    how = "stop ended by the supervisor's wedge kill of"
            key = "%s %s" % (how, victim)
            faults[key] = faults.get(key, 0) + 1
        stop.set()
        for t in threads:
            t.join(HANG_SECONDS + 30)
            if t.is_alive():
                problems.append("a client thread did not end: a request hung past every deadline")
        # Back to normal: the supervisor restarted what died; every prompt gives its text again.
        if not inst.wait_healthy(90):
            problems.append("/health did not turn 200 within 90 s after the faults")
        for p in PROMPTS:
            status, text = complete(port, p, MAX_TOKENS)
            if status != 200 or text != reference[p]:
                problems.append("after the faults, %r gave %d %r (alone: %r)" % (p, status, text, reference[p]))
        st = inst.state() or {"children": []}
        restarts = {c["name"]: c["restarts"] for c in st["children"]}
        wedged = {c["name"]: c.get("wedged", 0) for c in st["children"]}
        last_pids = inst.pids()
    finally:
        stop.set()
        down = inst.stop()
    if down.returncode != 0:
        problems.append("waste down failed: %s" % down.stderr)
    for name, pid in last_pids.items():
        if alive(pid):
            problems.append("%s (pid %d) is still running after waste down" % (name, pid))
    for sock in ("iod.sock", "compute.sock"):
        if os.path.exists(os.path.join(run_dir, sock)):
            problems.append("%s is left in the run directory" % sock)
    used = instance_segments(run_dir)
    if not used:
        problems.append("iod.log names no segment: cannot check that none is left")
    left = {n for n in used if os.path.exists(os.path.join("/dev/shm", n))}
    if left:
        problems.append("shared-memory segments left: %s" % ", ".join(sorted(left)))
    if counts["completed"] == 0:
        problems.append("no request completed during the faults")
    report = {"faults": sum(v for k, v in faults.items() if not k.startswith("skipped")), "fault_kinds": faults,
              "clients": args.clients, "seed": args.seed, **counts, "error_kinds": kinds, "restarts": restarts,
              "wedged_kills": wedged, "problems": problems}
    if args.json:
        print(json.dumps(report))
    else:
        print("chaos: %d faults (%s)" % (report["faults"], ", ".join("%s %d" % kv for kv in sorted(faults.items()))))
        print("chaos: %d requests: %d completed exactly, %d failed with an error, %d hung, %d mismatched, %d truncated" % (
            counts["requests"], counts["completed"], counts["errors"], counts["hung"], counts["mismatched"],
            counts["truncated"]))
        print("chaos: errors by kind: %s" % ", ".join("%s %d" % kv for kv in sorted(kinds.items())))
        print("chaos: restarts %s, wedged kills %s" % (restarts, wedged))
        for p in problems:
            print("chaos: PROBLEM: %s" % p)
    if not problems and not args.keep:
        inst.remove()
    else:
        print("chaos: logs kept in %s" % run_dir)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
