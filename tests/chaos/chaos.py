#!/usr/bin/env python3
"""Chaos test: N streaming clients against `waste up --http` while iod, compute and waste-serve
are killed (-9) or stopped (SIGSTOP, then SIGCONT) at random moments.

Every request must either complete with exactly the text it gets alone (greedy, computed before
the chaos) or end with a clear error (an HTTP error object, an error event in the stream; a
refused, reset or cut connection only while a fault hit the waste-serve serving it) within a
bounded time in all; none may hang, and no client may die of an answer it did not expect. After
each fault the supervisor must bring the victim back; after the run its restart counts must
match the kills, every prompt must give its text again, and after `waste down` no process,
socket or shared-memory segment may be left. A run that injected no fault, or saw no process,
fails: it proved nothing.

  tests/chaos/chaos.py [--faults N] [--clients N] [--seed S] [--gap SECONDS] [--hang-seconds S] [--json]

Binaries come from $WASTE_BIN, $WASTE_SUPERVISE (and the supervisor's own $WASTE_IOD, ...), as
in the integration tests. Exit 0 when every rule held, 1 otherwise (the report says which).
Python 3 standard library only.
"""

import argparse
import json
import os
import random
import re
import signal
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench"))
from waste_instance import Instance, complete, proc_stat, stream, positive_int, positive_number  # noqa: E402

PROMPTS = ["Hello", "The cat sat on", "Once upon a time", "1, 2, 3,", "Why is the sky", "Tell me about"]
MAX_TOKENS = 24
HANG_SECONDS = 60.0  # a request with no end after this long in all is hung (the deadlines are ~1.5 s)
RECOVER_SECONDS = 120.0  # the victim back and /health 200 after a fault, at most
NAMES = ("iod", "compute", "serve")
PRINTED_PROBLEMS = 40  # the text report's share of them (one a request can be thousands)
# Outcomes that only a fault of waste-serve itself explains: nobody is left to send an error.
CUT = ("connection", "truncated")


def instance_segments(run_dir):
    """The shared-memory segments this instance's iods said they serve (iod.log): other
    instances on the machine have segments of their own. iod's private huge-page file
    ("/proc/<pid>/fd/<n>", iod --shm) has no name, so no exit can leave it behind: it is
    listed, and never found in /dev/shm."""
    try:
        with open(os.path.join(run_dir, "iod.log"), errors="replace") as f:
            return set(re.findall(r"\(segment (waste-iod-[0-9a-f]+-[0-9a-f]+|/proc/[0-9]+/fd/[0-9]+)\)", f.read()))
    except OSError:
        return set()


