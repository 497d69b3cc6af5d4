"""Shared helpers of the infergate benchmarks: where the programs are, free loopback ports,
processes that are always killed, machine facts, and the results files.

Not a framework: each bench/*.py script reads top to bottom on its own; this file only holds
what all of them would otherwise repeat. Python 3 standard library only.
"""

import atexit
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
# Default: ./build next to the sources, which `sh etc/quickstart.sh build` makes.
BUILD = os.path.abspath(os.environ.get("IG_BUILD", os.path.join(REPO, "build")))
TMP = os.environ.get("IG_BENCH_TMP", "/tmp/infergate-bench")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def binary(name):
    """Path of infergate, infergate-sim or infergate-bulk in the build dir; exits if missing."""
    path = os.path.join(BUILD, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"{name} not found in {BUILD}: build first (sh etc/quickstart.sh build), "
                 f"or point IG_BUILD at a build directory")
    return path


def need(*pairs):
    """Install missing tools: need(("wrk", "wrk"), ("nginx", "nginx-light")).
    IG_SKIP_DEPS=1 only checks."""
    missing = [pkg for prog, pkg in pairs if shutil.which(prog) is None
               and not os.path.exists(f"/usr/sbin/{prog}")]
    if not missing:
        return
    if os.environ.get("IG_SKIP_DEPS") == "1" or os.geteuid() != 0:
        sys.exit(f"missing: {' '.join(missing)} (apt-get install -y {' '.join(missing)})")
    log(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    if subprocess.call(["apt-get", "install", "-y", "-qq"] + missing, env=env,
                       stdout=subprocess.DEVNULL) != 0:
        subprocess.check_call(["apt-get", "update", "-qq"], env=env)
        subprocess.check_call(["apt-get", "install", "-y", "-qq"] + missing, env=env,
                              stdout=subprocess.DEVNULL)


def free_port():
    """A loopback port nobody listens on right now (the kernel picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raise_nofile():
    """Soft open-file limit up to the hard one (for us and for what we start)."""
    import resource
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class Procs:
    """Processes this run started. Each gets its own process group, and every group is
    killed on exit, on an exception and on SIGINT/SIGTERM: nothing outlives the script."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.procs = []
        os.makedirs(workdir, exist_ok=True)
        atexit.register(self.stop_all)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):
        self.stop_all()
        sys.exit(128 + signum)

    def start(self, name, argv, **kw):
        logf = open(os.path.join(self.workdir, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=kw.pop("stdout", logf),
                             stderr=logf, start_new_session=True, preexec_fn=raise_nofile, **kw)
        p.bench_name = name
        self.procs.append(p)
        return p

    def stop(self, p, timeout=10):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        else:
            # The leader is gone; its group (nginx workers...) may not be.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self):
        for p in list(reversed(self.procs)):
            self.stop(p, timeout=5)


def http(url, body=None, timeout=5):
    """GET (or POST when body is given); returns (status, bytes)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def wait_http(url, ok=lambda status, body: status == 200, timeout=15, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"{proc.bench_name} exited ({proc.returncode}) before {url} answered; "
                     f"see its log")
        status, body = http(url, timeout=1)
        if ok(status, body):
            return
        time.sleep(0.05)
    sys.exit(f"{url} did not answer in {timeout} s")


def start_sims(procs, n, args, name="sim"):
    """n infergate-sim on free ports with the same flags (or a list of per-sim flag lists)."""
    urls, ps = [], []

    def one(i):
        port = free_port()
        a = args[i] if args and isinstance(args[0], list) else args
        return f"http://127.0.0.1:{port}", procs.start(f"{name}{i + 1}", [
            binary("infergate-sim"), "--listen", f"127.0.0.1:{port}", "--log-level", "warn",
            "--seed", str(i + 1)] + a)
    for i in range(n):
        u, p = one(i)
        urls.append(u)
        ps.append(p)
    for i in range(n):
        # a port free_port() handed out may be taken by the time the simulator binds it (another
        # program's connection): a new port, twice at most
        for attempt in range(3):
            p = ps[i]
            deadline = time.time() + 15
            while p.poll() is None and time.time() < deadline and http(urls[i] + "/health", timeout=1)[0] != 200:
                time.sleep(0.05)
            if p.poll() is None or attempt == 2:
                break
            urls[i], ps[i] = one(i)
        wait_http(urls[i] + "/health", proc=ps[i])
    return urls, ps


def start_gateway(procs, backends, extra=(), name="gateway", config=None, program=None):
    """infergate (program: another build's binary) in front of backends, once all are healthy."""
    port = free_port()
    argv = [program or binary("infergate"), "--listen", f"127.0.0.1:{port}", "--log-level", "warn"]
    if config:
        argv += ["--config", config]
    else:
        for b in backends:
            argv += ["--backend", b]
    p = procs.start(name, argv + list(extra))
    url = f"http://127.0.0.1:{port}"
    n = len(backends)
    wait_http(url + "/health", proc=p, ok=lambda s, b: s == 200 and
              json.loads(b or b"{}").get("healthy_backends") == n)
    return url, p


def proc_status(pid):
    """VmRSS and VmHWM in kB, from /proc/PID/status."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    return out


def cpu_seconds(pids):
    """User+system CPU seconds of the given processes (their threads included)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except FileNotFoundError:
            pass
    return total / tick


def group_pids(pgid):
    """Every process in a process group (nginx master + workers, ...)."""
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[2]) == pgid:
                        pids.append(int(d))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return pids


def machine():
    cpu = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    try:
        commit = subprocess.check_output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                         stderr=subprocess.DEVNULL, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        commit = os.environ.get("IG_COMMIT", "?")
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release(),
            "load_before": load, "commit": os.environ.get("IG_COMMIT", commit),
            "build": BUILD}


