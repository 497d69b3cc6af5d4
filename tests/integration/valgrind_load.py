#!/usr/bin/env python3
"""The gateway under valgrind memcheck through a short load: a few hundred
requests, streamed and not, bad ones, clients that leave mid-stream and
mid-request, then SIGTERM with one stream still running (it is let finish).
Every request carries a key of a JSON keys file with rpm and tpm limits (and
streams without include_usage, so the usage the gateway asks for is taken
out again); another key meets its rpm (429) and a model it may not use (403).
Run by tests/sanitize.sh (`make check-valgrind`) against a plain -O1 -g build:

    IG_BUILDDIR=BUILD IG_VALGRIND_LOG=FILE python3 tests/integration/valgrind_load.py

The second test does the same over HTTPS (server_tls, an admin listener):
requests and streams, a stream held while SIGHUP replaces the certificate,
refused handshakes (plain HTTP, garbage, a half ClientHello left), then
SIGTERM.

The third runs a clustered gateway against a hostile Redis over rediss://
(fake_redis.py with TLS): bad pushes, a reply no command asked for, a
protocol error, an array of 2 billion elements (each drops the connection,
which comes back), a good message, requests throughout, then SIGTERM (the
leave over a blocking TLS connection). Its report goes to
IG_VALGRIND_LOG.redis. A fourth, prefill/decode pairs in both engines'
protocols with a prefill server killed and a pair in flight at SIGTERM,
to IG_VALGRIND_LOG.pd.

Passes when every good request is answered 200, the last stream ends with
[DONE], and valgrind exits 0 (no memory error, no definitely lost block:
--errors-for-leak-kinds=definite --error-exitcode=1). valgrind's own report
goes to IG_VALGRIND_LOG, where sanitize.sh reads the summary from."""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

from harness import binary, free_port, run, start, start_sim, test


def read_to_end(s, until=None):
    """What s receives until the peer closes, a hang guard ends it (30 s
    without a byte), or `until` is in it; s is closed."""
    s.settimeout(30)
    out = b""
    try:
        while not (until and until in out):
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError, ssl.SSLError):
        pass
    s.close()
    return out


def request(port, raw):
    """Sends raw bytes, reads until the gateway closes (30 s hang guard)."""
    s = socket.create_connection(("127.0.0.1", port), 30)
    s.sendall(raw)
    return read_to_end(s)


def keyed(raw, key=b"vg-key"):
    """raw with an Authorization header after its request line."""
    line, sep, rest = raw.partition(b"\r\n")
    return line + sep + b"Authorization: Bearer " + key + b"\r\n" + rest if sep else raw


def post(path, body, close=True, key=b"vg-key"):
    b = json.dumps(body).encode()
    return keyed(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
                 % (path, b"Connection: close\r\n" if close else b"", len(b), b), key)


def keys_file():
    import hashlib
    path = tempfile.mktemp(prefix="ig-valgrind-keys-", suffix=".json")
    with open(path, "w") as f:
        json.dump({"keys": [{"name": "load", "sha256": hashlib.sha256(b"vg-key").hexdigest(), "rpm": 100000,
                             "tpm": 100000000},
                            {"name": "small", "sha256": hashlib.sha256(b"vg-small").hexdigest(), "rpm": 3,
                             "models": ["sim-model"]}]}, f)
    return path


