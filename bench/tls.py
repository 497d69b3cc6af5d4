#!/usr/bin/env python3
"""The HTTPS listener (--server-tls-cert/--server-tls-key): infergate terminating TLS against
nginx terminating TLS with the same certificate, in front of the same simulators, in one run.

1. New-connection handshakes per second: wrk -H "Connection: close" (every request a new TCP
   connection and a full TLS handshake) of small non-streamed chat completions (bench/proxy.py's
   body, bench/lib/post.lua), with an ECDSA P-256 certificate and with an RSA-2048 one.
   infergate's handshakes are checked against its counter infergate_tls_handshakes_total.
2. Keep-alive requests per second over TLS (wrk, the ECDSA certificate), with the same two
   proxies over plain HTTP as reference rows: what TLS costs each of them.
3. Memory per held TLS stream: N streaming requests held open through each proxy (opened with
   Python ssl sockets with TCP_NODELAY, verified against the test CA, only their first event
   read; each stream would last about 30 s), VmRSS of the proxy (the gateway; nginx master +
   workers summed) before and while held, a fresh proxy each round; KiB per held stream =
   (held - before) / N.
4. A probe of each TLS listener from Python's ssl: protocol and cipher negotiated, whether a
   session is resumed, and the first answer on a new connection with and without TCP_NODELAY
   on the client (a server that sends nothing after the client's last handshake flight leaves
   it unacknowledged, and a Nagle client's request then waits for the delayed ACK, ~40 ms).

Parts 1 and 2 alternate the targets within each of --rounds rounds (the order reversed every
other round), part 3 alternates the two proxies --rounds times; the tables show medians.

Certificates: made with the openssl CLI in the run's temporary directory: a CA (ECDSA P-256)
signing two server certificates (ECDSA P-256 and RSA-2048), CN and SAN IP:127.0.0.1. Both
proxies get the same certificate and key files (the leaf alone, no chain). nginx: the config of
bench/proxy.py (bench/conf/nginx.conf.in: one worker per core, least_conn, keepalive 256 to the
simulators, no access log, proxy_buffering off) with its listen made `ssl`, ssl_protocols
TLSv1.2 TLSv1.3 (infergate's floor is TLS 1.2; nginx 1.22 leaves 1.3 out by default) and session
resumption off at both (nginx: ssl_session_cache off, ssl_session_tickets off; infergate:
--server-tls-session-tickets 0), plus a plain listen for the reference row. Resumption is off
because wrk keeps a connection's TLS session across its reconnects (SSL_clear after a clean
shutdown) and resumes it where the server lets it: with tickets nearly every "new connection"
is an abbreviated handshake (about 5x the full-handshake rate at nginx). With --resume both
proxies keep their defaults (session tickets on at both, nginx's shared session cache on): part
1 then measures resumed handshakes, what a returning client gets. The probe (4) shows whether
each proxy resumes.

Usage: python3 bench/tls.py [--rounds N] [--duration S] [--connections N] [--streams N]
       [--stream-seconds S] [--no-rsa] [--wrk-threads N] [--resume]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get).
"""

import argparse
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
from proxy import render  # noqa: E402  (bench/proxy.py: the same nginx template)
from proxy import wrk as proxy_wrk  # noqa: E402  (and the same wrk run)

