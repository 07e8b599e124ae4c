#!/usr/bin/env python3
"""tools/waste-supervise on its own, with stand-ins for waste-iod, waste-compute and `waste health`
(small Python scripts: no model, no build): option ranges, `down` refusing a pid that is not the
supervisor of the run directory, Ctrl-C of `up`, an exception in the supervisor, restarts (backoff,
READY_TIMEOUT), liveness answers tied to the instance asked, deadlines on stopping.

Run: python3 tests/integration/test_supervise.py [-v]  (WASTE_SUPERVISE names the script; default:
the source tree's tools/waste-supervise). Every wait here is a bounded poll of an observable state.
"""

import fcntl
import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "bench"))
from waste_instance import read_state  # noqa: E402  (supervise.json as the harnesses read it)
SUPERVISE = os.path.abspath(os.environ.get("WASTE_SUPERVISE") or os.path.join(HERE, "..", "..", "tools", "waste-supervise"))

# A stand-in for waste-iod and waste-compute (by the name it is called as): binds
# <run-dir>/<name>.sock, removes it on SIGTERM. $FAKE_<NAME> changes what it does:
#   nobind            runs without ever binding its socket
#   nobind-restarted  binds on its first start only (a marker in the run dir says it started)
#   die-after:S       binds, then exits 3 after S seconds
FAKE_CHILD = r'''#!/usr/bin/env python3
import os, signal, socket, sys, time
name = os.path.basename(sys.argv[0])[len("fake-"):]
run = sys.argv[sys.argv.index("--run-dir") + 1]
mode = os.environ.get("FAKE_" + name.upper(), "")
path = os.path.join(run, name + ".sock")
def term(*_):
    try:
        os.unlink(path)
    except OSError:
        pass
    os._exit(0)
signal.signal(signal.SIGTERM, term)
marker = os.path.join(run, name + ".started")
first = not os.path.exists(marker)
open(marker, "a").close()
bind = mode != "nobind" and not (mode == "nobind-restarted" and not first)
if bind:
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(16)
print("fake %s pid %d %s" % (name, os.getpid(), "bound" if bind else "not binding"), flush=True)
if mode.startswith("die-after:"):
    time.sleep(float(mode.split(":")[1]))
    os._exit(3)
while True:
    signal.pause()
'''

# A stand-in for `waste health --json`: iod and compute "ok", or "not_answering" while
# <run-dir>/<name>.wedged exists; $FAKE_HEALTH_SLEEP: seconds it takes first.
FAKE_WASTE = r'''#!/usr/bin/env python3
import json, os, sys, time
run = sys.argv[sys.argv.index("--run-dir") + 1]
with open(os.path.join(run, "health.pids"), "a") as f:
    f.write("%d\n" % os.getpid())
time.sleep(float(os.environ.get("FAKE_HEALTH_SLEEP", "0")))
h = {n: {"state": "not_answering" if os.path.exists(os.path.join(run, n + ".wedged")) else "ok"}
     for n in ("iod", "compute")}
print(json.dumps(dict(h, ok=all(v["state"] == "ok" for v in h.values()))))
'''

# The supervisor with some constants changed ($SUPERVISE_PATCH, JSON) or a method made to raise
# ($SUPERVISE_FAIL, Class.method[:N]: on its Nth call, 1 by default). Named waste-supervise:
# `down` checks the command line.
WRAPPER = r'''#!/usr/bin/env python3
import importlib.machinery, importlib.util, json, os, sys
loader = importlib.machinery.SourceFileLoader("waste_supervise", %r)
spec = importlib.util.spec_from_loader("waste_supervise", loader)
m = importlib.util.module_from_spec(spec)
loader.exec_module(m)
for k, v in json.loads(os.environ.get("SUPERVISE_PATCH", "{}")).items():
    setattr(m, k, v)
fail = os.environ.get("SUPERVISE_FAIL")
if fail:
    what, _, nth = fail.partition(":")
    cls, meth = what.split(".")
    real = getattr(getattr(m, cls), meth)
    calls = [0]
    def boom(*a, **k):
        calls[0] += 1
        if calls[0] >= int(nth or 1):
            raise RuntimeError("injected failure in " + what)
        return real(*a, **k)
    setattr(getattr(m, cls), meth, boom)
sys.exit(m.main(sys.argv[1:]))
''' % SUPERVISE