def load_now():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def record(name, title, command, mach, figures, table_md, notes=""):
    """Append one run to results/NAME.md (human) and results/NAME.jsonl (machine)."""
    os.makedirs(RESULTS, exist_ok=True)
    mach = dict(mach, load_after=load_now())
    with open(os.path.join(RESULTS, name + ".jsonl"), "a") as f:
        f.write(json.dumps({"command": command, "machine": mach, "figures": figures}) + "\n")
    with open(os.path.join(RESULTS, name + ".md"), "a") as f:
        f.write(f"\n## {title}, {mach['date']}\n\n")
        f.write(f"`{command}` at commit {mach['commit']}; {mach['nproc']} x {mach['cpu']}, "
                f"Linux {mach['kernel']}; load average {mach['load_before']} before, "
                f"{mach['load_after']} after.\n\n")
        f.write(table_md + "\n")
        if notes:
            f.write("\n" + notes.strip() + "\n")
    print(table_md)
    if notes:
        print("\n" + notes.strip())


def command_line():
    """The command as a shell would take it again (an argument with spaces quoted)."""
    import shlex
    return " ".join([os.path.relpath(sys.argv[0], REPO)] + [shlex.quote(a) for a in sys.argv[1:]]) if sys.argv else "?"


def metrics(url, prefixes):
    """The gateway's /metrics samples whose names start with one of `prefixes` (a string or a
    tuple): {"name{labels}": value}; {} when it does not answer 200."""
    st, body = http(url + "/metrics")
    out = {}
    for line in body.decode().splitlines() if st == 200 else []:
        if line.startswith(prefixes):
            out[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return out


def pct(values, p):
    """Nearest-rank percentile of a list (p in 0..100)."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]


def gnuplot(script, **subst):
    """Run a bench/plot/*.gp script with @KEY@ placeholders filled in."""
    need(("gnuplot", "gnuplot-nox"))
    with open(os.path.join(BENCH, "plot", script)) as f:
        text = f.read()
    for k, v in subst.items():
        text = text.replace(f"@{k}@", str(v))
    subprocess.run(["gnuplot"], input=text.encode(), check=True)