PATH = "/v1/chat/completions"
FAST_SIM = ["--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "16"]   # proxy.py's
HANDSHAKES = 'infergate_tls_handshakes_total{result="ok"}'
HANDSHAKES_FAILED = 'infergate_tls_handshakes_total{result="failed"}'
RESUME = False   # --resume: both proxies keep session resumption on (their defaults)
HANDSHAKES_NOT_TLS = 'infergate_tls_handshakes_total{result="not_tls"}'   # from af4413a on


def median(v):
    v = sorted(v)
    if not v:
        return float("nan")
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


# ---- certificates -------------------------------------------------------------------------

def openssl(*argv, cwd):
    r = subprocess.run(["openssl"] + list(argv), cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"openssl {' '.join(argv)} failed:\n{r.stderr}")


def make_certs(d):
    """A CA (ECDSA P-256) and two server certificates it signs for 127.0.0.1 (SAN IP), ECDSA
    P-256 and RSA-2048; returns {"ca": path, "ecdsa": (cert, key), "rsa": (cert, key)}."""
    os.makedirs(d, exist_ok=True)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key", cwd=d)
    openssl("req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=infergate bench CA", "-days", "2",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-out", "ca.pem", cwd=d)
    out = {"ca": os.path.join(d, "ca.pem")}
    for kind, keyopts, usage in (
            ("ecdsa", ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"], "digitalSignature"),
            ("rsa", ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"], "digitalSignature,keyEncipherment")):
        openssl("genpkey", *keyopts, "-out", f"{kind}.key", cwd=d)
        openssl("req", "-new", "-key", f"{kind}.key", "-subj", "/CN=127.0.0.1", "-out", f"{kind}.csr", cwd=d)
        with open(os.path.join(d, f"{kind}.ext"), "w") as f:
            f.write(f"subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
                    f"keyUsage=critical,{usage}\nextendedKeyUsage=serverAuth\n")
        openssl("x509", "-req", "-in", f"{kind}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-extfile", f"{kind}.ext", "-out", f"{kind}.pem", cwd=d)
        out[kind] = (os.path.join(d, f"{kind}.pem"), os.path.join(d, f"{kind}.key"))
    return out


# ---- HTTPS helpers ------------------------------------------------------------------------

def client_ctx(ca):
    """A client context that verifies the server against the test CA (and its IP SAN)."""
    return ssl.create_default_context(cafile=ca)


def get(url, ctx=None, timeout=5):
    """GET over http or https (verified with ctx); returns (status, bytes)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, ssl.SSLError):
        return 0, b""


def wait_get(url, ctx, proc, ok, timeout=15):
    deadline = time.time() + timeout
    last = (0, b"")
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{proc.bench_name} exited ({proc.returncode}) before {url} answered; see its log "
                     f"in {B.TMP}")
        last = get(url, ctx, timeout=1)
        if ok(*last):
            return
        time.sleep(0.05)
    sys.exit(f"{url} did not answer as expected in {timeout} s (last: {last[0]} {last[1][:200]!r})")


def metrics(url, ctx):
    st, body = get(url + "/metrics", ctx)
    out = {}
    for line in body.decode(errors="replace").splitlines() if st == 200 else []:
        if line.startswith("infergate_tls_"):
            out[line.rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
    return out


def probe(url, ctx, n=10):
    """What the server negotiated, whether it resumes a session (a second connection offering
    the first's), and the time from a new connection's handshake to the answer of its first
    request (GET /health), median of n, for a client with TCP_NODELAY (wrk, bench/lib/sse.py,
    curl) and one without (Python's http.client): a server that leaves the client's last
    handshake flight unacknowledged holds a Nagle client's request until the delayed ACK."""
    host, port = url.split("//")[1].split(":")
    req = f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()

    def one(session=None, nodelay=True):
        t0 = time.perf_counter()
        raw = socket.create_connection((host, int(port)), timeout=5)
        if nodelay:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with ctx.wrap_socket(raw, server_hostname=host, session=session) as s:
            t1 = time.perf_counter()
            s.sendall(req)
            data = s.recv(65536)
            t2 = time.perf_counter()
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return {"protocol": s.version(), "cipher": s.cipher()[0], "session": s.session,
                    "resumed": s.session_reused, "status": int(data.split(b" ", 2)[1]) if data else 0,
                    "handshake_ms": (t1 - t0) * 1000, "first_answer_ms": (t2 - t1) * 1000}

    first = one()
    out = {k: first[k] for k in ("protocol", "cipher", "status")}
    out["resumed"] = one(session=first["session"])["resumed"]
    for nodelay in (True, False):
        runs = [one(nodelay=nodelay) for _ in range(n)]
        key = "nodelay" if nodelay else "nagle"
        out[f"handshake_ms_{key}"] = median([r["handshake_ms"] for r in runs])
        out[f"first_answer_ms_{key}"] = median([r["first_answer_ms"] for r in runs])
    return out


# ---- the proxies --------------------------------------------------------------------------

def gateway_tls_flags(cert, key):
    return ["--server-tls-cert", cert, "--server-tls-key", key]


def start_gateway_tls(procs, backends, cert, key, ctx, name, extra=()):
    """infergate with the HTTPS listener in front of backends, once /health (over HTTPS,
    verified) says all of them are healthy. Returns (https url, process)."""
    port = B.free_port()
    argv = [B.binary("infergate"), "--listen", f"127.0.0.1:{port}", "--log-level", "warn"]
    for b in backends:
        argv += ["--backend", b]
    tickets = [] if RESUME else ["--server-tls-session-tickets", "0"]
    p = procs.start(name, argv + gateway_tls_flags(cert, key) + tickets + list(extra))
    url = f"https://127.0.0.1:{port}"
    wait_get(url + "/health", ctx, p, lambda s, b: s == 200 and
             json.loads(b or b"{}").get("healthy_backends") == len(backends))
    return url, p


def start_nginx_tls(procs, backends, workdir, workers, cert, key, ctx, name):
    """nginx from bench/conf/nginx.conf.in (bench/proxy.py's) with its listen made `ssl` and the
    certificate and key given, plus a plain listen; returns (https url, http url, master)."""
    d = os.path.join(workdir, name)
    for sub in ("client_body", "proxy_temp"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    tls_port, plain_port = B.free_port(), B.free_port()
    servers = "\n".join(f"        server {u[len('http://'):]};" for u in backends)
    conf = render("nginx.conf.in", os.path.join(d, "nginx.conf"), WORKERS=workers, DIR=d,
                  PORT=tls_port, SERVERS=servers)
    with open(conf) as f:
        text = f.read()
    listen = f"listen 127.0.0.1:{tls_port} reuseport backlog=4096;"
    if text.count(listen) != 1:
        sys.exit(f"bench/conf/nginx.conf.in: expected one `{listen}`")
    text = text.replace(listen, f"""listen 127.0.0.1:{tls_port} ssl reuseport backlog=4096;
        listen 127.0.0.1:{plain_port} reuseport backlog=4096;   # the plain reference row
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        """ + ("""ssl_session_cache shared:SSL:10m;   # --resume: resumption on (tickets: the default)""" if RESUME else
               """ssl_session_cache off;         # every new connection a full handshake, as wrk
        ssl_session_tickets off;       # would otherwise resume its previous session"""))
    with open(conf, "w") as f:
        f.write(text)
    nginx = "nginx" if B.shutil.which("nginx") else "/usr/sbin/nginx"
    p = procs.start(name, [nginx, "-c", conf, "-e", os.path.join(d, "nginx-error.log")])
    url, plain = f"https://127.0.0.1:{tls_port}", f"http://127.0.0.1:{plain_port}"
    wait_get(url + "/health", ctx, p, lambda s, b: s == 200)
    wait_get(plain + "/health", None, p, lambda s, b: s == 200)
    return url, plain, p


# ---- part 1 and 2: wrk --------------------------------------------------------------------

def wrk(url, conns, seconds, threads, close):
    """One wrk run of bench/lib/post.lua (bench/proxy.py's); close: every request on a new
    connection."""
    return proxy_wrk(url, conns, seconds, threads, headers=["Connection: close"] if close else [])


def measure(t, args, close):
    """t: {"name", "url", "pgid", "ctx", "metrics"}; a 1 s warm-up, then the run."""
    wrk(t["url"], args.connections, 1, args.wrk_threads, close)
    pids = B.group_pids(t["pgid"])
    before = metrics(t["url"], t["ctx"]) if t.get("metrics") else {}
    c0, t0 = B.cpu_seconds(pids), time.time()
    r = wrk(t["url"], args.connections, args.duration, args.wrk_threads, close)
    r["cpu_pct"] = 100 * (B.cpu_seconds(pids) - c0) / (time.time() - t0)
    r["cpu_us"] = r["cpu_pct"] / 100 / max(r["rps"], 1e-9) * 1e6     # the proxy's CPU per request
    if t.get("metrics"):
        after = metrics(t["url"], t["ctx"])
        # the counter's growth over the run (the /metrics GET that read `after` is one more)
        r["handshakes_ok"] = after.get(HANDSHAKES, float("nan")) - before.get(HANDSHAKES, float("nan")) - 1
        r["handshakes_failed"] = (after.get(HANDSHAKES_FAILED, float("nan"))
                                  - before.get(HANDSHAKES_FAILED, float("nan")))
        if HANDSHAKES_NOT_TLS in after:
            r["handshakes_not_tls"] = after[HANDSHAKES_NOT_TLS] - before.get(HANDSHAKES_NOT_TLS, 0)
    B.log(f"{t['name']:22} {'close' if close else 'keep-alive':10} {r['rps']:>9.0f} req/s  "
          f"p99 {r['p99_ms']:.2f} ms  cpu {r['cpu_pct']:.0f}%  errors {r['errors']}"
          + (f"  handshakes counted {r['handshakes_ok']:.0f} (failed {r['handshakes_failed']:.0f}"
             + (f", not_tls {r['handshakes_not_tls']:.0f}" if "handshakes_not_tls" in r else "") + ")"
             if "handshakes_ok" in r else ""))
    return r


# ---- part 3: held streams -----------------------------------------------------------------

def open_stream(host, port, ctx, body, timeout=10):
    """One streaming chat completion over TLS; returns the socket once the status line, the
    headers and the first SSE event have arrived (the rest is left unread)."""
    raw = socket.create_connection((host, port), timeout=timeout)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)    # as bench/lib/sse.py and wrk
    s = ctx.wrap_socket(raw, server_hostname=host)
    b = body.encode()
    s.sendall((f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(b)}\r\n\r\n").encode() + b)
    data = b""
    while b"\r\n\r\n" not in data or b"data:" not in data.split(b"\r\n\r\n", 1)[1]:
        chunk = s.recv(16384)
        if not chunk:
            raise OSError(f"closed after {len(data)} bytes: {data[:200]!r}")
        data += chunk
    status = data.split(b" ", 2)[1]
    if status != b"200":
        raise OSError(f"status {status.decode()}: {data[:300]!r}")
    return s


def still_open(s):
    """True when the stream's connection has not been closed by the proxy."""
    s.setblocking(False)
    try:
        while True:
            if not s.recv(65536):
                return False
    except (ssl.SSLWantReadError, BlockingIOError):
        return True
    except OSError:
        return False


def rss_kib(pids):
    return sum(B.proc_status(p)["VmRSS"] for p in pids)


def hold(name, url, pids, ctx, n, seconds_budget):
    """Opens n streams through url, one after another, each until its first event; samples the
    summed VmRSS of pids before (after a warm-up) and while all n are held."""
    host, port = url.split("//")[1].split(":")
    port = int(port)
    warm = json.dumps({"model": "sim-model", "stream": True, "max_tokens": 1,
                       "messages": [{"role": "user", "content": "Tell me a story."}]})
    for _ in range(20):                      # TLS, proxy and allocator paths warmed up
        s = open_stream(host, port, ctx, warm)
        s.close()
    time.sleep(0.5)
    samples = []
    for _ in range(3):
        samples.append(rss_kib(pids))
        time.sleep(0.1)
    before = median(samples)
    body = json.dumps({"model": "sim-model", "stream": True,
                       "messages": [{"role": "user", "content": "Tell me a story."}]})
    socks, errors, t0 = [], {}, time.time()
    for _ in range(n):
        try:
            socks.append(open_stream(host, port, ctx, body))
        except (OSError, ssl.SSLError) as e:
            k = str(e)[:120]
            errors[k] = errors.get(k, 0) + 1
        if time.time() - t0 > seconds_budget:
            break
    opened_s = time.time() - t0
    samples = []
    for _ in range(8):
        time.sleep(0.25)
        samples.append(rss_kib(pids))
    held = max(samples)
    alive = sum(1 for s in socks if still_open(s))
    for s in socks:
        try:
            s.close()
        except OSError:
            pass
    r = {"streams": len(socks), "alive_after_sampling": alive, "errors": errors,
         "rss_before_kib": before, "rss_held_kib": held, "open_seconds": opened_s,
         "kib_per_stream": (held - before) / max(len(socks), 1)}
    B.log(f"{name:22} {len(socks)} streams held ({alive} still open after sampling, opened in "
          f"{opened_s:.1f} s): VmRSS {before:,} -> {held:,} KiB, {r['kib_per_stream']:.1f} KiB/stream"
          + (f"; errors {errors}" if errors else ""))
    return r


# ---- main ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of every part [3]")
    ap.add_argument("--duration", type=int, default=5, help="seconds per wrk run [5]")
    ap.add_argument("--connections", type=int, default=64, help="wrk connections [64]")
    ap.add_argument("--wrk-threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--streams", type=int, default=500, help="part 3: streams held open at once [500]")
    ap.add_argument("--stream-seconds", type=int, default=30,
                    help="part 3: how long each stream would last (1 token a second) [30]")
    ap.add_argument("--no-rsa", action="store_true", help="part 1: no RSA-2048 rows")
    ap.add_argument("--resume", action="store_true",
                    help="both proxies keep session resumption on (their defaults): part 1 measures resumed "
                         "handshakes")
    args = ap.parse_args()
    global RESUME
    RESUME = args.resume

    B.need(("wrk", "wrk"), ("nginx", "nginx"), ("openssl", "openssl"))
    gw_help = subprocess.run([B.binary("infergate"), "--help"], capture_output=True, text=True)
    if "--server-tls-cert" not in gw_help.stdout + gw_help.stderr:
        sys.exit(f"{B.binary('infergate')} has no --server-tls-cert (a build without the HTTPS listener)")
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"tls-{os.getpid()}")
    procs = B.Procs(workdir)
    certs = make_certs(os.path.join(workdir, "certs"))
    ctx = client_ctx(certs["ca"])
    workers = os.cpu_count() or 2
    t_start = time.time()
    kinds = ["ecdsa"] + ([] if args.no_rsa else ["rsa"])

    # ---- parts 1 and 2: seven fast simulators, every proxy up at once ----
    sims, sim_ps = B.start_sims(procs, 7, FAST_SIM)
    gw, ng = {}, {}
    for k in kinds:
        cert, key = certs[k]
        gw[k] = start_gateway_tls(procs, sims, cert, key, ctx, f"gateway-tls-{k}")
        ng[k] = start_nginx_tls(procs, sims, workdir, workers, cert, key, ctx, f"nginx-tls-{k}")
    gw_plain, gw_plain_p = B.start_gateway(procs, sims, name="gateway-plain")
    probes = {}
    for k in kinds:
        probes[f"infergate {k}"] = probe(gw[k][0], ctx)
        probes[f"nginx {k}"] = probe(ng[k][0], ctx)
    for name, pr in probes.items():
        B.log(f"probe {name:16} {pr['protocol']} {pr['cipher']}, resumed {pr['resumed']}, handshake "
              f"{pr['handshake_ms_nodelay']:.2f} ms, first answer {pr['first_answer_ms_nodelay']:.2f} ms "
              f"(no TCP_NODELAY: {pr['first_answer_ms_nagle']:.2f} ms)")

    def target(name, url, proc, tls_ctx=None, with_metrics=False):
        return {"name": name, "url": url, "pgid": proc.pid, "ctx": tls_ctx, "metrics": with_metrics}

    close_targets = []
    for k in kinds:
        close_targets += [target(f"infergate TLS {k}", gw[k][0], gw[k][1], ctx, True),
                          target(f"nginx TLS {k}", ng[k][0], ng[k][2])]
    ka_targets = [target("infergate TLS ecdsa", gw["ecdsa"][0], gw["ecdsa"][1], ctx, True),
                  target("nginx TLS ecdsa", ng["ecdsa"][0], ng["ecdsa"][2]),
                  target("infergate plain HTTP", gw_plain, gw_plain_p),
                  target("nginx plain HTTP", ng["ecdsa"][1], ng["ecdsa"][2])]
    runs_close = {t["name"]: [] for t in close_targets}
    runs_ka = {t["name"]: [] for t in ka_targets}
    for rnd in range(args.rounds):
        B.log(f"round {rnd + 1}/{args.rounds}: new connections, then keep-alive")
        order = close_targets if rnd % 2 == 0 else list(reversed(close_targets))
        for t in order:
            runs_close[t["name"]].append(measure(t, args, close=True))
        order = ka_targets if rnd % 2 == 0 else list(reversed(ka_targets))
        for t in order:
            runs_ka[t["name"]].append(measure(t, args, close=False))
    final_metrics = {k: metrics(gw[k][0], ctx) for k in kinds}
    for p in list(procs.procs):
        procs.stop(p)

    # ---- part 3: seven slow simulators, one fresh proxy at a time ----
    slow = ["--tokens-per-second", "1", "--ttft-ms", "0", "--output-tokens", str(args.stream_seconds),
            "--max-running", str(args.streams + 64)]
    sims, _ = B.start_sims(procs, 7, slow, name="slowsim")
    cert, key = certs["ecdsa"]
    held = {"infergate TLS ecdsa": [], "nginx TLS ecdsa": []}
    for rnd in range(args.rounds):
        B.log(f"held streams, round {rnd + 1}/{args.rounds}")
        order = ["infergate", "nginx"] if rnd % 2 == 0 else ["nginx", "infergate"]
        for which in order:
            if which == "infergate":
                url, p = start_gateway_tls(procs, sims, cert, key, ctx, f"gateway-held-{rnd + 1}")
            else:
                url, _, p = start_nginx_tls(procs, sims, workdir, workers, cert, key, ctx, f"nginx-held-{rnd + 1}")
            pids = B.group_pids(p.pid)
            # budget: the streams must all be open well before the first ones end
            held[f"{which} TLS ecdsa"].append(hold(f"{which} TLS ecdsa", url, pids, ctx, args.streams,
                                                   args.stream_seconds * 0.6))
            procs.stop(p)
    procs.stop_all()
    elapsed = time.time() - t_start

    # ---- tables ----
    def med(runs, key):
        return median([r[key] for r in runs])

    figs = {"rounds": args.rounds, "duration_s": args.duration, "connections": args.connections,
            "wrk_threads": args.wrk_threads, "streams": args.streams, "probes": probes,
            "handshake_metrics_end": final_metrics, "elapsed_s": elapsed,
            "new_connections": runs_close, "keep_alive": runs_ka, "held": held}
    rows = []
    for k in kinds:
        ig, nx = runs_close[f"infergate TLS {k}"], runs_close[f"nginx TLS {k}"]
        hs = median([r["handshakes_ok"] / max(r["requests"], 1) for r in ig])
        figs[f"close_{k}_infergate_over_nginx"] = med(ig, "rps") / med(nx, "rps")
        label = "ECDSA P-256" if k == "ecdsa" else "RSA-2048"
        rows.append([label, f"{med(ig, 'rps'):,.0f}", f"{med(nx, 'rps'):,.0f}",
                     f"{figs[f'close_{k}_infergate_over_nginx']:.2f}",
                     f"{med(ig, 'p99_ms'):.2f} / {med(nx, 'p99_ms'):.2f}",
                     f"{med(ig, 'cpu_pct'):.0f}% / {med(nx, 'cpu_pct'):.0f}%",
                     f"{med(ig, 'cpu_us'):.0f} / {med(nx, 'cpu_us'):.0f}",
                     f"{sum(r['errors'] for r in ig)} / {sum(r['errors'] for r in nx)}",
                     f"{med(ig, 'handshakes_ok'):,.0f} ({hs:.2f}x requests), failed "
                     f"{sum(r['handshakes_failed'] for r in ig):.0f}"
                     + (f", not_tls {sum(r['handshakes_not_tls'] for r in ig):.0f}"
                        if all("handshakes_not_tls" in r for r in ig) else "")])
    table = (f"New connections (wrk -H \"Connection: close\": req/s = TLS handshakes/s), medians of "
             f"{args.rounds} rounds:\n\n" + B.md_table(
                 ["certificate", "infergate req/s", "nginx req/s", "infergate / nginx",
                  "p99 ms (ig / nginx)", "CPU (ig / nginx)", "CPU µs per request (ig / nginx)",
                  "errors (ig / nginx)",
                  "infergate handshakes counted per run"], rows))

    base = med(runs_ka["infergate TLS ecdsa"], "rps") / med(runs_ka["nginx TLS ecdsa"], "rps")
    figs["keepalive_tls_infergate_over_nginx"] = base
    figs["keepalive_plain_infergate_over_nginx"] = (med(runs_ka["infergate plain HTTP"], "rps")
                                                    / med(runs_ka["nginx plain HTTP"], "rps"))
    figs["keepalive_infergate_tls_over_plain"] = (med(runs_ka["infergate TLS ecdsa"], "rps")
                                                  / med(runs_ka["infergate plain HTTP"], "rps"))
    figs["keepalive_nginx_tls_over_plain"] = (med(runs_ka["nginx TLS ecdsa"], "rps")
                                              / med(runs_ka["nginx plain HTTP"], "rps"))
    rows = []
    for name, runs in runs_ka.items():
        plain = runs_ka[name.replace("TLS ecdsa", "plain HTTP")] if "TLS" in name else runs
        other = runs_ka[name.replace("infergate", "nginx")] if name.startswith("infergate") else None
        rows.append([name, f"{med(runs, 'rps'):,.0f}", f"{med(runs, 'p50_ms'):.2f}", f"{med(runs, 'p99_ms'):.2f}",
                     f"{med(runs, 'cpu_pct'):.0f}%", f"{med(runs, 'cpu_us'):.0f}", sum(r["errors"] for r in runs),
                     f"{med(runs, 'rps') / med(other, 'rps'):.2f}" if other else "",
                     f"{med(runs, 'rps') / med(plain, 'rps'):.2f}"])
    table += (f"\n\nKeep-alive (wrk -c{args.connections}), ECDSA certificate, medians of {args.rounds} rounds:\n\n"
              + B.md_table(["target", "req/s", "p50 ms", "p99 ms", "CPU", "CPU µs per request", "errors",
                            "infergate / nginx",
                            "TLS / plain"], rows))

    setup = {n: med(runs_close[f"{n} TLS ecdsa"], "cpu_us") - med(runs_ka[f"{n} TLS ecdsa"], "cpu_us")
             for n in ("infergate", "nginx")}
    figs["setup_cpu_us_ecdsa"] = setup
    table += (f"\n\nA new connection's setup (TCP + full TLS handshake, ECDSA) in the proxy's CPU, CPU µs per "
              f"request with Connection: close less with keep-alive: infergate {setup['infergate']:.0f} µs, "
              f"nginx {setup['nginx']:.0f} µs (infergate / nginx = {setup['infergate'] / max(setup['nginx'], 1e-9):.2f}).")

    rows = []
    for name, rs in held.items():
        rows.append([name, f"{median([r['streams'] for r in rs]):,.0f}",
                     f"{min(r['alive_after_sampling'] for r in rs):,}",
                     f"{sum(sum(r['errors'].values()) for r in rs)}",
                     f"{median([r['rss_before_kib'] for r in rs]) / 1024:.1f} MiB",
                     f"{median([r['rss_held_kib'] for r in rs]) / 1024:.1f} MiB",
                     f"{median([r['kib_per_stream'] for r in rs]):.1f}",
                     " / ".join(f"{r['kib_per_stream']:.1f}" for r in rs)])
    figs["held_kib_per_stream_infergate_over_nginx"] = (
        median([r["kib_per_stream"] for r in held["infergate TLS ecdsa"]])
        / max(median([r["kib_per_stream"] for r in held["nginx TLS ecdsa"]]), 1e-9))
    table += (f"\n\nHeld TLS streams (ECDSA), a fresh proxy each round, medians of {args.rounds} rounds:\n\n"
              + B.md_table(["proxy", "streams held", "still open after sampling (min)", "errors",
                            "VmRSS before", "VmRSS held", "KiB per held stream", "per round"], rows)
              + f"\n\nper held stream: infergate / nginx = {figs['held_kib_per_stream_infergate_over_nginx']:.2f}")

    table += ("\n\nNew connections from a Python ssl client (GET /health, medians of 10): what was negotiated, "
              "whether a session is resumed, the handshake, and the first answer after it with and without "
              "TCP_NODELAY on the client:\n\n" + B.md_table(
                  ["target", "protocol, cipher", "resumes", "handshake ms", "first answer ms, TCP_NODELAY",
                   "first answer ms, no TCP_NODELAY"],
                  [[n, f"{p['protocol']} {p['cipher']}", "yes" if p["resumed"] else "no",
                    f"{p['handshake_ms_nodelay']:.2f}", f"{p['first_answer_ms_nodelay']:.2f}",
                    f"{p['first_answer_ms_nagle']:.2f}"] for n, p in probes.items()]))

    version = subprocess.run(["nginx" if B.shutil.which("nginx") else "/usr/sbin/nginx", "-v"],
                             capture_output=True, text=True).stderr.strip().split("/")[-1]
    notes = (f"Backends: seven `infergate-sim {' '.join(FAST_SIM)}` for the wrk parts (bench/lib/post.lua, "
             f"wrk -t{args.wrk_threads} -c{args.connections}, {args.duration} s runs after a 1 s warm-up, the "
             f"targets alternating within each round, the order reversed every other round), seven "
             f"`infergate-sim {' '.join(slow)}` for the held streams. nginx {version}, {workers} workers, "
             f"bench/conf/nginx.conf.in with `listen ... ssl`, ssl_protocols TLSv1.2 TLSv1.3, "
             + ("session resumption on at both (--resume: nginx's shared session cache and tickets, "
                "infergate's tickets): part 1 measures resumed handshakes; "
                if RESUME else "session cache and tickets off at both (wrk resumes its sessions otherwise; "
                "infergate --server-tls-session-tickets 0): every connection a full handshake; ")
             + f"the same certificate files; infergate "
             f"--server-tls-cert/--server-tls-key, one reactor per core ({workers}). CPU = the proxy's "
             f"processes (user+system); everything, wrk and the Python client included, shares {workers} "
             f"cores. Handshakes counted = the growth of infergate_tls_handshakes_total{{result=\"ok\"}} "
             f"over a run; with Connection: close it should equal the requests (a few more: the "
             f"connections wrk opens and stops at its end); failed (and not_tls where the build has it) "
             f"summed over the runs. Held streams: opened one "
             f"after another with Python ssl and TCP_NODELAY (verified against the test CA), each read up to its first SSE "
             f"event; VmRSS before (after 20 warm-up streams) and the highest of 8 samples over 2 s while "
             f"all are held; nginx summed over master + workers. "
             f"Whole run {elapsed:.0f} s.")
    B.record("tls", "HTTPS listener", B.command_line(), mach, figs, table, notes)


if __name__ == "__main__":
    main()