def load_module():
    loader = importlib.machinery.SourceFileLoader("waste_supervise_under_test", SUPERVISE)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    m = importlib.util.module_from_spec(spec)
    loader.exec_module(m)
    return m


def eventually(done, timeout):
    deadline = time.time() + timeout
    while not done():
        if time.time() > deadline:
            return False
        time.sleep(0.05)  # polling an observable state, bounded by the deadline
    return True


def ended(pid):
    """Gone, or a zombie nobody reaped yet."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="test-supervise-")
        self.bin = os.path.join(self.tmp, "bin")
        os.mkdir(self.bin)
        for name, text in (("fake-iod", FAKE_CHILD), ("fake-compute", FAKE_CHILD), ("fake-waste", FAKE_WASTE),
                           ("waste-supervise", WRAPPER)):
            path = os.path.join(self.bin, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.model = os.path.join(self.tmp, "m.waste")
        os.mkdir(self.model)
        self.run_dir = os.path.join(self.tmp, "run")
        self.env = dict(os.environ, WASTE_IOD=os.path.join(self.bin, "fake-iod"),
                        WASTE_COMPUTE=os.path.join(self.bin, "fake-compute"),
                        WASTE_BIN=os.path.join(self.bin, "fake-waste"))
        for k in ("FAKE_IOD", "FAKE_COMPUTE", "FAKE_HEALTH_SLEEP", "SUPERVISE_PATCH", "SUPERVISE_FAIL"):
            self.env.pop(k, None)
        self.helpers = []  # processes of this test, ended in tearDown by their pid

    def tearDown(self):
        for p in self.helpers:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        if os.path.isdir(self.run_dir):
            self.sup("down", "--run-dir", self.run_dir, timeout=120)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def cmd(self, *args):
        return [sys.executable, os.path.join(self.bin, "waste-supervise")] + list(args)

    def sup(self, *args, env=None, timeout=60):
        return subprocess.run(self.cmd(*args), env=env or self.env, capture_output=True, text=True, timeout=timeout)

    def up(self, *extra, env=None):
        return self.sup("up", self.model, "--run-dir", self.run_dir, *extra, env=env, timeout=120)

    def state(self):
        return read_state(self.run_dir)

    def pid_of(self, name):
        st = self.state()
        for c in (st or {}).get("children", []):
            if c["name"] == name:
                return c["pid"]
        return None

    def all_answered(self):
        st = self.state()
        return bool(st) and all(c["answered"] for c in st["children"])

    def log(self, name="supervise"):
        try:
            with open(os.path.join(self.run_dir, name + ".log")) as f:
                return f.read()
        except OSError:
            return ""

    def assert_no_traceback(self, text):
        self.assertNotIn("Traceback", text)

    def assert_stopped(self, pids):
        for pid in pids:
            self.assertTrue(eventually(lambda: ended(pid), 10), "pid %d still running" % pid)
        self.assertIsNone(self.state(), "supervise.json left behind")
        st = self.sup("status", "--run-dir", self.run_dir)
        self.assertEqual(st.returncode, 3, st.stdout + st.stderr)

    def hold_lock(self, run_dir):
        """A helper process that holds run_dir's lock until it is killed."""
        os.makedirs(run_dir, 0o700, exist_ok=True)
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
            import fcntl, os, sys, time
            fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            time.sleep(600)
            """), os.path.join(run_dir, "supervise.lock")], stdout=subprocess.PIPE, text=True)
        self.helpers.append(p)
        self.assertEqual(p.stdout.readline().strip(), "locked")
        p.stdout.close()
        return p


class Options(Base):
    def test_out_of_range_values_are_refused_naming_the_flag_and_the_range(self):
        cases = [("--ctx", "0", "1 to 16777216"), ("--ctx", "-5", "1 to 16777216"), ("--ctx", "1.5", "1 to 16777216"),
                 ("--threads", "0", "1 to 1024"), ("--threads", "1025", "1 to 1024"),
                 ("--slots", "0", "1 to 4294967295"), ("--max-sessions", "0", "1 to 4096"),
                 ("--sessions", "0", "1 to 4096"),
                 ("--max-batch", "-1", "0 to 4096"), ("--image-patches", "2", "4 to 16384"),
                 ("--iod-timeout", "0", "1 to 3600000"), ("--wedge-timeout", "-1", "0 for never"),
                 ("--wedge-timeout", "nan", "0 for never"), ("--wedge-timeout", "inf", "0 for never"),
                 ("--wedge-timeout", "soon", "0 for never")]
        for flag, value, accepted in cases:
            with self.subTest(flag=flag, value=value):
                r = self.up(flag, value)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("argument " + flag, r.stderr)
                self.assertIn(accepted, r.stderr)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)  # one line, no usage block
                self.assert_no_traceback(r.stderr)
                self.assertFalse(os.path.exists(self.run_dir))  # nothing started

    def test_values_in_range_reach_the_children(self):
        r = self.up("--ctx", "256", "--threads", "2", "--max-batch", "0", "--wedge-timeout", "0", "--max-sessions", "3",
                    "--sessions", "2", "--shm", "named")
        self.assertEqual(r.returncode, 0, r.stderr)
        comp = [c for c in self.state()["children"] if c["name"] == "compute"][0]["argv"]
        for pair in (["--ctx", "256"], ["--threads", "2"], ["--max-batch", "0"], ["--max-sessions", "3"], ["--sessions", "2"]):
            self.assertIn(pair, [comp[i:i + 2] for i in range(len(comp))])
        # iod plans for the same context and as many session states as compute holds in memory
        # (not the open sessions: compute parks idle ones on disk).
        iod = [c for c in self.state()["children"] if c["name"] == "iod"][0]["argv"]
        for pair in (["--ctx", "256"], ["--sessions", "2"], ["--shm", "named"]):
            self.assertIn(pair, [iod[i:i + 2] for i in range(len(iod))])
        self.assertNotIn("--max-sessions", iod)

    def test_an_unknown_segment_backing_is_refused_naming_it(self):
        r = self.up("--shm", "hugepages")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("argument --shm", r.stderr)
        self.assertIn("hugepages", r.stderr)
        self.assertFalse(os.path.exists(self.run_dir))  # nothing started

    def test_more_states_than_open_sessions_is_refused(self):
        r = self.up("--max-sessions", "2", "--sessions", "3")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--sessions 3 is more than --max-sessions (2)", r.stderr)
        self.assertFalse(os.path.exists(self.run_dir))  # nothing started


class Down(Base):
    def test_down_refuses_a_pid_that_is_not_a_supervisor(self):
        # A state file naming some other process (a reused pid) while something holds the lock.
        victim = subprocess.Popen(["sleep", "600"])
        self.helpers.append(victim)
        self.hold_lock(self.run_dir)
        with open(os.path.join(self.run_dir, "supervise.json"), "w") as f:
            json.dump({"supervisor_pid": victim.pid, "started": 1.0, "model": self.model, "budget": "auto",
                       "http": "", "run_dir": self.run_dir, "children": []}, f)
        r = self.sup("down", "--run-dir", self.run_dir)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("names pid %d" % victim.pid, r.stderr)
        self.assertIn("not a waste-supervise", r.stderr)
        self.assert_no_traceback(r.stderr)
        time.sleep(0.2)
        self.assertIsNone(victim.poll(), "down signalled a process that is not the supervisor")

    def test_down_refuses_the_supervisor_of_another_run_directory(self):
        other = os.path.join(self.tmp, "other")
        r = self.sup("up", self.model, "--run-dir", other, "--wedge-timeout", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            with open(os.path.join(other, "supervise.json")) as f:
                st = json.load(f)
            self.hold_lock(self.run_dir)
            with open(os.path.join(self.run_dir, "supervise.json"), "w") as f:
                json.dump(dict(st, run_dir=self.run_dir), f)
            r = self.sup("down", "--run-dir", self.run_dir)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("does not hold", r.stderr)
            self.assertFalse(ended(st["supervisor_pid"]), "down stopped another run directory's supervisor")
        finally:
            self.assertEqual(self.sup("down", "--run-dir", other).returncode, 0)

    def test_a_held_lock_with_an_unreadable_state_is_an_error(self):
        self.hold_lock(self.run_dir)
        for content in (None, "{not json", json.dumps({"supervisor_pid": -1})):
            path = os.path.join(self.run_dir, "supervise.json")
            if content is None:
                if os.path.exists(path):
                    os.unlink(path)
            else:
                with open(path, "w") as f:
                    f.write(content)
            with self.subTest(state=content):
                r = self.sup("down", "--run-dir", self.run_dir)
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn("supervise.json", r.stderr)
                self.assertIn("not signalling anything", r.stderr)
                self.assertNotIn("nothing running", r.stdout)
                self.assert_no_traceback(r.stderr)
                s = self.sup("status", "--run-dir", self.run_dir)
                self.assertEqual(s.returncode, 1, s.stdout + s.stderr)
                self.assertIn("supervise.json", s.stderr)

    def test_a_stale_state_without_a_lock_is_nothing_running_and_up_replaces_it(self):
        victim = subprocess.Popen(["sleep", "600"])
        self.helpers.append(victim)
        os.makedirs(self.run_dir, 0o700)
        with open(os.path.join(self.run_dir, "supervise.json"), "w") as f:
            json.dump({"supervisor_pid": victim.pid, "started": 1.0, "model": self.model, "budget": "auto",
                       "http": "", "run_dir": self.run_dir, "children": []}, f)
        r = self.sup("down", "--run-dir", self.run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing running", r.stdout)
        self.assertIsNone(victim.poll())
        r = self.up("--wedge-timeout", "0")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotEqual(self.state()["supervisor_pid"], victim.pid)
        r = self.sup("down", "--run-dir", self.run_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(victim.poll())

    def test_a_symlinked_lock_is_refused(self):
        os.makedirs(self.run_dir, 0o700)
        os.symlink(os.path.join(self.tmp, "elsewhere"), os.path.join(self.run_dir, "supervise.lock"))
        for cmd in ("down", "status"):
            r = self.sup(cmd, "--run-dir", self.run_dir)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("supervise.lock is a symlink", r.stderr)
        os.unlink(os.path.join(self.run_dir, "supervise.lock"))

    def test_a_lock_probe_does_not_turn_up_away(self):
        # status/down probe with a shared lock for an instant; up retries its exclusive one.
        os.makedirs(self.run_dir, 0o700)
        fd = os.open(os.path.join(self.run_dir, "supervise.lock"), os.O_RDONLY | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_SH)
        p = subprocess.Popen(self.cmd("up", self.model, "--run-dir", self.run_dir, "--wedge-timeout", "0"),
                             env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # a probe that lasts far longer than a real one (microseconds)
        os.close(fd)
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)


class Signals(Base):
    def test_ctrl_c_of_up_while_it_starts_stops_the_instance(self):
        env = dict(self.env, FAKE_IOD="nobind")
        p = subprocess.Popen(self.cmd("up", self.model, "--run-dir", self.run_dir), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.assertTrue(eventually(lambda: self.pid_of("iod"), 30), self.log())
        sup, iod = self.state()["supervisor_pid"], self.pid_of("iod")
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does (the daemon is in its own session)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("interrupted", err)
        self.assertIn("stopped", err)
        self.assert_no_traceback(err)
        self.assert_stopped([sup, iod])

    def test_ctrl_c_of_a_foreground_up_stops_the_children(self):
        p = subprocess.Popen(self.cmd("up", self.model, "--run-dir", self.run_dir, "--foreground"), env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.helpers.append(p)
        self.assertTrue(eventually(self.all_answered, 30))  # up: from here a signal is a stop, not a failed start
        pids = [self.pid_of("iod"), self.pid_of("compute")]
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, "out: %s\nerr: %s\nlog: %s" % (out, err, self.log()))
        self.assertIn("stopping", err)
        self.assert_no_traceback(err)
        self.assert_stopped(pids)

    def test_ctrl_c_of_up_as_it_takes_the_lock_and_forks_leaves_nothing(self):
        # Interrupted from the moment it makes the run directory (the lock, the fork of the
        # daemon): no traceback, no supervisor left behind.
        env = dict(self.env, FAKE_IOD="nobind")
        p = subprocess.Popen(self.cmd("up", self.model, "--run-dir", self.run_dir), env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.time() + 30
        while not os.path.isdir(self.run_dir) and time.time() < deadline:
            time.sleep(0.001)  # polling for the directory, bounded by the deadline
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=120)
        self.assertIn(p.returncode, (0, 130, -signal.SIGINT), err)
        self.assert_no_traceback(err)
        if p.returncode != 0:  # interrupted: no supervisor left behind
            self.assertTrue(eventually(lambda: self.sup("status", "--run-dir", self.run_dir).returncode == 3, 30))


class Failures(Base):
    def test_an_exception_in_the_monitor_stops_the_children_and_is_logged(self):
        env = dict(self.env, SUPERVISE_FAIL="Supervisor.check_children:15")  # 3 s after it is up
        r = self.up(env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        pids = [c["pid"] for c in (self.state() or {"children": []})["children"] if c["pid"]]
        self.assertTrue(eventually(lambda: "stopped (" in self.log(), 60), self.log())
        log = self.log()
        self.assertIn("internal error in the supervisor: RuntimeError: injected failure in Supervisor.check_children",
                      log)
        self.assertIn("Traceback", log)  # in supervise.log, for whoever debugs it
        self.assertTrue(pids)
        self.assert_stopped(pids)

    def test_an_exception_while_starting_is_a_one_line_error_of_up(self):
        env = dict(self.env, SUPERVISE_FAIL="Supervisor.start_all")
        r = self.up(env=env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("internal error in the supervisor: RuntimeError", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assert_no_traceback(r.stderr)
        self.assertIsNone(self.state())

    def test_an_exception_in_a_foreground_up_stops_the_children_without_a_traceback(self):
        env = dict(self.env, SUPERVISE_FAIL="Supervisor.monitor")
        r = self.up("--foreground", env=env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("internal error in the supervisor", r.stderr)
        self.assert_no_traceback(r.stderr)  # the traceback went to supervise.log
        self.assertIn("Traceback", self.log())
        pids = [int(p) for p in re.findall(r"started \(pid (\d+)\)", r.stderr)]
        self.assertEqual(len(pids), 2, r.stderr)
        self.assert_stopped(pids)

    def test_a_child_binary_that_cannot_start_is_named(self):
        env = dict(self.env, WASTE_COMPUTE=os.path.join(self.tmp, "no-such-compute"))
        r = self.up(env=env)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("compute: cannot start %s" % env["WASTE_COMPUTE"], r.stderr)
        self.assert_no_traceback(r.stderr)


class Restarts(Base):
    def test_a_child_that_answers_and_dies_backs_off(self):
        # It binds its socket, then dies 0.2 s later: before, the first answer reset the backoff
        # (a restart every half second forever); now the backoff grows until it has been up STABLE_SECONDS.
        env = dict(self.env, FAKE_COMPUTE="die-after:0.2")
        r = self.up("--wedge-timeout", "0", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        time.sleep(8)
        n = len(re.findall(r"restarting compute", self.log()))
        # Backoff 0.5, 1, 2, 4 s (+0.2 s up each): 3 or 4 restarts in 8 s; with the reset, about 10.
        self.assertGreaterEqual(n, 2, self.log())
        self.assertLessEqual(n, 5, self.log())

    def test_a_restarted_child_that_never_comes_up_is_killed_after_ready_timeout(self):
        env = dict(self.env, FAKE_IOD="nobind-restarted", SUPERVISE_PATCH=json.dumps({"READY_TIMEOUT": 2.0}))
        r = self.up("--wedge-timeout", "0", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        first = self.pid_of("iod")
        os.kill(first, signal.SIGKILL)
        self.assertTrue(eventually(lambda: "did not come up in 2 s: killing it" in self.log(), 30), self.log())
        self.assertIn("not binding", self.log())  # the tail of its log is in the message
        self.assertTrue(eventually(lambda: "restarting iod (restart 2)" in self.log(), 30), self.log())

    def test_no_waste_binary_means_no_verdict_and_is_said(self):
        env = dict(self.env, WASTE_BIN=os.path.join(self.tmp, "no-such-waste"))
        r = self.up("--wedge-timeout", "1", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        iod = self.pid_of("iod")
        time.sleep(3)
        self.assertIn("no `waste` binary", self.log())
        self.assertIn("not judged", self.log())
        self.assertEqual(self.pid_of("iod"), iod)  # not killed on no evidence
        self.assertNotIn("wedged; killing", self.log())

    def test_a_wedged_child_is_killed_and_restarted(self):
        r = self.up("--wedge-timeout", "1")
        self.assertEqual(r.returncode, 0, r.stderr)
        iod = self.pid_of("iod")
        open(os.path.join(self.run_dir, "iod.wedged"), "w").close()
        self.assertTrue(eventually(lambda: self.pid_of("iod") not in (None, iod), 30), self.log())
        os.unlink(os.path.join(self.run_dir, "iod.wedged"))
        self.assertIn("wedged; killing it", self.log())
        self.assertEqual([c["wedged"] for c in self.state()["children"] if c["name"] == "iod"][0], 1)

    def test_down_ends_a_probe_in_flight(self):
        # `waste health` that takes a minute: down does not wait for it.
        env = dict(self.env, FAKE_HEALTH_SLEEP="60")
        r = self.up("--wedge-timeout", "5", env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        pids_file = os.path.join(self.run_dir, "health.pids")
        self.assertTrue(eventually(lambda: os.path.exists(pids_file), 30))
        with open(pids_file) as f:
            probe = int(f.read().split()[0])
        t0 = time.time()
        d = self.sup("down", "--run-dir", self.run_dir)
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertLess(time.time() - t0, 15)
        self.assertTrue(eventually(lambda: ended(probe), 10), "the probe's waste health still runs")


class Unit(unittest.TestCase):
    """The supervisor's decisions, on Child objects with a stand-in process."""

    @classmethod
    def setUpClass(cls):
        cls.m = load_module()
        cls.real_supervisor = cls.m.Supervisor

    class FakeProc:
        def __init__(self, pid=4242, dies=True):
            self.pid, self.dies, self.signals, self.rc = pid, dies, [], None

        def poll(self):
            return self.rc

        def send_signal(self, s):
            self.signals.append(s)
            if self.dies and s in (signal.SIGKILL, signal.SIGTERM):
                self.rc = -s

    def supervisor(self, wedge=3.0, flag=None, d=None):
        if d is None:
            d = tempfile.mkdtemp(prefix="test-supervise-unit-")
            self.addCleanup(shutil.rmtree, d, True)
        args = types.SimpleNamespace(model=d, slots=None, budget=None, image_patches=None, prompt_cache=None,
                                     ctx=None, threads=None, max_sessions=None, sessions=None, park_dir=None,
                                     max_batch=None, iod_timeout=None, shm=None,
                                     http=None, image_dir=None, compute_timeout=None, api_key_file=None,
                                     wedge_timeout=wedge)
        s = self.real_supervisor(args, d, flag or self.m.StopFlag())
        for c in s.children:
            c.proc, c.pid, c.generation, c.up_at, c.answered = self.FakeProc(), 4242, 1, 100.0, 100.0
            c.ready = lambda: False
        return s

    def test_a_probe_answer_applies_only_to_the_instance_it_asked(self):
        s = self.supervisor()
        iod = s.children[0]
        iod.generation = 2  # restarted while the probe was in flight
        s.probe_result = ({"iod": 1, "compute": 1}, {"iod": False, "compute": True}, None, 110.0, 120.0)
        s.take_probe(120.0)
        self.assertEqual(iod.proc.signals, [])  # the old instance's silence is not the new one's
        self.assertEqual(s.children[1].answered, 110.0)

    def test_a_probe_that_could_not_ask_is_no_answer(self):
        s = self.supervisor()
        s.probe_result = ({"iod": 1, "compute": 1}, {}, "cannot run waste health", 110.0, 120.0)
        s.take_probe(120.0)
        self.assertEqual([c.answered for c in s.children], [100.0, 100.0])
        self.assertEqual([c.proc.signals for c in s.children], [[], []])

    def test_silence_longer_than_the_wedge_timeout_kills(self):
        s = self.supervisor(wedge=3.0)
        s.probe_result = ({"iod": 1}, {"iod": False}, None, 101.0, 104.0)
        s.take_probe(104.0)
        self.assertEqual(s.children[0].proc.signals, [signal.SIGKILL])
        self.assertEqual(s.children[0].wedged, 1)

    def test_backoff_grows_until_the_child_was_up_stable_seconds(self):
        s = self.supervisor()
        c = s.children[1]
        waits = []
        for _ in range(8):
            c.up_at = 1000.0  # it answered, then died 1 s later
            s.died(c, 1001.0)
            waits.append(c.next_start - 1001.0)
        self.assertEqual(waits[:4], [0.5, 1.0, 2.0, 4.0])
        self.assertEqual(waits[-1], self.m.BACKOFF_MAX)
        s.died(c, 1000.0 + self.m.STABLE_SECONDS + 1)  # up long enough: back to the shortest
        self.assertEqual(c.next_start - (1000.0 + self.m.STABLE_SECONDS + 1), self.m.BACKOFF_MIN)

    def test_a_restarted_child_that_does_not_come_up_is_killed(self):
        s = self.supervisor(wedge=0)
        c = s.children[0]
        c.up_at = c.answered = None
        c.started = time.time() - self.m.READY_TIMEOUT - 1
        s.check_children(time.time())
        self.assertEqual(c.proc.signals, [signal.SIGKILL])

    def starting(self, stop_before_final_write, flag=None, d=None):
        """A supervisor whose children start and answer at once; its stop flag is set after the
        last child answered, before the final state write (the one saying every child answered)
        or during it."""
        s = self.supervisor(flag=flag, d=d)
        writes, answered_all = [], []
        for c in s.children:
            c.clean_socket = lambda: None
            c.start = lambda: None

            def answered(timeout, stopping, last=c is s.children[-1]):
                if last:
                    answered_all.append(True)
                    if stop_before_final_write:
                        s.stop_flag.set = True
                return True
            c.wait_ready = answered

        def write_state():
            writes.append(s.stopping)
            if answered_all:  # the final write
                s.stop_flag.set = True
        s.write_state = write_state
        return s, writes

    def test_a_stop_before_the_state_says_every_child_answered_is_a_failed_start(self):
        s, writes = self.starting(stop_before_final_write=True)
        self.assertEqual(s.start_all(), "stopped while starting")
        self.assertEqual(len(writes), len(s.children))  # the final "every child answered" never written

    def test_a_stop_once_the_state_says_every_child_answered_is_a_stop(self):
        s, writes = self.starting(stop_before_final_write=False)
        self.assertIsNone(s.start_all())
        self.assertEqual(writes, [False] * len(writes))  # each write saw no stop yet

    def test_the_supervisor_exits_0_for_a_stop_once_every_child_answered_and_1_before(self):
        # run_supervisor as a whole (its own verdict after start_all), on the fake children above.
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
        self.addCleanup(lambda: [signal.signal(s, h) for s, h in saved.items()])
        for before, want in ((False, 0), (True, 1)):
            d = tempfile.mkdtemp(prefix="test-supervise-unit-")
            self.addCleanup(shutil.rmtree, d, True)
            self.m.Supervisor = lambda args, run_dir, flag, before=before, d=d: self.starting(before, flag, d)[0]
            try:
                self.assertEqual(self.m.run_supervisor(types.SimpleNamespace(), d, None), want, before)
            finally:
                self.m.Supervisor = self.real_supervisor

    def test_a_child_that_will_not_die_is_reported_within_a_deadline(self):
        old = (self.m.STOP_TIMEOUT, self.m.KILL_TIMEOUT)
        self.m.STOP_TIMEOUT, self.m.KILL_TIMEOUT = 0.3, 0.3
        try:
            s = self.supervisor()
            for c in s.children:
                c.proc = self.FakeProc(dies=False)
            t0 = time.time()
            stuck = s.stop_all()
            self.assertLess(time.time() - t0, 5)
            self.assertEqual([c.name for c in stuck], ["compute", "iod"])
            self.assertEqual(s.children[0].proc.signals, [signal.SIGTERM, signal.SIGCONT, signal.SIGKILL])
        finally:
            self.m.STOP_TIMEOUT, self.m.KILL_TIMEOUT = old


if __name__ == "__main__":
    unittest.main()
