"""Integration test harness: real processes on free loopback ports, TAP output.

Each test file does:

    from harness import test, run, start_sim, http

    @test
    def sim_answers_health():
        sim = start_sim()
        status, headers, body = http("GET", sim.url + "/health")
        assert status == 200, status

    run()

Every process started through `start()` (or a helper built on it) during a test
is killed when that test ends, pass or fail, and again at interpreter exit and
on SIGTERM/SIGINT. Output is TAP, one line per test, so automake's TAP driver
counts test cases, not files.
"""

import atexit
import http.client
import http.client as _http_client  # the function http() below shadows the name `http`
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse

BUILDDIR = os.environ.get("IG_BUILDDIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
SRCDIR = os.environ.get("IG_SRCDIR") or BUILDDIR

_tests = []
_procs = []          # processes of the running test
_all_procs = []      # every process ever started, for atexit


def binary(name):
    """Path of a program built in the build tree (infergate, infergate-sim, ...)."""
    path = os.path.join(BUILDDIR, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is not built (run make first)")
    return path


def free_port():
    """A port the kernel just handed out on 127.0.0.1 (free at this moment)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening_inodes(port):
    """The inodes of the sockets that listen on this TCP port (IPv4 and IPv6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        out.add(cols[9])
        except OSError:
            pass
    return out


def _session_owns(sid, inodes):
    """Whether a process of session sid (a program started by start() and its children) holds
    one of these socket inodes."""
    want = {f"socket:[{i}]" for i in inodes}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            if int(stat.rsplit(")", 1)[1].split()[3]) != sid:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in want:
                        return True
                except OSError:
                    pass
        except (OSError, ValueError, IndexError):
            pass
    return False


def wait_listening(port, timeout=10.0, proc=None, host="127.0.0.1"):
    """Wait until something accepts TCP connections on host:port; with proc, until proc (or a
    process of its session) is what listens there. free_port() hands out a port that another
    test running at the same time may be handed too: a connection accepted by that other
    test's server must not pass for ours (ours then fails to bind, exits, and the caller
    retries on another port)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode} before listening:\n"
                               + proc.read_log())
        try:
            with socket.create_connection((host, port), timeout=0.5):
                if proc is None or _session_owns(proc.pid, _listening_inodes(port)):
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


class Proc(subprocess.Popen):
    """A started program; .port and .url when it listens, .log_path for its stderr."""
    port = None
    url = None
    log_path = None

    def read_log(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except (OSError, TypeError):
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        """Send sig, wait; SIGKILL if it does not exit. Returns the exit code."""
        if self.poll() is None:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.wait()
        return self.returncode


def start(args, port=None, wait=True, env=None, stdout=None, stdin=None, timeout=10.0):
    """Start a program in its own process group, stderr to a temp log file.

    With port, wait until it listens there (unless wait=False). The process is
    killed when the current test ends."""
    log = tempfile.NamedTemporaryFile(prefix="ig-", suffix=".log", delete=False)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    p = Proc([str(a) for a in args], stdout=stdout if stdout is not None else log,
             stderr=log, stdin=stdin if stdin is not None else subprocess.DEVNULL,
             env=full_env, start_new_session=True)
    p.log_path = log.name
    log.close()
    _procs.append(p)
    _all_procs.append(p)
    if port is not None:
        p.port = port
        p.url = f"http://127.0.0.1:{port}"
        if wait:
            wait_listening(port, timeout=timeout, proc=p)
    return p


def start_sim(*extra, port=None, **kw):
    """Start one infergate-sim on a free port (extra flags are passed on)."""
    for attempt in range(3):
        p_ = port or free_port()
        try:
            return start([binary("infergate-sim"), "--listen", f"127.0.0.1:{p_}", *extra],
                         port=p_, **kw)
        except RuntimeError:
            if port or attempt == 2:
                raise


def start_sims(n, *extra, **kw):
    return [start_sim(*extra, **kw) for _ in range(n)]


def start_redis(*extra, port=None):
    """A redis-server of its own (Debian's) on a loopback port, in a temporary directory, no
    persistence; stopped when the test ends. .url is its redis:// URL."""
    import shutil as _sh
    exe = _sh.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(exe):
        raise FileNotFoundError("redis-server is not installed (apt-get install -y redis-server)")
    p_ = port or free_port()
    d = tempfile.mkdtemp(prefix="ig-redis-")
    p = start([exe, "--port", str(p_), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", d, "--daemonize", "no", *extra], port=p_)
    p.redis_url = f"redis://127.0.0.1:{p_}"
    return p


def start_clustered(redis, name, backends, *extra, **kw):
    """infergate as gateway `name` of a cluster on redis (start_redis), syncing every 100 ms
    and probing its backends every 200 ms."""
    return start_gateway(backends, "--cluster-redis", redis.redis_url, "--cluster-name", name,
                         "--cluster-sync-ms", "100", "--health-interval-ms", "200", *extra, **kw)


def cluster_members(gw):
    """The names of the gateways gw shares with, itself included ([] while it serves alone)."""
    c = http_json("GET", gw.url + "/health/backends")[2]["cluster"]
    return [m["name"] for m in c["members"]] if c["joined"] else []


def wait_cluster(gws, names, timeout=10):
    """Waits until every gateway of gws sees exactly `names` (sorted) as its cluster."""
    wait_until(lambda: all(cluster_members(g) == sorted(names) for g in gws), timeout=timeout,
               what=f"{', '.join(sorted(names))} joined")


def start_gateway(backends, *extra, port=None, config=None, **kw):
    """Start infergate in front of the given backend URLs (or Proc objects). With
    IG_TEST_WORKERS set (etc/quickstart.sh sets 2), a gateway whose test names no --workers
    runs that many reactors, whatever the machine's default."""
    urls = [b.url if hasattr(b, "url") else b for b in backends]
    if os.environ.get("IG_TEST_WORKERS") and "--workers" not in extra:
        extra = (*extra, "--workers", os.environ["IG_TEST_WORKERS"])
    for attempt in range(3):
        p_ = port or free_port()
        args = [binary("infergate"), "--listen", f"127.0.0.1:{p_}"]
        if config:
            args += ["--config", config]
        for u in urls:
            args += ["--backend", u]
        try:
            return start(args + list(extra), port=p_, **kw)
        except RuntimeError:
            if port or attempt == 2:
                raise


def http(method, url, body=None, headers=None, timeout=30.0):
    """One HTTP request. body may be bytes, str or a JSON-able object.
    Returns (status, headers as a lower-cased dict, body bytes)."""
    u = urllib.parse.urlsplit(url)
    conn = _http_client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    hdrs = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        hdrs.setdefault("Content-Type", "application/json")
    if isinstance(body, str):
        body = body.encode()
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def http_json(method, url, body=None, headers=None, timeout=30.0):
    """Like http() but decodes the body as JSON: (status, headers, obj)."""
    status, hdrs, data = http(method, url, body, headers, timeout)
    try:
        obj = json.loads(data) if data else None
    except ValueError:
        raise AssertionError(f"{method} {url}: {status} with a body that is not JSON: {data[:200]!r}")
    return status, hdrs, obj


def fixture(name):
    """A file of tests/fixtures (a real server's payload) as bytes, without its
    leading `//` lines, which name the upstream source it follows."""
    with open(os.path.join(SRCDIR, "tests", "fixtures", name), "rb") as f:
        lines = f.read().split(b"\n")
    while lines and lines[0].startswith(b"//"):
        lines.pop(0)
    return b"\n".join(lines)


def sse_events(data):
    """Split an SSE body (bytes) into the payloads of its `data:` lines."""
    out = []
    for block in data.decode().split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out


def assert_openai_error(status, obj, want_status, want_type=None):
    """Asserts an OpenAI-shaped error body with the expected status."""
    assert status == want_status, f"status {status}, want {want_status}: {obj}"
    assert isinstance(obj, dict) and isinstance(obj.get("error"), dict), obj
    e = obj["error"]
    for k in ("message", "type", "param", "code"):
        assert k in e, f"error lacks {k}: {obj}"
    assert isinstance(e["message"], str) and e["message"], obj
    if want_type:
        assert e["type"] == want_type, obj


def read_until(s, marker, timeout=10):
    """Reads a socket until marker has come (a response's head and its first event may come in
    separate reads); returns all it read."""
    s.settimeout(timeout)
    got = b""
    while marker not in got:
        d = s.recv(65536)
        assert d, got
        got += d
    return got


def exchange(port, data, wait=2.0, until_close=False, count=1):
    """Sends raw bytes and reads the answer: until `count` whole responses
    arrived (or, with until_close, until the server closes), or until it is
    silent for `wait` seconds. port: a loopback port, or a Unix socket's path.
    Returns (bytes received, closed by the server)."""
    if isinstance(port, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(port)
    else:
        s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(wait)
    out = b""
    closed = False
    try:
        s.sendall(data)
        while True:
            d = s.recv(65536)
            if not d:
                closed = True
                break
            out += d
            if not until_close and len(responses(out)) >= count:
                break
    except socket.timeout:
        pass
    except (ConnectionResetError, BrokenPipeError):
        closed = True
    finally:
        s.close()
    return out, closed


def responses(data):
    """Splits raw bytes into [(status, headers dict, body)] of the whole
    responses in it (Content-Length framed, which is all the gateway sends
    for errors; interim 1xx responses are skipped)."""
    out = []
    while data.startswith(b"HTTP/"):
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if 100 <= status < 200:
            data = rest
            continue
        n = int(hdrs.get("content-length", "0"))
        if len(rest) < n:
            break
        out.append((status, hdrs, rest[:n]))
        data = rest[n:]
    return out


def rss_kb(pid):
    """A process's resident memory, kB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise KeyError("VmRSS")


def sanitized(pid):
    """ASan holds freed memory in quarantine and ThreadSanitizer keeps its
    shadow and history: RSS says nothing about leaks there (LeakSanitizer
    checks those at exit instead)."""
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    return "libasan" in maps or "libtsan" in maps


def wait_until(pred, timeout=10.0, interval=0.05, what="condition"):
    """Poll pred() until it returns a truthy value; returns it or raises."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached after {timeout}s (last: {last!r})")


def parallel(fn, items, workers=64):
    """Run fn(item) for every item on a thread pool; returns results in order.
    An exception in any call is raised here."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


def raw_post(port, body, headers=()):
    """A chat completion on its own socket, sent and left to complete (the caller reads and
    closes it): headers is a list of (name, value)."""
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    extra = b"".join(f"{k}: {v}\r\n".encode() for k, v in headers)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def sim_requests(sim):
    """Completion requests a simulator has received so far (any outcome)."""
    return http_json("GET", sim.url + "/sim/state")[2]["requests_received"]


def sim_waiting(*sims):
    """The most requests any of the simulators holds waiting in its own queue now."""
    return max(http_json("GET", s.url + "/sim/state")[2]["num_waiting_reqs"] for s in sims)


def gateway_queue(gw):
    """Requests waiting in the gateway's queue now."""
    return http_json("GET", gw.url + "/health/backends")[2]["gateway"]["queue_depth"]


class Sampler:
    """Calls each fn every `every` seconds, in a thread, while the with-block runs; what each
    returned is in .values (one list per fn, in order)."""

    def __init__(self, *fns, every=0.02):
        self.fns, self.every = fns, every
        self.values = [[] for _ in fns]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self):
        while not self._stop.is_set():
            for fn, vs in zip(self.fns, self.values):
                vs.append(fn())
            time.sleep(self.every)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def chat_body(prompt, **extra):
    """A chat completion request body for one user prompt."""
    body = {"model": extra.pop("model", "sim-model"),
            "messages": [{"role": "user", "content": prompt}]}
    body.update(extra)
    return body


def metric(text, name):
    """Value of one Prometheus sample (exact name with labels) in a /metrics text."""
    if isinstance(text, bytes):
        text = text.decode()
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        parts = line.rsplit(" ", 1)
        if len(parts) == 2 and parts[0] == name:
            return float(parts[1])
    raise KeyError(f"metric {name} not found")


# The official OpenAI client (npm package `openai`), installed from the npm
# registry on first use into the build tree (OPENAI_NPM_VERSION pins it).
OPENAI_NPM_VERSION = os.environ.get("OPENAI_NPM_VERSION", "6.49.0")
NODE_PREFIX = os.path.join(BUILDDIR, "tests", "node-deps")


def ensure_npm(prefix, packages, timeout=600):
    """node_modules of npm packages ("name@version") installed on first use into prefix, a
    directory of their own (an npm install --no-save into another's would prune that one's
    packages). Test files run in parallel (make -j): one installs while the others wait on a
    lock, or npm's two installs into one directory collide (ENOTEMPTY)."""
    import fcntl
    os.makedirs(prefix, exist_ok=True)
    with open(os.path.join(prefix, ".install.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marks = [os.path.join(prefix, "node_modules", *p.rsplit("@", 1)[0].split("/"), "package.json")
                 for p in packages]
        if not all(os.path.exists(m) for m in marks):
            p = subprocess.run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", prefix,
                                *packages], capture_output=True, text=True, timeout=timeout)
            assert p.returncode == 0, f"npm install {' '.join(packages)} failed:\n{p.stderr[-2000:]}"
    return os.path.join(prefix, "node_modules")


def ensure_openai():
    """The openai package's node_modules directory, installed on first use."""
    return ensure_npm(NODE_PREFIX, [f"openai@{OPENAI_NPM_VERSION}"], timeout=300)


# The OpenTelemetry JS SDK beside it (tests/integration/otel_client.cjs), in a directory of its
# own. Pinned to versions that agree: sdk-trace-node 2.12 wants @opentelemetry/api < 1.10,
# instrumentation-undici 0.34 wants 1.10's logs API, so 0.33.
OTEL_NPM = ["openai@" + OPENAI_NPM_VERSION, "@opentelemetry/api@1.9.1", "@opentelemetry/sdk-trace-node@2.12.1",
            "@opentelemetry/sdk-trace-base@2.12.1", "@opentelemetry/instrumentation-undici@0.33.0"]
OTEL_PREFIX = os.path.join(BUILDDIR, "tests", "node-deps-otel")


def ensure_otel():
    """node_modules with the openai client and the OpenTelemetry JS SDK, installed on first use."""
    return ensure_npm(OTEL_PREFIX, OTEL_NPM, timeout=300)


def run_client(gw, model, *mode, env=None, timeout=60):
    """tests/integration/openai_client.cjs (the official npm client) against
    the gateway: its JSON summary."""
    p = subprocess.run(["node", os.path.join(SRCDIR, "tests", "integration", "openai_client.cjs"),
                        gw.url, model, *mode], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "NODE_PATH": ensure_openai(), **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


class Skip(Exception):
    """Raised by a test that cannot run here; reported as TAP `ok N - name # SKIP why`."""


def need_binary(name):
    """Fails the current test unless the program is built (e.g. infergate):
    the suite runs after `make`, so a missing program is a broken build."""
    if not os.path.exists(os.path.join(BUILDDIR, name)):
        raise AssertionError(f"{name} is not built in {BUILDDIR} (run make first)")


# ---------------------------------------------------------- infergate-bulk runs

class Dir:
    """A temp directory for one test, removed afterwards."""

    def __init__(self):
        self.path = tempfile.mkdtemp(prefix="ig-bulk-")

    def __call__(self, name):
        return os.path.join(self.path, name)

    def __del__(self):
        shutil.rmtree(self.path, ignore_errors=True)


def keys_file(path, *names):
    """A JSON keys file at path with a new key per name (infergate --new-key):
    the Authorization header of each, in order."""
    keys = []
    for name in names:
        p = subprocess.run([binary("infergate"), "--new-key", name], capture_output=True, text=True, timeout=10)
        keys.append((p.stdout.split()[0], json.loads(p.stdout.split("\n", 1)[1])))
    with open(path, "w") as f:
        json.dump({"keys": [k[1] for k in keys]}, f)
    return [{"Authorization": f"Bearer {k[0]}"} for k in keys]


# The Files API (multipart/form-data, as every OpenAI client sends an upload).
BOUNDARY = "----infergate-test-boundary"


def multipart(fields, filename, data):
    """A multipart/form-data body: text fields, then the file."""
    out = b""
    for k, v in fields.items():
        out += (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n').encode()
    if data is not None:
        out += (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
                f'Content-Type: application/jsonl\r\n\r\n').encode() + data + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


def upload(gw, data, purpose="batch", filename="corpus.jsonl", headers=None):
    h = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", **(headers or {})}
    fields = {"purpose": purpose} if purpose is not None else {}
    st, hdrs, raw = http("POST", gw.url + "/v1/files", multipart(fields, filename, data), headers=h)
    return st, json.loads(raw)


def bulk(*args, timeout=150, env=None, preexec_fn=None):
    """Runs infergate-bulk to the end: (exit code, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run([binary("infergate-bulk"), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=full_env, preexec_fn=preexec_fn)
    return p.returncode, p.stdout, p.stderr


def generate(path, count, seed=1, kind="chat"):
    rc, out, err = bulk("generate", "--count", count, "--seed", seed, "--kind", kind, "--output", path)
    assert rc == 0, err


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


def written_lines(path):
    """The JSON lines another process has finished writing to path: a line still being
    written (no newline yet) is left for the next reading."""
    with open(path) as f:
        return [json.loads(x) for x in f if x.endswith("\n") and x.strip()]


def ids(path):
    return [o["custom_id"] for o in lines(path)]


def test(fn):
    """Register a test function."""
    _tests.append(fn)
    return fn


_todo = {}


def todo(reason):
    """Marks a test as a known bug (put it under @test): its result is printed
    with a TAP `# TODO reason` directive, so a failure is reported but does not
    fail the suite, and a pass (XPASS) tells that the marker can go."""
    def mark(fn):
        _todo[fn.__name__] = reason
        return fn
    return mark


class FakeBackend:
    """A scripted HTTP/1.1 server on a free loopback port, for backends that
    misbehave in ways infergate-sim does not (garbage, truncated bodies,
    early closes) and for seeing the exact request bytes the gateway sends.

    handler(fb, req, sock) answers one request; req is a dict with method,
    path, headers (list of (name, value) as received), raw (header bytes) and
    body. It writes to sock itself and returns False to close the connection.
    The default handler answers GET /health, GET /v1/models and any POST like
    a small OpenAI server. Every request is appended to fb.requests.
    Stopped with the other processes of the test."""

    args = ["fake-backend"]
    log_path = None

    def __init__(self, handler=None, model="sim-model", tls=None):
        import threading
        self.handler = handler or FakeBackend.answer_ok
        self.model = model
        self.tls = tls              # an ssl.SSLContext: serve https
        self.tls_errors = []
        self.requests = []
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.closed = False
        self.conns = []
        threading.Thread(target=self._accept, daemon=True).start()
        _procs.append(self)
        _all_procs.append(self)

    def _accept(self):
        import threading
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        if self.tls:
            import ssl
            try:
                c = self.tls.wrap_socket(c, server_side=True)
            except (ssl.SSLError, OSError) as e:
                self.tls_errors.append(str(e))
                c.close()
                return
        try:
            while not self.closed:
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                head, buf = buf.split(b"\r\n\r\n", 1)
                lines = head.split(b"\r\n")
                method, path = lines[0].decode("latin-1").split(" ")[:2]
                headers = []
                for ln in lines[1:]:
                    k, _, v = ln.decode("latin-1").partition(":")
                    headers.append((k, v.strip()))
                n = int(dict((k.lower(), v) for k, v in headers).get("content-length", "0") or 0)
                while len(buf) < n:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                body, buf = buf[:n], buf[n:]
                req = {"method": method, "path": path, "headers": headers, "raw": head, "body": body}
                with self.lock:
                    self.requests.append(req)
                if self.handler(self, req, c) is False:
                    return
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass

    def posts(self):
        with self.lock:
            return [r for r in self.requests if r["method"] == "POST"]

    @staticmethod
    def reply(sock, status, body, ctype="application/json", extra=b""):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        sock.sendall(b"HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s\r\n%s"
                     % (status, ctype.encode(), len(body), extra, body))

    @staticmethod
    def answer_ok(fb, req, sock):
        if req["method"] == "GET" and req["path"] == "/v1/models":
            FakeBackend.reply(sock, 200, {"object": "list", "data": [{"id": fb.model, "object": "model"}]})
        elif req["method"] == "GET":
            FakeBackend.reply(sock, 200, b"ok", "text/plain")
        else:
            FakeBackend.reply(sock, 200, {"id": "fake-1", "object": "chat.completion", "model": fb.model,
                                          "choices": [{"index": 0, "finish_reason": "stop",
                                                       "message": {"role": "assistant", "content": "fake"}}],
                                          "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        return True

    # The interface of Proc that the test runner uses.
    def read_log(self):
        with self.lock:
            return "\n".join(f"{r['method']} {r['path']}" for r in self.requests[-15:])

    def poll(self):
        return 0 if self.closed else None

    def stop(self, sig=None, timeout=None):
        self.closed = True
        for s in [self.sock] + self.conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        return 0


# A Responses API answer, as OpenAI shapes it (usage 11 in, 7 out).
RESPONSE = {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
            "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": "Hi there", "annotations": []}]}],
            "usage": {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}}


class Collector(FakeBackend):
    """An OTLP/HTTP receiver of spans: each POST /v1/traces kept in .bodies as (headers
    lower-cased, the JSON body), answered with `status` after `delay` seconds; anything
    else 404. spans() flattens the kept bodies' spans."""

    def __init__(self, status=200, delay=0.0):
        self.status, self.delay, self.bodies = status, delay, []
        super().__init__(handler=Collector.take)

    @staticmethod
    def take(fb, req, sock):
        if req["method"] == "POST" and req["path"] == "/v1/traces":
            if fb.delay:
                time.sleep(fb.delay)
            with fb.lock:
                fb.bodies.append((dict((k.lower(), v) for k, v in req["headers"]), json.loads(req["body"])))
            FakeBackend.reply(sock, fb.status, {})
            return True
        FakeBackend.reply(sock, 404, {})
        return True

    def spans(self):
        with self.lock:
            return [s for _, b in self.bodies for rs in b["resourceSpans"] for ss in rs["scopeSpans"]
                    for s in ss["spans"]]

    def server_spans(self):
        """The attributes of each server span (kind 2)."""
        return [span_attrs(s) for s in self.spans() if s["kind"] == 2]


def span_attrs(span):
    """A span's attributes as a dict (intValue as an int)."""
    out = {}
    for a in span["attributes"]:
        v = a["value"]
        out[a["key"]] = int(v["intValue"]) if "intValue" in v else next(iter(v.values()))
    return out


def stateful_backend():
    """A scripted backend of OpenAI's Responses API (and embeddings) that
    stores its responses in its own memory, as SGLang and vLLM do: a
    follow-up naming a response it does not hold is its 404."""
    held = {}   # id -> the response object
    fb_paths = []
    made = itertools.count()

    def handler(fb, req, sock):
        path = req["path"]
        if path.startswith("/v1/responses/"):   # a stored response's routes, as OpenAI serves them
            fb_paths.append((req["method"], path))
            rid, _, rest = path[len("/v1/responses/"):].partition("?")[0].partition("/")
            if rid not in held:
                FakeBackend.reply(sock, 404, {"error": {"message": f"Response with id '{rid}' not found.",
                                                        "type": "invalid_request_error", "param": None, "code": None}})
            elif req["method"] == "DELETE" and not rest:
                del held[rid]
                FakeBackend.reply(sock, 200, {"id": rid, "object": "response", "deleted": True})
            elif req["method"] == "POST" and rest == "cancel":
                FakeBackend.reply(sock, 400, {"error": {"message": "Cannot cancel a synchronous response.",
                                                        "type": "invalid_request_error", "param": None, "code": None}})
            elif req["method"] == "GET" and rest == "input_items":
                FakeBackend.reply(sock, 200, {"object": "list", "data": [], "first_id": None, "last_id": None,
                                              "has_more": False})
            else:
                FakeBackend.reply(sock, 200, held[rid])
            return True
        if req["method"] == "GET":
            return FakeBackend.answer_ok(fb, req, sock)
        body = json.loads(req["body"])
        if req["path"] == "/v1/embeddings":
            import base64
            import struct
            inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vec = [0.25, -0.5, 0.75]
            if body.get("encoding_format") == "base64":   # what the official clients ask for
                vec = base64.b64encode(struct.pack("<3f", *vec)).decode()
            FakeBackend.reply(sock, 200, {"object": "list", "model": fb.model, "data": [
                {"object": "embedding", "index": i, "embedding": vec} for i in range(len(inputs))],
                "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}})
            return True
        prev = body.get("previous_response_id")
        if prev and prev not in held:
            FakeBackend.reply(sock, 404, {"error": {"message": f"Response with id '{prev}' not found.",
                                                    "type": "invalid_request_error", "param": None, "code": None}})
            return True
        rid = f"resp_{fb.port}_{next(made)}"
        answer = dict(RESPONSE, id=rid)
        if body.get("store", True):
            held[rid] = answer
        if body.get("stream"):
            ev = {"type": "response.created", "sequence_number": 0, "response": dict(answer, status="in_progress")}
            done = {"type": "response.completed", "sequence_number": 1, "response": answer}
            FakeBackend.reply(sock, 200, b"event: response.created\ndata: %s\n\nevent: response.completed\ndata: %s"
                              b"\n\n" % (json.dumps(ev).encode(), json.dumps(done).encode()), "text/event-stream")
        else:
            FakeBackend.reply(sock, 200, answer)
        return True
    fb = FakeBackend(handler, model="m")
    fb.paths = fb_paths   # the stored-response routes it was asked, (method, path with query)
    return fb


def _kill_procs(procs):
    for p in procs:
        try:
            p.stop(signal.SIGKILL, timeout=5)
        except Exception:
            pass


def _cleanup_all():
    _kill_procs(_all_procs)


def _on_signal(signum, frame):
    _cleanup_all()
    sys.exit(128 + signum)


def run():
    """Run the registered tests (or those named in argv) and print TAP."""
    atexit.register(_cleanup_all)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    wanted = set(sys.argv[1:])
    tests = [t for t in _tests if not wanted or t.__name__ in wanted]
    print(f"1..{len(tests)}", flush=True)
    failed = 0
    for i, t in enumerate(tests, 1):
        start_t = time.monotonic()
        skipped = None
        try:
            t()
            ok = True
        except Skip as e:
            ok, skipped = True, str(e)
        except Exception:
            ok = False
            tb = traceback.format_exc()
        # with each log, how the program ended (None: still running)
        logs = [(f"{p.args[0]} (exit {p.poll() if hasattr(p, 'poll') else '?'})", p.read_log())
                for p in _procs] if not ok else []
        _kill_procs(_procs)
        for p in _procs:
            if p.log_path:
                try:
                    os.unlink(p.log_path)
                except OSError:
                    pass
        _procs.clear()
        dt = time.monotonic() - start_t
        todo_reason = _todo.get(t.__name__)
        directive = f" # TODO {todo_reason}" if todo_reason else ""
        if skipped is not None:
            print(f"ok {i} - {t.__name__} # SKIP {skipped}", flush=True)
        elif ok:
            print(f"ok {i} - {t.__name__} ({dt:.1f}s){directive}", flush=True)
        else:
            if not todo_reason:
                failed += 1
            print(f"not ok {i} - {t.__name__} ({dt:.1f}s){directive}", flush=True)
            for line in tb.rstrip().split("\n"):
                print("# " + line)
            for name, log in logs:
                tail = log.strip().split("\n")[-15:]
                print(f"# --- last lines of {os.path.basename(name)}'s log:")
                for line in tail:
                    print("#   " + line)
            sys.stdout.flush()
    sys.exit(1 if failed else 0)