BAD = [b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\n{bad",
       b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
       b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
       b"GET /health/backends HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
       b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
       b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
       b"GARBAGE\r\n\r\n"]


def body_of(resp):
    return json.loads(resp.partition(b"\r\n\r\n")[2] or b"null")


def batch_of(gp, lines, key=b"vg-key"):
    """Uploads lines (multipart) and creates a batch of them: its id."""
    data = b"".join(json.dumps(o).encode() + b"\n" for o in lines)
    bnd = b"vgboundary"
    body = (b"--%s\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--%s\r\n"
            b"Content-Disposition: form-data; name=\"file\"; filename=\"b.jsonl\"\r\n\r\n%s\r\n--%s--\r\n"
            % (bnd, bnd, data, bnd))
    f = body_of(request(gp, keyed(b"POST /v1/files HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                  b"Content-Type: multipart/form-data; boundary=%s\r\nContent-Length: %d\r\n\r\n%s"
                                  % (bnd, len(body), body), key)))
    b = body_of(request(gp, post(b"/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                  "completion_window": "24h"}, key=key)))
    return b["id"]


def batch_status(gp, bid):
    return body_of(request(gp, keyed(b"GET /v1/batches/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                                     % bid.encode())))


@test
def gateway_under_valgrind_load_disconnects_sigterm():
    if not shutil.which("valgrind"):
        raise AssertionError("valgrind is not installed (apt-get install -y valgrind)")
    log = os.environ.get("IG_VALGRIND_LOG") or tempfile.mktemp(prefix="ig-valgrind-", suffix=".log")
    # 16 slots each, stated in their load reports: the batch running at SIGTERM keeps about 36 in
    # flight (with the default 256 it would hold all 300 lines, which valgrind's pace cannot
    # finish within the 5 s grace)
    paced = start_sim("--tokens-per-second", "200", "--ttft-ms", "0", "--max-running", "16")
    unpaced = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--max-running", "16")
    gp = free_port()
    vg = start(["valgrind", "--leak-check=full", "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
                "--error-exitcode=1", "--num-callers=30", f"--log-file={log}",
                binary("infergate"), "--listen", f"127.0.0.1:{gp}", "--backend", paced.url,
                "--data-dir", tempfile.mkdtemp(prefix="ig-valgrind-data-"),
                "--backend", unpaced.url, "--health-interval-ms", "200", "--shutdown-grace-s", "5",
                "--api-keys-file", keys_file(), "--max-connections-per-ip", "8", "--client-header-timeout-s", "2",
                "--trusted-proxies", "127.0.0.2/32"],
               port=gp, timeout=120)
    time.sleep(1)   # both backends probed healthy (rise 2 at 200 ms)
    ok = 0
    msg = {"model": "sim-model", "max_tokens": 8}
    for i in range(150):
        r = request(gp, post(b"/v1/chat/completions", dict(msg, messages=[{"role": "user", "content": f"q{i}"}])))
        ok += r.startswith(b"HTTP/1.1 200")
    for i in range(100):
        r = request(gp, post(b"/v1/completions", {"model": "sim-model", "prompt": f"s{i}", "max_tokens": 6, "stream": True}))
        ok += r.startswith(b"HTTP/1.1 200") and b"[DONE]" in r and b'"usage"' not in r
    for raw in BAD * 10:
        request(gp, keyed(raw))
    limited = sum(request(gp, post(b"/v1/chat/completions", dict(msg, messages=[{"role": "user", "content": "x"}]),
                                   key=b"vg-small")).startswith(b"HTTP/1.1 429") for _ in range(6))
    refused = request(gp, post(b"/v1/chat/completions", dict(msg, model="other", messages=[]), key=b"vg-small"))
    assert limited >= 2 and refused.startswith(b"HTTP/1.1 403"), (limited, refused[:200])
    # The Batch API: one batch run to its end, one with a bad line (failed), one cancelled, and
    # one still running at SIGTERM (its answers in flight are written before the exit).
    def chat_line(i, model="sim-model"):
        return {"custom_id": f"b{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": f"b{i}"}]}}
    good = batch_of(gp, [chat_line(i) for i in range(40)])
    bad = batch_of(gp, [chat_line(0), chat_line(1, model="nope")])
    gone = batch_of(gp, [chat_line(i) for i in range(200)])
    request(gp, post(b"/v1/batches/%s/cancel" % gone.encode(), {}))
    # each to its end: the cancelled one is "cancelling" until its lines in flight are answered
    # (its 200 share the simulators' 16 slots each with the good one's 40)
    deadline = time.time() + 60
    ends = []
    while time.time() < deadline:
        ends = [batch_status(gp, b)["status"] for b in (good, bad, gone)]
        if ends[0] == "completed" and ends[2] != "cancelling":
            break
        time.sleep(0.2)
    assert ends == ["completed", "failed", "cancelled"], ends
    batch_of(gp, [chat_line(i) for i in range(300)])
    # Clients that leave mid-stream and mid-request.
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", gp))
        s.sendall(post(b"/v1/completions", {"model": "sim-model", "prompt": f"leave{i}", "max_tokens": 500, "stream": i % 2 == 0},
                       close=False))
        time.sleep(0.05)
        s.close()
    # Clients that close half-way through a request line or a body (let go at once: server.c's
    # watch), the ninth connection of one address (max_connections_per_ip 8: a 429 at accept), a
    # head too slow for client_header_timeout_s (a 408), and requests through a trusted proxy
    # (127.0.0.2) naming their clients in X-Forwarded-For (counted per request under them).
    for i in range(60):
        s = socket.create_connection(("127.0.0.1", gp))
        s.sendall(b"GET /v1/mod" if i % 2 else post(b"/v1/chat/completions", dict(msg, messages=[]))[:150])
        s.close()
    time.sleep(2)
    held = [socket.create_connection(("127.0.0.1", gp)) for _ in range(8)]
    for h in held:
        h.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    time.sleep(0.5)
    over = request(gp, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    late = read_to_end(held[0])
    for h in held[1:]:
        h.close()
    proxied = 0
    for i in range(4):
        p = socket.create_connection(("127.0.0.1", gp), 30, source_address=("127.0.0.2", 0))
        raw = post(b"/v1/chat/completions", dict(msg, messages=[{"role": "user", "content": f"p{i}"}]))
        line, _, rest = raw.partition(b"\r\n")
        p.sendall(line + b"\r\nX-Forwarded-For: 203.0.113.%d, 127.0.0.2\r\n" % i + rest)
        proxied += read_to_end(p).startswith(b"HTTP/1.1 200")
    assert over.startswith(b"HTTP/1.1 429") and late.startswith(b"HTTP/1.1 408") and proxied == 4, \
        (over[:100], late[:100], proxied)
    # One stream still running at SIGTERM: it is let finish.
    s = socket.create_connection(("127.0.0.1", gp))
    s.sendall(post(b"/v1/completions", {"model": "sim-model", "prompt": "last", "max_tokens": 100, "stream": True}))
    time.sleep(0.2)
    os.kill(vg.pid, signal.SIGTERM)
    rest = read_to_end(s)
    rc = vg.wait(120)
    print(f"# {ok} of 250 requests answered 200 under valgrind; last stream finished: {b'[DONE]' in rest}; "
          f"exit {rc}")
    with open(log) as f:
        report = f.read()
    assert "ERROR SUMMARY: 0 errors" in report, report[-3000:]
    assert rc == 0, (rc, report[-3000:])
    assert ok == 250, ok
    assert b"data: [DONE]" in rest, rest[-300:]


def make_certs(d):
    """A CA and two server certificates for 127.0.0.1 it signed (P-256)."""
    def ossl(*a):
        subprocess.run(["openssl", *a], check=True, capture_output=True)
    ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
         "-subj", "/CN=vg ca", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.pem")
    with open(f"{d}/san.cnf", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    for n in ("one", "two"):
        ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=vg",
             "-keyout", f"{d}/{n}.key", "-out", f"{d}/{n}.csr")
        ossl("x509", "-req", "-in", f"{d}/{n}.csr", "-CA", f"{d}/ca.pem", "-CAkey", f"{d}/ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", f"{d}/san.cnf", "-out", f"{d}/{n}.pem")


def tls_request(ctx, port, raw, keep=False):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), 30), server_hostname="127.0.0.1")
    s.settimeout(30)
    s.sendall(raw)
    return s if keep else read_to_end(s)


@test
def https_gateway_under_valgrind_reload_refused_handshakes_sigterm():
    if not shutil.which("valgrind"):
        raise AssertionError("valgrind is not installed (apt-get install -y valgrind)")
    log = (os.environ.get("IG_VALGRIND_LOG") or tempfile.mktemp(prefix="ig-valgrind-", suffix=".log")) + ".tls"
    d = tempfile.mkdtemp(prefix="ig-valgrind-tls-")
    make_certs(d)
    shutil.copy(f"{d}/one.pem", f"{d}/cert.pem")
    shutil.copy(f"{d}/one.key", f"{d}/cert.key")
    sim = start_sim("--tokens-per-second", "50", "--ttft-ms", "0")
    gp, ap = free_port(), free_port()
    vg = start(["valgrind", "--leak-check=full", "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
                "--error-exitcode=1", "--num-callers=30", f"--log-file={log}",
                binary("infergate"), "--listen", f"127.0.0.1:{gp}", "--admin-listen", f"127.0.0.1:{ap}",
                "--backend", sim.url, "--health-interval-ms", "200", "--shutdown-grace-s", "5",
                "--server-tls-cert", f"{d}/cert.pem", "--server-tls-key", f"{d}/cert.key"],
               port=gp, timeout=120)
    time.sleep(1)
    ctx = ssl.create_default_context(cafile=f"{d}/ca.pem")
    ok = 0
    for i in range(40):
        r = tls_request(ctx, gp, post(b"/v1/chat/completions", {"model": "sim-model", "max_tokens": 4,
                                                                "messages": [{"role": "user", "content": f"t{i}"}]},
                                      key=b""))
        ok += r.startswith(b"HTTP/1.1 200")
    held = tls_request(ctx, gp, post(b"/v1/completions", {"model": "sim-model", "prompt": "held", "max_tokens": 100,
                                                          "stream": True}, key=b""), keep=True)
    shutil.copy(f"{d}/two.pem", f"{d}/cert.pem")
    shutil.copy(f"{d}/two.key", f"{d}/cert.key")
    os.kill(vg.pid, signal.SIGHUP)
    time.sleep(1)
    ok += tls_request(ctx, gp, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200")
    ok += tls_request(ctx, ap, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200")
    for raw in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"\x00" * 64):
        request(gp, raw)
    rest = read_to_end(held, until=b"[DONE]")
    os.kill(vg.pid, signal.SIGTERM)
    rc = vg.wait(120)
    print(f"# {ok} of 42 requests answered 200 over HTTPS under valgrind; the stream held over the reload finished: "
          f"{b'[DONE]' in rest}; exit {rc}")
    with open(log) as f:
        report = f.read()
    assert "ERROR SUMMARY: 0 errors" in report, report[-3000:]
    assert rc == 0, (rc, report[-3000:])
    assert ok == 42, ok
    assert b"data: [DONE]" in rest, rest[-300:]


@test
def clustered_gateway_under_valgrind_hostile_redis_over_tls_sigterm():
    if not shutil.which("valgrind"):
        raise AssertionError("valgrind is not installed (apt-get install -y valgrind)")
    from fake_redis import FakeRedis, resp
    log = (os.environ.get("IG_VALGRIND_LOG") or tempfile.mktemp(prefix="ig-valgrind-", suffix=".log")) + ".redis"
    d = tempfile.mkdtemp(prefix="ig-valgrind-redis-")
    make_certs(d)
    fake = FakeRedis(certfile=f"{d}/one.pem", keyfile=f"{d}/one.key")
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gp = free_port()
    vg = start(["valgrind", "--leak-check=full", "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
                "--error-exitcode=1", "--num-callers=30", f"--log-file={log}",
                binary("infergate"), "--listen", f"127.0.0.1:{gp}", "--backend", sim.url,
                "--health-interval-ms", "200", "--cluster-redis", fake.url, "--cluster-name", "vg",
                "--cluster-sync-ms", "1000", "--cluster-redis-tls-ca-file", f"{d}/ca.pem"],
               port=gp, timeout=120)

    def get(path):
        return request(gp, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

    def joined():
        body = get(b"/health/backends").partition(b"\r\n\r\n")[2]
        return b'"joined": true' in body or b'"joined":true' in body

    def bad_total():
        m = get(b"/metrics").decode(errors="replace")
        return sum(float(ln.rsplit(" ", 1)[1]) for ln in m.splitlines()
                   if ln.startswith("infergate_cluster_bad_messages_total{"))

    def wait(pred, what, timeout=60):
        deadline = time.monotonic() + timeout
        while not pred():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)

    def chat():
        return request(gp, post(b"/v1/chat/completions", {"model": "sim-model", "max_tokens": 4,
                                                          "messages": [{"role": "user", "content": "hi"}]},
                                key=b"")).startswith(b"HTTP/1.1 200")

    wait(joined, "joined over TLS")
    wait(lambda: len(fake.subscribed()) == 2, "subscribed")
    ok = chat()
    for push in (resp(["message", 5, "x"]), resp(["message"]), resp([1, "infergate:resp", "x"])):
        fake.push(push)
    wait(lambda: bad_total() == 3, "3 pushes counted")
    n = 3
    for instead, then in ((None, b"+OK\r\n"), (b"!x\r\n", None), (b"*2000000000\r\n", None)):
        fake.script("EVAL", instead=instead, then=then)
        n += 1
        wait(lambda: bad_total() == n, f"{n} bad messages counted")
        wait(joined, "joined again")
        ok += chat()
    fake.push(resp(["message", "infergate:resp", f"other 0 {sim.url} resp_1"]))
    os.kill(vg.pid, signal.SIGTERM)
    rc = vg.wait(120)
    fake.close()
    print(f"# {n} bad messages from a Redis over TLS, {ok} of 4 requests answered 200 under valgrind; exit {rc}")
    with open(log) as f:
        report = f.read()
    assert "ERROR SUMMARY: 0 errors" in report, report[-3000:]
    assert rc == 0, (rc, report[-3000:])
    assert ok == 4, ok



@test
def pd_pairs_under_valgrind_both_engines_a_prefill_killed_sigterm():
    """Prefill/decode pairs (try_pd.c): SGLang's halves at once, vLLM's prefill first, a
    prefill server killed (the pair made again with the other), a hand-over past its deadline,
    SIGTERM with a pair in flight."""
    if not shutil.which("valgrind"):
        raise AssertionError("valgrind is not installed (apt-get install -y valgrind)")
    log = (os.environ.get("IG_VALGRIND_LOG") or tempfile.mktemp(prefix="ig-valgrind-", suffix=".log")) + ".pd"
    kv = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    fast = ("--tokens-per-second", "400", "--ttft-ms", "0")
    sp = [free_port(), free_port()]
    s_pre = [start_sim(*fast, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(p),
                       "--model", "sg") for p in sp]
    s_dec = start_sim(*fast, "--disaggregation-mode", "decode", "--model", "sg")
    v_pre = start_sim(*fast, "--flavor", "vllm", "--kv-transfer-config", kv, "--nixl-side-channel-port",
                      str(free_port()), "--model", "vl")
    v_dec = start_sim(*fast, "--flavor", "vllm", "--kv-transfer-config", kv, "--nixl-side-channel-port",
                      str(free_port()), "--model", "vl")
    cfg = tempfile.NamedTemporaryFile("w", prefix="ig-valgrind-pd-", suffix=".json", delete=False)
    sg, vl = {"engine": "sglang", "models": ["sg"]}, {"engine": "vllm", "models": ["vl"]}
    json.dump({"backends": [dict(sg, url=s_pre[0].url, role="prefill", bootstrap_port=sp[0]),
                            dict(sg, url=s_pre[1].url, role="prefill", bootstrap_port=sp[1]),
                            dict(sg, url=s_dec.url, role="decode"),
                            dict(vl, url=v_pre.url, role="prefill"), dict(vl, url=v_dec.url, role="decode")],
               "pd": {"prefill_policy": "round-robin", "transfer_timeout_ms": 3000}}, cfg)
    cfg.close()
    gp = free_port()
    vg = start(["valgrind", "--leak-check=full", "--show-leak-kinds=definite", "--errors-for-leak-kinds=definite",
                "--error-exitcode=1", "--num-callers=30", f"--log-file={log}",
                binary("infergate"), "--listen", f"127.0.0.1:{gp}", "--config", cfg.name,
                "--health-interval-ms", "200", "--shutdown-grace-s", "5"],
               port=gp, timeout=120)
    deadline = time.monotonic() + 60  # every backend probed healthy and its models read (valgrind's pace)
    while time.monotonic() < deadline:
        h = request(gp, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        if b'"healthy_backends":5' in h.replace(b" ", b""):
            break
        time.sleep(0.2)
    ok = 0
    for i in range(30):
        model = "sg" if i % 2 else "vl"
        stream = i % 3 == 0
        body = {"model": model, "max_tokens": 8, "stream": stream, "messages": [{"role": "user", "content": f"pd {i} " * 20}]}
        if i == 12:
            s_pre[0].send_signal(signal.SIGKILL)  # the SGLang pairs go on with the other prefill server
        r = request(gp, post(b"/v1/chat/completions", body))
        ok += r.startswith(b"HTTP/1.1 200") and (not stream or b"[DONE]" in r)
    # a pair in flight at SIGTERM
    s = socket.create_connection(("127.0.0.1", gp))
    s.sendall(post(b"/v1/chat/completions", {"model": "sg", "max_tokens": 60, "stream": True,
                                             "messages": [{"role": "user", "content": "last pair " * 10}]}))
    time.sleep(0.3)
    os.kill(vg.pid, signal.SIGTERM)
    rest = read_to_end(s)
    rc = vg.wait(120)
    print(f"# {ok} of 30 paired requests answered 200 under valgrind; last pair finished: {b'[DONE]' in rest}; exit {rc}")
    with open(log) as f:
        report = f.read()
    assert "ERROR SUMMARY: 0 errors" in report, report[-3000:]
    assert rc == 0, (rc, report[-3000:])
    assert ok >= 29, ok  # the request that met the killed prefill server may be one
    assert b"data: [DONE]" in rest, rest[-300:]

run()
