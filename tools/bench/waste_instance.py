"""A WASTE instance for the Python benchmarks and the chaos test: a synthetic model, `waste up`
with waste-serve in a temporary directory, OpenAI-style requests to it, and `waste down`.
Binaries come from $WASTE_BIN and $WASTE_SUPERVISE (the supervisor finds the others), as in the
integration tests. Python 3 standard library only."""

import argparse
import http.client
import json
import math
import os
import socket
import subprocess
import tempfile
import time



def read_state(run_dir):
    """The supervisor's supervise.json of run_dir, or None while there is none (or it is being
    replaced)."""
    try:
        with open(os.path.join(run_dir, "supervise.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

# argparse types of the harnesses' command lines (chaos, soak): an error names the value.
def positive_int(s):
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError("not an integer: %r" % s)
    if v <= 0:
        raise argparse.ArgumentTypeError("must be positive, not %r" % s)
    return v


def positive_number(s):
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % s)
    if not math.isfinite(v) or v <= 0:
        raise argparse.ArgumentTypeError("must be a positive, finite number, not %r" % s)
    return v


def supervise():
    return ["python3", os.environ.get("WASTE_SUPERVISE", "tools/waste-supervise")]


def waste_bin():
    return os.environ.get("WASTE_BIN", "waste")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def proc_stat(pid):
    """(state, ppid, starttime) of a process from /proc/PID/stat, None when there is none. The
    start time (clock ticks since boot) tells a process from a later one that got its pid."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2:].split()  # the fields after the command name, from field 3 on
    return rest[0], int(rest[1]), int(rest[19])


def rss_bytes(pid):
    """Resident set size of a process (VmRSS), 0 when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Instance:
    """`waste synth` + `waste up --http` in a temporary directory; stop() is `waste down`."""

    def __init__(self, preset="tiny-kimi-linear", up_args=(), synth_args=()):
        self.tmp = tempfile.mkdtemp(prefix="waste-bench-")
        self.model = os.path.join(self.tmp, "tiny.waste")  # requests say "model": "tiny"
        self.run_dir = os.path.join(self.tmp, "run")
        self.port = free_port()
        subprocess.run([waste_bin(), "synth", "--preset", preset, "--out", self.model, "--no-progress", *synth_args],
                       check=True, stdout=subprocess.DEVNULL)
        up = subprocess.run(supervise() + ["up", self.model, "--run-dir", self.run_dir, "--http",
                                           "127.0.0.1:%d" % self.port, *up_args], capture_output=True, text=True)
        if up.returncode != 0:
            raise RuntimeError("waste up failed: %s%s" % (up.stdout, up.stderr))

    def state(self):
        return read_state(self.run_dir)

    def pids(self):
        st = self.state() or {"children": []}
        return {c["name"]: c["pid"] for c in st["children"] if c["pid"]}

    def healthy(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            c.request("GET", "/health")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except (OSError, http.client.HTTPException):
            return False

    def wait_healthy(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.healthy():
                return True
            time.sleep(0.2)  # polling the instance's own /health
        return False

    def stop(self):
        """`waste down`; returns its CompletedProcess."""
        return subprocess.run(supervise() + ["down", "--run-dir", self.run_dir], capture_output=True, text=True)

    def remove(self):
        subprocess.run(["rm", "-rf", self.tmp])


def completion_body(prompt, max_tokens, stream):
    return json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": stream})


def send_and_answer(c, body):
    """POSTs a completion and returns the response. A server may answer and close before it has
    read the request (waste-serve's refusal of a connection over its per-address bound): the
    send then fails with EPIPE or a reset, but the answer it sent may still be there to read,
    and it is the server's word, so it is read; the send's error is raised only when it is not."""
    try:
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    except (BrokenPipeError, ConnectionResetError) as e:
        try:
            return c.getresponse()
        except (ConnectionError, http.client.HTTPException, OSError):
            raise e
    return c.getresponse()


def complete(port, prompt, max_tokens, timeout=60.0):
    """A non-streamed /v1/completions: (status, text or the error's message). Status 0 when there
    is no valid answer (no connection, a cut or malformed body, no end within `timeout` seconds
    in all): the text says why."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        r = send_and_answer(c, completion_body(prompt, max_tokens, False))
        body = r.read()
        if time.monotonic() - t0 > timeout:
            return 0, "hung: the answer took %.1f s (bound %g s)" % (time.monotonic() - t0, timeout)
        try:
            j = json.loads(body)
            if r.status == 200:
                return 200, j["choices"][0]["text"]
            return r.status, j["error"]["message"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            return 0, "malformed: HTTP %d body %r (%s: %s)" % (r.status, body[:200], type(e).__name__, e)
    except TimeoutError:
        return 0, "hung: no byte for %g s" % timeout
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        return 0, "connection %s: %s" % (type(e).__name__, e)
    finally:
        c.close()


def event_text(data):
    """The text of one completion event (the bytes after "data: "), or ("error", code) for an
    error event; raises ValueError for anything else."""
    try:
        j = json.loads(data)
        if "error" in j:
            return "error", j["error"].get("code")
        text = j["choices"][0]["text"]
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise ValueError("%s %s" % (type(e).__name__, e))
    if not isinstance(text, str):
        raise ValueError("text is %s" % type(text).__name__)
    return "text", text


def stream(port, prompt, max_tokens, timeout=60.0, source="127.0.0.1"):
    """A streamed /v1/completions, one of
      ("ok", text)           the stream ended with [DONE] and had no error event
      ("error", why)         a clean error: an HTTP error object, or an error event before [DONE]
      ("connection", why)    refused, reset or cut under the client (no clean error reached it):
                             what a client gets while waste-serve is down or killed under it
      ("truncated", why)     the stream ended without [DONE]
      ("malformed", why)     a body or event that is not the JSON the API promises (a non-200
                             whose whole body came but holds no error object, too)
      ("hung", why)          no end within `timeout` seconds in all (not per read)
    source: the client's loopback address (127.0.0.0/8; waste-serve bounds connections per address)."""
    deadline = time.monotonic() + timeout

    def left():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        return remaining

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    text = ""
    try:
        c.connect()
        sock = c.sock  # kept: the connection forgets it when the response says it closes
        sock.settimeout(left())
        r = send_and_answer(c, completion_body(prompt, max_tokens, True))
        if r.status != 200:
            sock.settimeout(left())
            body = r.read()
            try:
                j = json.loads(body or b"{}")
                if not isinstance(j, dict) or "error" not in j:
                    return "malformed", "HTTP %d without an error object: %r" % (r.status, body[:200])
                return "error", "HTTP %d %s" % (r.status, j["error"].get("code"))
            except (ValueError, AttributeError, TypeError) as e:
                return "malformed", "HTTP %d body %r (%s)" % (r.status, body[:200], e)
        error = None
        while True:
            sock.settimeout(left())
            line = r.readline()
            if not line.endswith(b"\n"):  # the end of the stream, maybe in the middle of a line
                return "truncated", "the stream ended without [DONE] after %r%s" % (
                    text, " (and a cut line %r)" % line[:200] if line else "")
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                return ("error", error) if error else ("ok", text)
            try:
                kind, value = event_text(data)
            except ValueError as e:
                return "malformed", "event %r (%s) after %r" % (data[:200], e, text)
            if kind == "error":
                error = "event %s" % value
            else:
                text += value
    except TimeoutError:
        return "hung", "no end within %g s (after %r)" % (timeout, text)
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        if time.monotonic() > deadline:
            return "hung", "no end within %g s: %s" % (timeout, e)
        return "connection", "connection %s" % type(e).__name__
    finally:
        c.close()
