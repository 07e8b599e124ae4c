"""A WASTE instance for the Python benchmarks and the chaos test: a synthetic model, `waste up`
with waste-serve in a temporary directory, OpenAI-style requests to it, and `waste down`.
Binaries come from $WASTE_BIN and $WASTE_SUPERVISE (the supervisor finds the others), as in the
integration tests. Python 3 standard library only."""

import http.client
import json
import os
import socket
import subprocess
import tempfile
import time


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
        try:
            with open(os.path.join(self.run_dir, "supervise.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

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


def complete(port, prompt, max_tokens, timeout=60.0):
    """A non-streamed /v1/completions: (status, text or the error's message)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/completions", completion_body(prompt, max_tokens, False),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        j = json.loads(r.read())
        if r.status == 200:
            return 200, j["choices"][0]["text"]
        return r.status, j["error"]["message"]
    finally:
        c.close()


def stream(port, prompt, max_tokens, timeout=60.0, source="127.0.0.1"):
    """A streamed /v1/completions: ("ok", text) | ("error", why) | ("hung", why) | ("truncated", why).
    A refused or reset connection is an error (waste-serve itself was down): clear to a client.
    source: the client's loopback address (127.0.0.0/8; waste-serve bounds connections per address)."""
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    text = ""
    try:
        c.request("POST", "/v1/completions", completion_body(prompt, max_tokens, True),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            j = json.loads(r.read() or b"{}")
            if "error" not in j:
                return "truncated", "HTTP %d without an error object" % r.status
            return "error", "HTTP %d %s" % (r.status, j["error"].get("code"))
        error = None
        while True:
            line = r.readline()
            if not line:
                return "truncated", "the stream ended without [DONE] after %r" % text
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                return ("error", error) if error else ("ok", text)
            j = json.loads(data)
            if "error" in j:
                error = "event %s" % j["error"].get("code")
            else:
                text += j["choices"][0]["text"]
    except TimeoutError:
        return "hung", "no byte for %.0f s" % timeout
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        if time.time() - t0 > timeout:
            return "hung", str(e)
        return "error", "connection %s" % type(e).__name__
    finally:
        c.close()