def supervisor_ends(run_dir):
    """{pid: (name, how)} for every child end supervise.log reports ("NAME (pid P) ended: HOW")."""
    try:
        with open(os.path.join(run_dir, "supervise.log"), errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    return {int(m.group(2)): (m.group(1), m.group(3).strip())
            for m in re.finditer(r"supervise: (\w+) \(pid (\d+)\) ended: ([^\n]*)", text)}


def overlaps(fault, start, end):
    """Whether a fault's window (from the signal until the victim is back and /health is 200;
    open while it is not) meets a request's lifetime [start, end]."""
    return fault["t0"] <= end and (fault["recovered"] is None or start <= fault["recovered"])


def serve_fault_excuse(faults, req):
    """The fault that cut `req` short, or None: waste-serve died (killed by us, or by the
    supervisor's wedge kill of a stopped one) during the request, and it was the waste-serve
    serving it (the pid at the request's start) or the request started while it was down."""
    for f in faults:
        if f["victim"] == "serve" and f["died"] and overlaps(f, req["start"], req["end"]) and (
                req["serve_pid"] == f["pid"] or f["t0"] <= req["start"]):
            return f
    return None


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faults", type=positive_int, default=20, help="faults to inject (20)")
    ap.add_argument("--clients", type=positive_int, default=4, help="concurrent streaming clients (4)")
    ap.add_argument("--seed", type=int, default=1, help="random seed of the fault schedule (1)")
    ap.add_argument("--gap", type=positive_number, default=1.0,
                    help="mean seconds from a recovered instance to the next fault (1.0)")
    ap.add_argument("--hang-seconds", type=positive_number, default=HANG_SECONDS,
                    help="a request with no end after this long in all is hung (%g)" % HANG_SECONDS)
    ap.add_argument("--json", action="store_true", help="the report as one JSON object")
    ap.add_argument("--keep", action="store_true", help="keep the run directory and logs even when all went well")
    args = ap.parse_args(argv)
    hang = args.hang_seconds
    rng = random.Random(args.seed)
    problems = []
    # Short deadlines, so a stopped process costs a request ~1.5 s; a child silent for 15 s is
    # killed by the supervisor (a SIGSTOP here lasts at most 3 s: that should not happen).
    inst = Instance(up_args=["--budget", "512M", "--ctx", "256", "--iod-timeout", "1500", "--compute-timeout", "1500",
                             "--wedge-timeout", "15"])
    port, run_dir = inst.port, inst.run_dir
    counts = {"requests": 0, "completed": 0, "errors": 0, "hung": 0, "mismatched": 0, "truncated": 0,
              "malformed": 0, "client_exceptions": 0}
    kinds = {}
    lock = threading.Lock()
    stop = threading.Event()
    requests = []  # {"client", "prompt", "start", "end", "serve_pid", "outcome", "detail"}
    faults = []  # {"victim", "how", "pid", "t0", "t1", "recovered", "died"}; appended before the signal
    finished = set()  # clients whose loop ended normally (a client missing here died)
    seen = {}  # (name, pid) -> start time: every child of the supervisor this run saw
    restarts, wedged, last_pids = {}, {}, {}
    st0 = None
    threads = []

    def current_child(name):
        """The pid of the running `name`: a live (not zombie) child of the supervisor, as its
        state file names it; None while it is down or restarting."""
        st = inst.state()
        if not st:
            return None
        for c in st.get("children", []):
            if c.get("name") == name and c.get("pid"):
                ps = proc_stat(c["pid"])
                if ps and ps[0] != "Z" and ps[1] == st.get("supervisor_pid"):
                    seen[(name, c["pid"])] = ps[2]
                    return c["pid"]
        return None

    def recover(fault):
        """Waits for the instance to serve again after `fault`: the victim runs (a new pid after
        a kill: a killed process is not gone at once, it is still in the state file until the
        supervisor reaps it, and /health may still say 200 from before) and /health is 200.
        (The time then, the victim's pid), (None, None) after RECOVER_SECONDS."""
        deadline = time.monotonic() + RECOVER_SECONDS
        while time.monotonic() < deadline:
            pid = current_child(fault["victim"])
            if pid and not (fault["how"] == "kill" and pid == fault["pid"]) and inst.healthy():
                return time.monotonic(), pid
            time.sleep(0.2)  # polling the supervisor's state file and /health
        return None, None

    try:
        # Each prompt alone, before any fault: the text every completed request must equal.
        reference = {}
        for p in PROMPTS:
            status, text = complete(port, p, MAX_TOKENS, hang)
            if status != 200:
                print("chaos: the reference request %r failed: %s %s (logs in %s)" % (p, status, text, run_dir))
                return 1
            reference[p] = text
        st0 = inst.state()
        for n in NAMES:
            current_child(n)  # the first processes, for the check that none is left

        def one_request(i, r):
            p = r.choice(PROMPTS)
            req = {"client": i, "prompt": p, "serve_pid": inst.pids().get("serve"), "start": time.monotonic()}
            try:
                req["outcome"], req["detail"] = stream(port, p, MAX_TOKENS, hang)
            except Exception as e:  # an answer stream() did not expect: a failure, counted, not a dead client
                req["outcome"], req["detail"] = "exception", "%s: %s\n%s" % (
                    type(e).__name__, e, traceback.format_exc())
            req["end"] = time.monotonic()
            with lock:
                requests.append(req)
            return req["outcome"]

        def client(i):
            r = random.Random(args.seed * 1000 + i)
            while not stop.is_set():
                try:
                    outcome = one_request(i, r)
                except Exception as e:  # even the bookkeeping failed: recorded, and the client goes on
                    outcome = "exception"
                    with lock:
                        requests.append({"client": i, "prompt": None, "serve_pid": None, "start": 0, "end": 0,
                                         "outcome": "exception", "detail": "%s: %s\n%s" % (
                                             type(e).__name__, e, traceback.format_exc())})
                if outcome != "ok":
                    time.sleep(0.1)  # a client's back-off after an error, not a synchronisation
            with lock:
                finished.add(i)

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        for n in range(args.faults):
            # Each fault hits a running instance at a random moment while clients stream; after
            # it, the victim must be back (a new pid if it died) and /health 200 before the next.
            time.sleep(rng.expovariate(1.0 / args.gap))  # the schedule: random moments
            victim = rng.choice(list(NAMES))
            how = rng.choice(["kill", "stop"])
            pid = current_child(victim)
            wait_until = time.monotonic() + 30
            while not pid and time.monotonic() < wait_until:
                # Not expected after recover(); a death of its own in between is reported by
                # the restart checks.
                time.sleep(0.2)  # polling the supervisor's state file
                pid = current_child(victim)
            if not pid:
                problems.append("fault %d: no running %s to hit for 30 s (supervise.json names no live child of "
                                "the supervisor)" % (n, victim))
                break
            fault = {"victim": victim, "how": how, "pid": pid, "t0": time.monotonic(), "t1": None,
                     "recovered": None, "died": how == "kill"}
            with lock:
                faults.append(fault)  # before the signal: a request it cuts must find it
            try:
                if how == "kill":
                    os.kill(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGSTOP)
                    time.sleep(rng.uniform(0.2, 3.0))  # how long it stays stopped
                    os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                # Gone between the look and the signal: the supervisor reaped it (a kill of a
                # stopped one as wedged, or a death of its own, which the restart check reports).
                pass
            fault["t1"] = time.monotonic()
            fault["recovered"], new_pid = recover(fault)
            if fault["recovered"] is None:
                problems.append("fault %d (%s %s pid %d): the victim not back with /health 200 within %.0f s" % (
                    n, how, victim, pid, RECOVER_SECONDS))
                break
            if new_pid != pid:
                fault["died"] = True  # also a stopped one the supervisor killed as wedged
        stop.set()
        deadline = time.monotonic() + hang + 30
        for i, t in enumerate(threads):
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                counts["hung"] += 1
                problems.append("client %d did not end within %g s of the end of the faults: a request hung "
                                "past every deadline" % (i, hang + 30))
            elif i not in finished:
                problems.append("client %d died" % i)
        # Back to normal: the supervisor restarted what died; every prompt gives its text again.
        if not inst.wait_healthy(90):
            problems.append("/health did not turn 200 within 90 s after the faults")
        for p in PROMPTS:
            t0 = time.monotonic()
            status, text = complete(port, p, MAX_TOKENS, hang)
            if status != 200 or text != reference[p]:
                problems.append("after the faults, %r gave %s %r (alone: %r)" % (p, status, text, reference[p]))
            elif time.monotonic() - t0 > hang:
                problems.append("after the faults, %r took %.1f s (bound %g s)" % (p, time.monotonic() - t0, hang))
        st = inst.state()
        for n in NAMES:
            current_child(n)
        ends = supervisor_ends(run_dir)  # before `waste down` adds the ends it causes
        if st is None or st0 is None:
            problems.append("supervise.json could not be read (at the start: %s, at the end: %s): no restart counts"
                            % (st0 is not None, st is not None))
        else:
            restarts = {c["name"]: c["restarts"] for c in st["children"]}
            wedged = {c["name"]: c.get("wedged", 0) for c in st["children"]}
            restarts0 = {c["name"]: c["restarts"] for c in st0["children"]}
            wedged0 = {c["name"]: c.get("wedged", 0) for c in st0["children"]}
            last_pids = {c["name"]: c["pid"] for c in st["children"] if c["pid"]}
            for n in NAMES:
                deaths = sum(1 for f in faults if f["victim"] == n and f["died"])
                kills = sum(1 for f in faults if f["victim"] == n and f["how"] == "kill")
                wedge_kills = sum(1 for f in faults if f["victim"] == n and f["how"] == "stop" and f["died"])
                got = restarts.get(n, 0) - restarts0.get(n, 0)
                if got != deaths:
                    problems.append("%s restarted %d times during the run for %d deaths injected (%d kills, %d "
                                    "wedge kills of a stopped one): %s" % (
                                        n, got, deaths, kills, wedge_kills,
                                        "a kill not accounted for" if got < deaths else "a death nobody injected"))
                got_wedged = wedged.get(n, 0) - wedged0.get(n, 0)
                if got_wedged != wedge_kills:
                    problems.append("%s: %d wedge kills in supervise.json, %d stops of it ended by one" % (
                        n, got_wedged, wedge_kills))
            killed = {f["pid"]: f for f in faults if f["died"]}
            for pid, f in sorted(killed.items()):
                name, how = ends.get(pid, (None, None))
                if name != f["victim"] or how != "signal 9":
                    problems.append("%s pid %d was killed (%s) but supervise.log says %s" % (
                        f["victim"], pid, f["how"], "it ended: %s" % how if how else "nothing of its end"))
            for pid, (name, how) in sorted(ends.items()):
                if pid not in killed:
                    problems.append("%s pid %d ended during the run (%s) and no fault killed it" % (name, pid, how))
    finally:
        stop.set()
        down = inst.stop()
    if down.returncode != 0:
        problems.append("waste down failed: %s" % down.stderr)
    missing = [n for n in NAMES if n not in last_pids]
    if missing:
        problems.append("no running %s at the end (supervise.json: %s): cannot check that none is left" % (
            ", ".join(missing), last_pids))
    unseen = [n for n in NAMES if not any(name == n for name, _ in seen)]
    if unseen:
        problems.append("no %s process of the instance was ever seen: the run cannot have tested it" % ", ".join(unseen))
    for (name, pid), started in sorted(seen.items()):
        ps = proc_stat(pid)
        if ps and ps[2] == started and ps[0] != "Z":
            problems.append("%s (pid %d) is still running after waste down" % (name, pid))
    for sock in ("iod.sock", "compute.sock"):
        if os.path.exists(os.path.join(run_dir, sock)):
            problems.append("%s is left in the run directory" % sock)
    used = instance_segments(run_dir)
    if not used:
        problems.append("iod.log names no segment: cannot check that none is left")
    left = {n for n in used if not n.startswith("/") and os.path.exists(os.path.join("/dev/shm", n))}
    if left:
        problems.append("shared-memory segments left: %s" % ", ".join(sorted(left)))

    # Every request, judged against the faults it lived through.
    with lock:
        reqs, flist = list(requests), list(faults)
    outside = 0
    for req in reqs:
        o, d, p = req["outcome"], req["detail"], req["prompt"]
        counts["requests"] += 1
        took = req["end"] - req["start"]
        if o == "hung" or took > hang:
            counts["hung"] += 1
            problems.append("%r hung: %.1f s (bound %g s): %s %s" % (p, took, hang, o, d))
        elif o == "ok" and d == reference[p]:
            counts["completed"] += 1
        elif o == "ok":
            counts["mismatched"] += 1
            problems.append("%r gave %r, alone %r" % (p, d, reference[p]))
        elif o == "error":
            counts["errors"] += 1
            kinds[d] = kinds.get(d, 0) + 1
            if not any(overlaps(f, req["start"], req["end"]) for f in flist):
                outside += 1
        elif o in CUT and serve_fault_excuse(flist, req):
            # A cut stream or connection is all a client can get when waste-serve itself dies
            # under it (nobody is left to send an error): a clear end then, a defect otherwise.
            counts["errors"] += 1
            kind = "%s: waste-serve was killed" % ("stream cut" if o == "truncated" else d)
            kinds[kind] = kinds.get(kind, 0) + 1
        elif o in CUT:
            counts["truncated"] += 1
            problems.append("%r: %s with no fault of the waste-serve serving it during the request (%.1f s, "
                            "serve pid %s): %s" % (p, o, took, req["serve_pid"], d))
        elif o == "malformed":
            counts["malformed"] += 1
            problems.append("%r: malformed answer: %s" % (p, d))
        else:
            counts["client_exceptions"] += 1
            problems.append("client %d, %r: %s: %s" % (req["client"], p, o, d))
    fault_kinds = {}
    for f in flist:
        key = "%s %s" % (f["how"], f["victim"]) + (" (wedge-killed)" if f["how"] == "stop" and f["died"] else "")
        fault_kinds[key] = fault_kinds.get(key, 0) + 1
    if not flist:
        problems.append("no fault was injected: the run proved nothing")
    elif len(flist) < args.faults:
        problems.append("%d of %d faults injected" % (len(flist), args.faults))
    if counts["requests"] == 0:
        problems.append("no request was made during the faults")
    if counts["completed"] == 0:
        problems.append("no request completed during the faults")
    report = {"faults": len(flist), "fault_kinds": fault_kinds, "clients": args.clients, "seed": args.seed,
              **counts, "errors_outside_faults": outside, "error_kinds": kinds, "restarts": restarts,
              "wedged_kills": wedged, "max_request_s": max((r["end"] - r["start"] for r in reqs), default=0.0),
              "problems": problems}
    if args.json:
        print(json.dumps(report))
    else:
        print("chaos: %d faults (%s)" % (report["faults"], ", ".join("%s %d" % kv for kv in sorted(fault_kinds.items()))))
        print("chaos: %d requests: %d completed exactly, %d failed with an error (%d of them during no fault), "
              "%d hung, %d mismatched, %d cut with no fault of waste-serve, %d malformed, %d client exceptions; "
              "the longest took %.1f s" % (
                  counts["requests"], counts["completed"], counts["errors"], outside, counts["hung"],
                  counts["mismatched"], counts["truncated"], counts["malformed"], counts["client_exceptions"],
                  report["max_request_s"]))
        print("chaos: errors by kind: %s" % ", ".join("%s %d" % kv for kv in sorted(kinds.items())))
        print("chaos: restarts %s, wedged kills %s" % (restarts, wedged))
        for p in problems[:PRINTED_PROBLEMS]:
            print("chaos: PROBLEM: %s" % p)
        if len(problems) > PRINTED_PROBLEMS:
            print("chaos: PROBLEM: ... and %d more (--json lists them all)" % (len(problems) - PRINTED_PROBLEMS))
    if not problems and not args.keep:
        inst.remove()
    else:
        print("chaos: logs kept in %s" % run_dir)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
