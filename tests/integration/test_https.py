"""HTTPS on the gateway's own listener (server_tls): certificates this test
makes with the openssl command line, clients that verify them (curl, Python's
ssl, the official `openai` npm client with NODE_EXTRA_CA_CERTS), mutual TLS
(server_tls.client_ca_file), SIGHUP replacing the certificate under 500 held
streams, a bad certificate at reload keeping the running one, hostile bytes
and stalled handshakes on the TLS port, settings that cannot work refused at
start naming their key, the admin listener (admin_listen) with and without
TLS, and the Batch API with TLS on."""

import http.client
import json
import os
import random
import re
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import types

from harness import (BOUNDARY, Dir, assert_openai_error, binary, bulk, chat_body, ensure_openai, exchange, free_port,
                     ids, lines, multipart, rss_kb, run, run_client, sanitized, sim_requests, sse_events,
                     start_gateway, start_sim, stateful_backend, test, wait_listening, wait_until)

FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")

# `openssl ca`, for certificates whose validity starts and ends in the past
# (openssl 3.0's x509 -req has no -not_before/-not_after).
CA_CNF = """[ca]
default_ca = d
[d]
database = db/index.txt
new_certs_dir = db
serial = db/serial
default_md = sha256
policy = p
copy_extensions = none
unique_subject = no
[p]
commonName = supplied
[ext]
subjectAltName = IP:127.0.0.1
"""


class Certs:
    """A CA with a server certificate for 127.0.0.1 (serial 0x1001) and a
    client certificate it signed, and another CA with a client certificate of
    its own. More are made on demand (leaf, expired)."""

    SERVER_SERIAL = 0x1001

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ig-https-")
        for ca in ("ca", "other-ca"):
            self.ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=test {ca}",
                     "-keyout", self(f"{ca}.key"), "-out", self(f"{ca}.pem"))
        with open(self("san.cnf"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        self.leaf("server", serial=self.SERVER_SERIAL)
        self.leaf("client", serial=0x1002)
        self.leaf("stranger", ca="other-ca", serial=0x1003)

    def __call__(self, name):
        return os.path.join(self.dir, name)

    def ssl(self, *args, cwd=None):
        p = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=cwd, timeout=30)
        assert p.returncode == 0, (args, p.stderr)

    def leaf(self, name, ca="ca", serial=None, days=2, key=None):
        """NAME.pem signed by ca, for 127.0.0.1, with a new key NAME.key (or
        the existing key file `key`)."""
        if key:
            self.ssl("req", "-new", "-key", key, "-subj", f"/CN={name}", "-out", self(f"{name}.csr"))
        else:
            self.ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", self(f"{name}.key"),
                     "-out", self(f"{name}.csr"))
        self.ssl("x509", "-req", "-in", self(f"{name}.csr"), "-CA", self(f"{ca}.pem"), "-CAkey", self(f"{ca}.key"),
                 "-set_serial", str(serial or 0x3000 + len(os.listdir(self.dir))), "-days", str(days),
                 "-extfile", self("san.cnf"), "-out", self(f"{name}.pem"))
        return self(f"{name}.pem"), key or self(f"{name}.key")

    def expired(self, name):
        """NAME.pem (key NAME.key) signed by the CA, valid 1 to 2 January 2020."""
        db = self("db")
        os.makedirs(db, exist_ok=True)
        open(os.path.join(db, "index.txt"), "a").close()
        with open(os.path.join(db, "serial"), "w") as f:
            f.write("%04X\n" % (0x4000 + len(os.listdir(db))))
        with open(self("ca.cnf"), "w") as f:
            f.write(CA_CNF)
        self.ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", self(f"{name}.key"),
                 "-out", self(f"{name}.csr"))
        self.ssl("ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in", f"{name}.csr",
                 "-out", f"{name}.pem", "-startdate", "20200101000000Z", "-enddate", "20200102000000Z",
                 "-extensions", "ext", "-notext", cwd=self.dir)
        return self(f"{name}.pem"), self(f"{name}.key")

    def flags(self, cert="server.pem", key="server.key"):
        return ["--server-tls-cert", self(cert), "--server-tls-key", self(key)]

    def ctx(self, client=None):
        """A client context that trusts the CA only; with client="client" it
        shows client.pem."""
        ctx = ssl.create_default_context(cafile=self("ca.pem"))
        if client:
            ctx.load_cert_chain(self(f"{client}.pem"), self(f"{client}.key"))
        return ctx

    def __del__(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def install(src_cert, src_key, cert, key):
    """Replaces the files at cert and key by copies of src_cert and src_key,
    each renamed into place (a reader sees the old file or the new, whole)."""
    for src, dst in ((src_cert, cert), (src_key, key)):
        shutil.copyfile(src, dst + ".tmp")
        os.replace(dst + ".tmp", dst)


def https(method, port, path, body=None, headers=None, ctx=None, timeout=30.0):
    """One HTTPS request to 127.0.0.1:port: (status, lower-cased headers, body bytes)."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    hdrs = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        hdrs.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def https_json(method, port, path, body=None, headers=None, ctx=None, timeout=30.0):
    st, hdrs, data = https(method, port, path, body, headers, ctx, timeout)
    try:
        return st, hdrs, json.loads(data) if data else None
    except ValueError:
        raise AssertionError(f"{method} {path}: {st} with a body that is not JSON: {data[:200]!r}")


def plain(method, port, path, body=None, headers=None, timeout=30.0):
    """One plain HTTP request (harness.http without the URL)."""
    from harness import http
    return http(method, f"http://127.0.0.1:{port}{path}", body, headers, timeout)


def quietly(fn):
    """fn() or None when it raises (for wait_until while a server starts)."""
    try:
        return fn()
    except (OSError, ssl.SSLError, http.client.HTTPException, AssertionError, ValueError):
        return None


def wait_healthy(port, ctx, n=1, timeout=10):
    wait_until(lambda: quietly(lambda: https_json("GET", port, "/health", ctx=ctx, timeout=5)[2]
                               ["healthy_backends"] >= n), timeout=timeout, what=f"{n} healthy backends over https")


def peer(port, ctx, timeout=5):
    """The certificate 127.0.0.1:port shows (verified against ctx): getpeercert()'s dict."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert()


def serial(port, ctx):
    return int(peer(port, ctx)["serialNumber"], 16)


def cert_serial(path):
    p = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-serial"], capture_output=True, text=True)
    return int(p.stdout.strip().split("=", 1)[1], 16)


def cert_not_after(path):
    p = subprocess.run(["openssl", "x509", "-in", path, "-noout", "-enddate"], capture_output=True, text=True)
    return ssl.cert_time_to_seconds(p.stdout.strip().split("=", 1)[1])


def msum(text, name, **labels):
    """The sum of the samples of metric `name` whose labels include `labels`
    (other labels, e.g. a listener's, are summed over); None when it has none."""
    if isinstance(text, bytes):
        text = text.decode()
    total = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, val = line.rpartition(" ")
        if key != name and not key.startswith(name + "{"):
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', key[len(name):]))
        if all(have.get(k) == v for k, v in labels.items()):
            total = (total or 0) + float(val)
    return total


def metrics(port, ctx):
    st, _, text = https("GET", port, "/metrics", ctx=ctx)
    assert st == 200, (st, text[:300])
    return text.decode()


def handshakes(port, ctx, result):
    return msum(metrics(port, ctx), "infergate_tls_handshakes_total", result=result) or 0


def refused(port, ctx):
    """Connections closed before their handshake ended: after a ClientHello
    (failed) or before one (not_tls)."""
    return handshakes(port, ctx, "failed") + handshakes(port, ctx, "not_tls")


def curl(*args, timeout=30):
    return subprocess.run(["curl", "-sS", "--max-time", "20", *args], capture_output=True, text=True, timeout=timeout)


def chat_ok(port, ctx, prompt="still there?"):
    st, _, obj = https_json("POST", port, "/v1/chat/completions", chat_body(prompt, max_tokens=4), ctx=ctx)
    assert st == 200 and obj["choices"][0]["message"]["content"], (st, obj)


def stream_tokens(sse_body):
    """(content tokens, usage.completion_tokens or None, last event) of an SSE body."""
    events = sse_events(sse_body)
    n, usage = 0, None
    for e in events:
        if e == "[DONE]":
            continue
        o = json.loads(e)
        if o.get("usage"):
            usage = o["usage"]["completion_tokens"]
        for ch in o.get("choices", []):
            if (ch.get("delta") or {}).get("content"):
                n += 1
    return n, usage, events[-1] if events else None


def dechunk(body):
    """The payload of a chunked body (as far as it is whole)."""
    out = b""
    while body:
        line, sep, rest = body.partition(b"\r\n")
        if not sep:
            break
        n = int(line.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out += rest[:n]
        body = rest[n + 2:]
    return out


def split_response(raw):
    """(status, lower-cased headers, payload) of one raw HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        body = dechunk(body)
    return status, hdrs, body


def client_hello():
    """The bytes of a real TLS ClientHello (Python's, for 127.0.0.1)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()
    assert hello[:1] == b"\x16" and len(hello) > 100, hello[:20]
    return hello


def stops_clean(gw):
    """SIGTERM: the gateway exits 0 (with sanitizers: nothing leaked, e.g. a
    replaced certificate's credentials)."""
    rc = gw.stop()
    log = gw.read_log()
    assert rc == 0 and "Sanitizer" not in log, (rc, log[-3000:])


def write_config(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


# ------------------------------------------------------------------ serving

@test
def curl_over_https_chat_and_stream_plain_http_refused_and_the_handshake_counters_move():
    c = Certs()
    sim = start_sim("--tokens-per-second", "500", "--ttft-ms", "5")
    gw = start_gateway([sim], *c.flags())
    ctx = c.ctx()
    wait_healthy(gw.port, ctx)
    base = f"https://127.0.0.1:{gw.port}"
    assert serial(gw.port, ctx) == Certs.SERVER_SERIAL
    m0 = metrics(gw.port, ctx)
    ok0 = msum(m0, "infergate_tls_handshakes_total", result="ok")
    failed0 = msum(m0, "infergate_tls_handshakes_total", result="failed") or 0
    not_tls0 = msum(m0, "infergate_tls_handshakes_total", result="not_tls") or 0
    assert ok0, [ln for ln in m0.splitlines() if "tls" in ln]

    body = ["-H", "Content-Type: application/json", "-d"]
    p = curl("--cacert", c("ca.pem"), *body, json.dumps(chat_body("hello", max_tokens=12)),
             base + "/v1/chat/completions")
    assert p.returncode == 0, p.stderr
    obj = json.loads(p.stdout)
    assert obj["object"] == "chat.completion" and obj["choices"][0]["message"]["content"], obj
    assert obj["usage"]["completion_tokens"] == 12, obj
    p = curl("--cacert", c("ca.pem"), "-N", *body,
             json.dumps(chat_body("hello", max_tokens=12, stream=True, stream_options={"include_usage": True})),
             base + "/v1/chat/completions")
    assert p.returncode == 0, p.stderr
    n, usage, last = stream_tokens(p.stdout.encode())
    assert (n, usage, last) == (12, 12, "[DONE]"), (n, usage, last, p.stdout[-300:])
    p = curl("--cacert", c("ca.pem"), "-o", "/dev/null", "-w", "%{http_code}", base + "/health")
    assert p.returncode == 0 and p.stdout == "200", (p.returncode, p.stdout, p.stderr)
    ok1 = handshakes(gw.port, ctx, "ok")
    assert ok1 >= ok0 + 3, (ok0, ok1)

    # Not verified without the CA (the certificate is the one configured, not a default)
    p = curl("-o", "/dev/null", base + "/health")
    assert p.returncode == 60, (p.returncode, p.stderr)
    # Plain HTTP to the TLS port: no HTTP answer at all
    p = curl("-o", "/dev/null", "-w", "%{http_code}", f"http://127.0.0.1:{gw.port}/health")
    assert p.returncode != 0 and p.stdout == "000", (p.returncode, p.stdout, p.stderr)
    data, closed = exchange(gw.port, b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n", wait=3.0, until_close=True)
    assert closed and not data.startswith(b"HTTP/"), data[:200]
    wait_until(lambda: handshakes(gw.port, ctx, "failed") >= failed0 + 1, timeout=5,
               what="a failed handshake counted (curl without the CA: a ClientHello, then it left)")
    wait_until(lambda: handshakes(gw.port, ctx, "not_tls") >= not_tls0 + 2, timeout=5,
               what="2 connections that were not TLS counted (plain HTTP)")

    # Session tickets: a client that comes back with its session resumes (no full handshake)
    def health_on(session=None):
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    b = s.recv(4096)
                    if not b:
                        break
                    data += b
                assert data.startswith(b"HTTP/1.1 200"), data[:100]
                return s.session, s.session_reused
    first, reused = health_on()
    assert not reused
    assert health_on(first)[1], "a session offered again was not resumed (session tickets)"

    # TLS 1.2 and 1.3 are served, 1.1 not (the client allows it: SECLEVEL=0)
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        cx = c.ctx()
        cx.minimum_version = cx.maximum_version = version
        with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as raw:
            with cx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                assert s.version() == version.name.replace("v1_", "v1."), s.version()
    p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{gw.port}", "-tls1_1", "-cipher",
                        "DEFAULT@SECLEVEL=0"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    assert "Cipher is (NONE)" in p.stdout, p.stdout[-800:]
    chat_ok(gw.port, ctx)

    # server_tls.priorities: TLS 1.3 only
    stops_clean(gw)
    gw = start_gateway([sim], *c.flags(), "--server-tls-priorities", "NORMAL:-VERS-ALL:+VERS-TLS1.3")
    wait_healthy(gw.port, ctx)
    cx = c.ctx()
    cx.maximum_version = ssl.TLSVersion.TLSv1_2
    try:
        peer(gw.port, cx)
        raise AssertionError("a TLS 1.2 client was served with priorities NORMAL:-VERS-ALL:+VERS-TLS1.3")
    except (ssl.SSLError, ConnectionResetError):
        pass
    cx = c.ctx()
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as raw:
        with cx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.version() == "TLSv1.3", s.version()


@test
def official_openai_client_over_https_with_node_extra_ca_certs():
    ensure_openai()    # before any process starts: npm may take a while the first time
    c = Certs()
    d = Dir()
    sim = start_sim("--model", "sim-model", "--tokens-per-second", "500", "--ttft-ms", "5")
    fb = stateful_backend()      # model m: the Responses API's stored-response routes
    gw = start_gateway([sim, fb], *c.flags(), "--data-dir", d("data"), "--health-interval-ms", "200")
    ctx = c.ctx()
    wait_healthy(gw.port, ctx, n=2)
    target = types.SimpleNamespace(url=f"https://127.0.0.1:{gw.port}")
    env = {"NODE_EXTRA_CA_CERTS": c("ca.pem")}

    out = run_client(target, "sim-model", env=env)
    assert out["chat"]["object"] == "chat.completion" and out["chat"]["content"], out
    assert out["chat"]["usage"]["completion_tokens"] == 12, out
    assert out["stream"]["text"] and out["stream"]["chunks"] >= 12, out
    assert out["stream"]["usage"]["completion_tokens"] == 12, out
    assert out["completion"]["usage"]["completion_tokens"] == 7, out
    assert "sim-model" in out["models"], out
    assert out["error"] == {"status": 400, "name": "BadRequestError"}, out

    out = run_client(target, "m", "responses", "1", env=env)
    assert out["plain"]["status"] == "completed" and out["plain"]["text"] == "Hi there", out
    assert out["stream"]["types"] == ["response.created", "response.completed"], out
    assert out["stream"]["usage"]["output_tokens"] == 7, out
    assert [f["backend"] for f in out["follow"]] == [fb.url], out
    assert out["stored"]["id"] == out["plain"]["id"] and out["stored"]["gone"]["status"] == 404, out
    assert out["embeddings"]["n"] == 2, out

    with open(d("c.jsonl"), "w") as f:
        for i in range(5):
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": chat_body(f"q{i}", model="sim-model")}) + "\n")
    out = run_client(target, "sim-model", "files", d("c.jsonl"), env=env)
    f = out["file"]
    assert f["object"] == "file" and f["purpose"] == "batch" and f["bytes"] == os.path.getsize(d("c.jsonl")), out
    assert out["same"] and f["id"] in out["listed"] and out["content_equal"] and out["gone"] == 404, out

    # Without the CA the client refuses the gateway's certificate
    p = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "openai_client.cjs"),
                        target.url, "sim-model"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "NODE_PATH": ensure_openai()})
    assert p.returncode != 0 and "certificate" in p.stderr.lower(), (p.returncode, p.stderr[-1500:])


@test
def mutual_tls_needs_a_client_certificate_signed_by_the_client_ca():
    c = Certs()
    sim = start_sim(*FAST)
    gw = start_gateway([sim], *c.flags(), "--server-tls-client-ca", c("ca.pem"))
    mctx = c.ctx(client="client")
    wait_healthy(gw.port, mctx)
    base = f"https://127.0.0.1:{gw.port}"
    failed0 = handshakes(gw.port, mctx, "failed")
    body = ["-H", "Content-Type: application/json", "-d", json.dumps(chat_body("hi", max_tokens=4)),
            base + "/v1/chat/completions"]
    # with the client certificate
    p = curl("--cacert", c("ca.pem"), "--cert", c("client.pem"), "--key", c("client.key"), *body)
    assert p.returncode == 0 and json.loads(p.stdout)["choices"], (p.returncode, p.stdout, p.stderr)
    # without one, and with one another CA signed: no HTTP answer
    for who, extra in (("no certificate", []),
                       ("another CA's", ["--cert", c("stranger.pem"), "--key", c("stranger.key")])):
        p = curl("--cacert", c("ca.pem"), "-w", "%{http_code}", *extra, *body)
        assert p.returncode != 0 and p.stdout.endswith("000") and "choices" not in p.stdout, \
            (who, p.returncode, p.stdout, p.stderr)
    # the same with Python's ssl
    for who, cx in (("no certificate", c.ctx()), ("another CA's", c.ctx(client="stranger"))):
        try:
            st = https("GET", gw.port, "/health", ctx=cx, timeout=5)[0]
            raise AssertionError(f"{who}: answered {st}")
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
            pass
    chat_ok(gw.port, mctx)
    wait_until(lambda: handshakes(gw.port, mctx, "failed") >= failed0 + 4, timeout=5,
               what="the 4 refused clients counted as failed handshakes")
    stops_clean(gw)


# ------------------------------------------------------------------ reloads

def stream_bytes(tokens):
    body = json.dumps(chat_body("hold on", max_tokens=tokens, stream=True,
                                stream_options={"include_usage": True})).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


class Streams:
    """TLS sockets read on a selector until each one's `data: [DONE]` (or a
    close): .got[sock] = [raw bytes, time of the first byte, time of the end]."""

    def __init__(self, socks):
        self.sel = selectors.DefaultSelector()
        self.got = {}
        for s in socks:
            s.setblocking(False)
            self.got[s] = [b"", None, None]
            self.sel.register(s, selectors.EVENT_READ)
        self.left = len(socks)

    def pump(self, until):
        """Reads until every socket ended or until() is true (or 0.2 s passes without a byte)."""
        while self.left and not until():
            for key, _ in self.sel.select(timeout=0.2):
                s = key.fileobj
                g = self.got[s]
                end = False
                while True:        # drain what TLS has decrypted as well as the socket
                    try:
                        d = s.recv(65536)
                    except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                        break
                    except (ssl.SSLError, OSError):
                        d = b""
                    if not d:
                        end = True
                        break
                    if g[1] is None:
                        g[1] = time.monotonic()
                    g[0] += d
                    if b"data: [DONE]" in g[0]:
                        end = True
                        break
                if end:
                    g[2] = time.monotonic()
                    self.sel.unregister(s)
                    s.close()
                    self.left -= 1

    def close(self):
        for s, g in self.got.items():
            if g[2] is None:
                s.close()
        self.sel.close()


@test
def sighup_replaces_the_certificate_while_500_streams_go_on():
    c = Certs()
    tokens = 15
    sim = start_sim("--tokens-per-second", "1", "--ttft-ms", "0", "--max-running", "1000")
    cert, key = c("live.pem"), c("live.key")
    install(c("server.pem"), c("server.key"), cert, key)
    gw = start_gateway([sim], *c.flags("live.pem", "live.key"), "--health-interval-ms", "200")
    ctx = c.ctx()
    wait_healthy(gw.port, ctx)
    assert serial(gw.port, ctx) == Certs.SERVER_SERIAL
    new_cert, new_key = c.leaf("next", serial=0x2002, days=5)
    # a keep-alive connection opened before the reload
    keep = http.client.HTTPSConnection("127.0.0.1", gw.port, context=ctx, timeout=30)
    keep.request("GET", "/health")
    assert keep.getresponse().read() and int(keep.sock.getpeercert()["serialNumber"], 16) == Certs.SERVER_SERIAL

    req = stream_bytes(tokens)
    socks = []
    t0 = time.monotonic()
    for _ in range(500):
        raw = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(req)
        socks.append(s)
    opened = time.monotonic() - t0
    streams = Streams(socks)
    try:
        # every stream under way (its first event arrived) before the certificate changes
        streams.pump(lambda: all(g[1] is not None and b"data: {" in g[0] for g in streams.got.values())
                     or time.monotonic() - t0 > 30)
        begun = sum(1 for g in streams.got.values() if b"data: {" in g[0])
        assert begun == 500 and streams.left == 500, (begun, streams.left, opened)
        install(new_cert, new_key, cert, key)
        t_hup = time.monotonic()
        gw.send_signal(signal.SIGHUP)
        # new connections: the new certificate (read between pumps, the streams keep flowing)
        seen = None
        while time.monotonic() - t_hup < 10:
            seen = serial(gw.port, ctx)
            if seen == 0x2002:
                break
            streams.pump(lambda t=time.monotonic(): time.monotonic() - t > 0.1)
        assert seen == 0x2002, hex(seen)
        t_new = time.monotonic() - t_hup
        chat_ok(gw.port, ctx)
        # the connection from before the reload: still served, on its old session
        keep.request("GET", "/health")
        r = keep.getresponse()
        assert r.status == 200 and r.read(), r.status
        assert int(keep.sock.getpeercert()["serialNumber"], 16) == Certs.SERVER_SERIAL
        keep.close()
        streams.pump(lambda: time.monotonic() - t0 > 60)
    finally:
        streams.close()
    bad = []
    for s, (raw, first, end) in streams.got.items():
        st, hdrs, payload = split_response(raw)
        n, usage, last = stream_tokens(payload) if st == 200 else (0, None, None)
        if end is None or end < t_hup or (st, n, usage, last) != (200, tokens, tokens, "[DONE]"):
            bad.append((st, n, usage, last, end and round(end - t_hup, 1), raw[-200:]))
    print(f"# 500 TLS streams opened in {opened:.1f}s; new certificate served {t_new:.2f}s after SIGHUP; "
          f"{500 - len(bad)} whole")
    assert not bad, (len(bad), bad[:3])
    m = metrics(gw.port, ctx)
    assert msum(m, "infergate_tls_certificate_reloads_total", result="ok") == 1, \
        [ln for ln in m.splitlines() if "tls" in ln]
    assert msum(m, "infergate_tls_certificate_reloads_total", result="failed") == 0, m
    assert msum(m, "infergate_tls_certificate_expiry_timestamp_seconds") == cert_not_after(new_cert), \
        ([ln for ln in m.splitlines() if "expiry" in ln], cert_not_after(new_cert))
    stops_clean(gw)


@test
def a_bad_certificate_at_reload_keeps_the_running_one():
    """Four bad replacements in turn, each SIGHUP logged naming server_tls,
    counted failed, the running certificate still served; then a good one.
    Both ways a gateway can be started: flags only, and a configuration file
    (where SIGHUP re-reads the whole file)."""
    c = Certs()
    sim = start_sim(*FAST)
    other_cert, other_key = c.leaf("other", serial=0x2003)
    exp_cert, exp_key = c.expired("old")
    expiry = cert_not_after(c("server.pem"))
    cases = [
        ("not PEM", c("san.cnf"), c("server.key")),
        ("not the certificate's key", other_cert, c("server.key")),
        ("expired", exp_cert, exp_key),
        ("empty key", c("server.pem"), os.devnull),
    ]
    failures = []      # what the metrics say (the rest fails at once)
    for form in ("flags", "config"):
        cert, key = c(f"live-{form}.pem"), c(f"live-{form}.key")
        install(c("server.pem"), c("server.key"), cert, key)
        if form == "flags":
            gw = start_gateway([sim], "--server-tls-cert", cert, "--server-tls-key", key)
        else:
            cfg = write_config(c("gw.json"), {"server_tls": {"cert_file": cert, "key_file": key}})
            gw = start_gateway([sim], config=cfg)
        ctx = c.ctx()
        wait_healthy(gw.port, ctx)
        assert serial(gw.port, ctx) == Certs.SERVER_SERIAL
        m = metrics(gw.port, ctx)
        assert msum(m, "infergate_tls_certificate_expiry_timestamp_seconds") == expiry, \
            [ln for ln in m.splitlines() if "tls" in ln]
        for i, (what, src_cert, src_key) in enumerate(cases, 1):
            log0 = len(gw.read_log())
            install(src_cert, src_key, cert, key)
            gw.send_signal(signal.SIGHUP)
            wait_until(lambda: "server_tls" in gw.read_log()[log0:], timeout=10,
                       what=f"{form}: the reload with a certificate {what} logged naming server_tls")
            assert serial(gw.port, ctx) == Certs.SERVER_SERIAL, (form, what)
            chat_ok(gw.port, ctx)
            m = metrics(gw.port, ctx)
            assert msum(m, "infergate_tls_certificate_expiry_timestamp_seconds") == expiry, (form, what)
            failed = msum(m, "infergate_tls_certificate_reloads_total", result="failed")
            if failed != i:
                failures.append(f"{form}: after the reload with a certificate {what} (logged: "
                                f"{gw.read_log()[log0:].strip()!r}) infergate_tls_certificate_reloads_total"
                                f"{{result=\"failed\"}} is {failed}, want {i}")
        # and a good one after them all
        install(other_cert, other_key, cert, key)
        gw.send_signal(signal.SIGHUP)
        wait_until(lambda: quietly(lambda: serial(gw.port, ctx)) == 0x2003, timeout=10,
                   what=f"{form}: the new certificate served")
        chat_ok(gw.port, ctx)
        m = metrics(gw.port, ctx)
        ok = msum(m, "infergate_tls_certificate_reloads_total", result="ok")
        if ok != 1:
            failures.append(f"{form}: after a good reload infergate_tls_certificate_reloads_total{{result=\"ok\"}} "
                            f"is {ok}, want 1")
        assert msum(m, "infergate_tls_certificate_expiry_timestamp_seconds") == cert_not_after(other_cert), form
        stops_clean(gw)
    assert not failures, "\n".join(failures)


@test
def rapid_reloads_while_clients_connect():
    """40 SIGHUPs in a row, the certificate swapped between two each time,
    while four clients connect and ask without pause: every handshake ends
    with one of the two certificates, every request is answered, and a
    keep-alive connection from before them all is still served after."""
    c = Certs()
    sim = start_sim(*FAST)
    first = (c("server.pem"), c("server.key"))
    second = c.leaf("next", serial=0x2002)
    cert, key = c("live.pem"), c("live.key")
    install(*first, cert, key)
    gw = start_gateway([sim], *c.flags("live.pem", "live.key"))
    ctx = c.ctx()
    wait_healthy(gw.port, ctx)
    keep = http.client.HTTPSConnection("127.0.0.1", gw.port, context=ctx, timeout=30)
    keep.request("GET", "/health")
    assert keep.getresponse().read()
    stop = threading.Event()
    results, errors = [], []
    body = json.dumps(chat_body("swap", max_tokens=2))

    def client():
        while not stop.is_set():
            conn = http.client.HTTPSConnection("127.0.0.1", gw.port, context=ctx, timeout=10)
            try:
                conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                results.append((r.status, int(conn.sock.getpeercert()["serialNumber"], 16)))
            except Exception as e:
                errors.append(repr(e))
            finally:
                conn.close()
    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for i in range(40):
            install(*(second if i % 2 == 0 else first), cert, key)
            gw.send_signal(signal.SIGHUP)
            wait_until(lambda: msum(metrics(gw.port, ctx), "infergate_tls_certificate_reloads_total",
                                    result="ok") == i + 1, timeout=10, interval=0.01, what=f"reload {i + 1} applied")
            time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join()
    print(f"# {len(results)} requests over 40 reloads")
    assert not errors, (len(errors), errors[:3])
    assert all(st == 200 for st, _ in results), [r for r in results if r[0] != 200][:5]
    assert {sn for _, sn in results} == {Certs.SERVER_SERIAL, 0x2002}, {sn for _, sn in results}
    assert msum(metrics(gw.port, ctx), "infergate_tls_certificate_reloads_total", result="failed") == 0
    keep.request("GET", "/health")
    r = keep.getresponse()
    assert r.status == 200 and r.read() and int(keep.sock.getpeercert()["serialNumber"], 16) == Certs.SERVER_SERIAL
    keep.close()
    stops_clean(gw)


# ------------------------------------------------------------------ hostile

@test
def hostile_bytes_and_stalled_handshakes_on_the_tls_port_then_normal_service():
    c = Certs()
    sim = start_sim(*FAST)
    gw = start_gateway([sim], *c.flags(), "--client-timeout-s", "5")
    ctx = c.ctx()
    wait_healthy(gw.port, ctx)
    plain_gw = start_gateway([sim])
    hello = client_hello()

    # A ClientHello to a plain port: an HTTP 400 or a close, and it still serves
    data, closed = exchange(plain_gw.port, hello, wait=3.0, until_close=True)
    assert closed or data.startswith(b"HTTP/1.1 400"), data[:200]
    st, _, obj = plain("POST", plain_gw.port, "/v1/chat/completions", chat_body("hi", max_tokens=2))
    assert st == 200, (st, obj)

    for _ in range(20):
        chat_ok(gw.port, ctx)
    time.sleep(0.3)
    rss0 = rss_kb(gw.pid)
    failed0 = refused(gw.port, ctx)

    # Plain HTTP and garbage: closed, no HTTP answer. (Not any garbage: what
    # starts like a record header, TLS's or SSL 2's, that declares more bytes
    # than are sent is waited for, up to the client timeout, as a stall.)
    for data_in in (b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n", b"\x00\xff" + random.Random(7).randbytes(1998),
                    b"\x16\x03\x01\xff\xff" + random.Random(8).randbytes(200)):
        data, closed = exchange(gw.port, data_in, wait=3.0, until_close=True)
        assert closed and b"HTTP/" not in data, (data_in[:20], data[:100])

    # 3,000 bad connections, 100 at a time, closed without reading
    corrupt = bytearray(hello)
    corrupt[len(corrupt) // 2:len(corrupt) // 2 + 16] = os.urandom(16)
    junk = [b"GET /v1/models HTTP/1.1\r\nHost: gw\r\n\r\n",            # plain HTTP
            None,                                                       # random bytes
            bytes(corrupt),                                             # a damaged ClientHello
            b"\x16\x03\x03\x40\x00" + os.urandom(64),                   # a record cut short
            hello[:len(hello) // 2],                                    # half a ClientHello
            hello]                                                      # a whole one, then gone
    t0 = time.monotonic()
    n = 0
    while n < 3000 and time.monotonic() - t0 < 30:
        batch = []
        for j in range(100):
            s = socket.create_connection(("127.0.0.1", gw.port))
            k = junk[(n + j) % len(junk)]
            try:
                s.sendall(k if k is not None else os.urandom(1 + (n + j) % 3000))
            except OSError:
                pass
            batch.append(s)
        for s in batch:
            s.close()
        n += len(batch)
    took = time.monotonic() - t0

    # 200 handshakes stalled after half a ClientHello: the others are served meanwhile
    # (while every stalled one is still open), and the client timeout (5 s) closes them
    held = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", gw.port))
        s.sendall(hello[:len(hello) // 2])
        held.append(s)
    t_held = time.monotonic()
    try:
        for _ in range(10):
            chat_ok(gw.port, ctx)
        sel = selectors.DefaultSelector()
        for s in held:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        early = sel.select(timeout=0)
        assert not early, f"{len(early)} stalled handshakes closed within {time.monotonic() - t_held:.1f}s"
        open_ = set(held)
        while open_ and time.monotonic() - t_held < 20:
            for key, _ in sel.select(timeout=0.5):
                try:
                    d = key.fileobj.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    d = b""
                if not d:
                    sel.unregister(key.fileobj)
                    open_.discard(key.fileobj)
        sel.close()
        closed_after = time.monotonic() - t_held
        assert not open_, f"{len(open_)} of 200 stalled handshakes still open after {closed_after:.1f}s"
    finally:
        for s in held:
            s.close()

    time.sleep(0.5)
    for _ in range(20):
        chat_ok(gw.port, ctx)
    failed1 = refused(gw.port, ctx)
    rss1 = rss_kb(gw.pid)
    print(f"# {n} bad connections in {took:.1f}s; stalled handshakes closed after {closed_after:.1f}s; "
          f"refused (failed + not_tls) {failed0} -> {failed1}; RSS {rss0} kB -> {rss1} kB")
    # every bad connection (the 3 alone, the n, the 200 stalled) closed before its handshake ended
    assert failed1 - failed0 >= 3 + n + 200, (failed0, failed1, n)
    assert sanitized(gw.pid) or rss1 < rss0 + 16384, (rss0, rss1)
    stops_clean(gw)
    stops_clean(plain_gw)


# ------------------------------------------------------------------ settings

@test
def settings_that_cannot_work_exit_2_naming_the_key():
    c = Certs()
    exp_cert, exp_key = c.expired("old")
    c.leaf("other", serial=0x2004)
    os.makedirs(c("a-dir"))
    cert, key, ca = c("server.pem"), c("server.key"), c("ca.pem")
    cases = [   # (what, server_tls, the key the message must name)
        ("cert missing", {"cert_file": c("missing.pem"), "key_file": key}, "server_tls.cert_file"),
        ("cert not PEM", {"cert_file": c("san.cnf"), "key_file": key}, "server_tls.cert_file"),
        ("cert a key", {"cert_file": key, "key_file": key}, "server_tls.cert_file"),
        ("cert a directory", {"cert_file": c("a-dir"), "key_file": key}, "server_tls.cert_file"),
        ("cert expired", {"cert_file": exp_cert, "key_file": exp_key}, "server_tls.cert_file"),
        ("key missing", {"cert_file": cert, "key_file": c("missing.key")}, "server_tls.key_file"),
        ("key not PEM", {"cert_file": cert, "key_file": c("san.cnf")}, "server_tls.key_file"),
        ("key of another certificate", {"cert_file": cert, "key_file": c("other.key")}, "server_tls.key_file"),
        ("cert without key", {"cert_file": cert}, "server_tls.key_file"),
        ("key without cert", {"key_file": key}, "server_tls.cert_file"),
        ("client CA missing", {"cert_file": cert, "key_file": key, "client_ca_file": c("missing-ca.pem")},
         "server_tls.client_ca_file"),
        ("client CA not PEM", {"cert_file": cert, "key_file": key, "client_ca_file": c("san.cnf")},
         "server_tls.client_ca_file"),
        ("bad priorities", {"cert_file": cert, "key_file": key, "priorities": "NORMAL:+NO-SUCH-THING"},
         "server_tls.priorities"),
        ("client CA without cert", {"client_ca_file": ca}, "server_tls.cert_file"),
    ]
    flag_of = {"cert_file": "--server-tls-cert", "key_file": "--server-tls-key",
               "client_ca_file": "--server-tls-client-ca", "priorities": "--server-tls-priorities"}
    failures = []
    for what, tls, want in cases:
        flags = [a for k, v in tls.items() for a in (flag_of[k], v)]
        cfg = write_config(c("bad.json"), {"server_tls": tls})
        for form, args in (("flags", flags), ("flags --check-config", flags + ["--check-config"]),
                           ("config", ["--config", cfg]),
                           ("config --check-config", ["--config", cfg, "--check-config"])):
            try:
                p = subprocess.run([binary("infergate"), "--listen", f"127.0.0.1:{free_port()}", "--backend",
                                    "http://127.0.0.1:9", *args], capture_output=True, text=True, timeout=10)
            except subprocess.TimeoutExpired:
                failures.append(f"{what} ({form}): still running after 10 s")
                continue
            if p.returncode != 2 or want not in p.stderr:
                failures.append(f"{what} ({form}): exit {p.returncode}, want 2 naming {want}; stderr: "
                                f"{p.stderr.strip()[-300:]!r}")
    assert not failures, "\n".join(failures)
    # what works passes the check
    for args in (c.flags(), c.flags() + ["--server-tls-client-ca", ca, "--server-tls-priorities", "NORMAL"]):
        p = subprocess.run([binary("infergate"), "--backend", "http://127.0.0.1:9", "--check-config", *args],
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 0, (args, p.returncode, p.stderr)


# ------------------------------------------------------------------ admin_listen

ADMIN_SECRET = "admin-secret"
ADMIN = {"Authorization": f"Bearer {ADMIN_SECRET}"}


def check_admin_split(public, admin):
    """public(method, path, body, headers) and admin(...) make one request
    each way: (status, headers, body bytes)."""
    failures = []
    chat = chat_body("hi", max_tokens=2)
    for path in ("/admin/backends", "/metrics", "/", "/status", "/status/history"):
        st, _, data = public("GET", path, None, ADMIN)
        try:
            assert_openai_error(st, json.loads(data), 404)
        except (AssertionError, ValueError) as e:
            failures.append(f"public GET {path}: want an OpenAI-shaped 404, got {st} {data[:120]!r} ({e})")
        st, hdrs, data = admin("GET", path, None, ADMIN)
        if st != 200:
            failures.append(f"admin GET {path}: {st} {data[:120]!r}")
        elif path == "/metrics" and b"infergate_" not in data:
            failures.append(f"admin GET /metrics: {data[:120]!r}")
        elif path in ("/", "/status") and "text/html" not in hdrs.get("content-type", ""):
            failures.append(f"admin GET {path}: content-type {hdrs.get('content-type')}")
    for path in ("/health", "/health/backends", "/health/capacity"):
        for name, fn in (("public", public), ("admin", admin)):
            st, _, data = fn("GET", path, None, None)
            if st != 200 or not json.loads(data):
                failures.append(f"{name} GET {path}: {st} {data[:120]!r}")
    st, _, data = public("POST", "/v1/chat/completions", chat, None)
    if st != 200:
        failures.append(f"public POST /v1/chat/completions: {st} {data[:200]!r}")
    for method, path, body in (("POST", "/v1/chat/completions", chat),
                               ("POST", "/v1/completions", {"model": "sim-model", "prompt": "a"}),
                               ("POST", "/v1/embeddings", {"model": "sim-model", "input": "a"})):
        st, _, data = admin(method, path, body, None)
        try:
            assert_openai_error(st, json.loads(data), 404)
        except (AssertionError, ValueError) as e:
            failures.append(f"admin {method} {path}: want an OpenAI-shaped 404, got {st} {data[:120]!r} ({e})")
    assert not failures, "\n".join(failures)


def admin_keys(path):
    import hashlib
    with open(path, "w") as f:
        f.write(hashlib.sha256(ADMIN_SECRET.encode()).hexdigest() + "\n")
    return path


@test
def admin_listen_serves_admin_metrics_and_status_apart_plain_and_with_tls():
    c = Certs()
    sim = start_sim(*FAST)
    keys = admin_keys(c("admin.keys"))
    # plain, with flags
    aport = free_port()
    gw = start_gateway([sim], "--admin-listen", f"127.0.0.1:{aport}", "--admin-keys-file", keys)
    wait_listening(aport, proc=gw)
    wait_until(lambda: quietly(lambda: plain("GET", gw.port, "/health")[0] == 200 and
                               json.loads(plain("GET", gw.port, "/health")[2])["healthy_backends"] == 1),
               timeout=10, what="healthy")
    check_admin_split(lambda m, p, b, h: plain(m, gw.port, p, b, h),
                      lambda m, p, b, h: plain(m, aport, p, b, h))
    stops_clean(gw)

    # TLS on both, from a configuration file
    aport = free_port()
    cfg = write_config(c("gw.json"), {"server_tls": {"cert_file": c("server.pem"), "key_file": c("server.key")},
                                      "admin_listen": f"127.0.0.1:{aport}", "admin_keys_file": keys})
    gw = start_gateway([sim], config=cfg)
    wait_listening(aport, proc=gw)
    ctx = c.ctx()
    wait_healthy(gw.port, ctx)
    assert serial(aport, ctx) == Certs.SERVER_SERIAL
    check_admin_split(lambda m, p, b, h: https(m, gw.port, p, b, h, ctx=ctx),
                      lambda m, p, b, h: https(m, aport, p, b, h, ctx=ctx))
    data, closed = exchange(aport, b"GET /metrics HTTP/1.1\r\nHost: gw\r\n\r\n", wait=3.0, until_close=True)
    assert closed and not data.startswith(b"HTTP/"), data[:200]
    # the handshake counters count the admin listener's too: visible on /metrics there
    assert msum(metrics(aport, ctx), "infergate_tls_handshakes_total", result="not_tls") >= 1


# ------------------------------------------------------------------ batches

@test
def a_batch_completes_with_tls_and_client_certificates_on():
    """A batch's lines reach the gateway by a way of their own (they show no
    client certificate): with HTTPS and client certificates required on the
    listener, a batch still completes, and that way is open to no one else."""
    c = Certs()
    d = Dir()
    sim = start_sim("--model", "m", "--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "8")
    gw = start_gateway([sim], *c.flags(), "--server-tls-client-ca", c("ca.pem"), "--data-dir", d("data"))
    ctx = c.ctx(client="client")
    wait_healthy(gw.port, ctx)
    n = 20
    corpus = "".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                 "body": chat_body(f"question {i}", model="m")}) + "\n" for i in range(n)).encode()
    st, _, f = https_json("POST", gw.port, "/v1/files", multipart({"purpose": "batch"}, "c.jsonl", corpus),
                          headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}, ctx=ctx)
    assert st == 200 and f["id"], (st, f)
    st, _, b = https_json("POST", gw.port, "/v1/batches", {"input_file_id": f["id"], "completion_window": "24h",
                                                          "endpoint": "/v1/chat/completions"}, ctx=ctx)
    assert st == 200 and b["status"] == "validating", (st, b)
    got = {}

    def ended():
        got["b"] = https_json("GET", gw.port, f"/v1/batches/{b['id']}", ctx=ctx)[2]
        return got["b"]["status"] in ("completed", "failed", "expired", "cancelled")
    wait_until(ended, timeout=60, interval=0.2, what="the batch ended")
    b = got["b"]
    assert b["status"] == "completed" and b["request_counts"] == {"total": n, "completed": n, "failed": 0}, b
    st, _, raw = https("GET", gw.port, f"/v1/files/{b['output_file_id']}/content", ctx=ctx)
    assert st == 200, (st, raw[:300])
    out = [json.loads(x) for x in raw.decode().splitlines()]
    assert sorted(o["custom_id"] for o in out) == sorted(f"r{i}" for i in range(n)), out[:2]
    assert all(o["response"]["status_code"] == 200 and o["response"]["body"]["choices"] for o in out), out[:2]
    assert sim_requests(sim) >= n
    # the gateway's own sockets in data_dir: only its user may open them
    for root, dirs, files in os.walk(d("data")):
        for name in dirs + files:
            st_ = os.lstat(os.path.join(root, name))
            if (st_.st_mode & 0o170000) == 0o140000:   # a socket
                assert st_.st_mode & 0o077 == 0, (name, oct(st_.st_mode))
    stops_clean(gw)


@test
def infergate_bulk_and_submit_over_https_with_client_certificates():
    """The bulk client with --cacert, --cert and --key against a gateway that
    asks for client certificates: every line once; without --cert it stops
    before sending (exit 2, the server named); a CA file that cannot be read
    is refused at start, naming the flag."""
    c = Certs()
    sim = start_sim(*FAST)
    d = tempfile.mkdtemp(prefix="ig-https-bulk-")
    gw = start_gateway([sim], *c.flags(), "--server-tls-client-ca", c("ca.pem"), "--data-dir", d + "/data")
    wait_healthy(gw.port, c.ctx(client="client"))
    url = f"https://127.0.0.1:{gw.port}"
    rc, _, err = bulk("generate", "--count", 300, "--model", "sim-model", "--output", d + "/c.jsonl")
    assert rc == 0, err
    tls = ["--cacert", c("ca.pem"), "--cert", c("client.pem"), "--key", c("client.key")]
    rc, out, err = bulk("--input", d + "/c.jsonl", "--output", d + "/out.jsonl", "--url", url, *tls)
    assert rc == 0, err[-2000:]
    got = ids(d + "/out.jsonl")
    assert len(got) == 300 and len(set(got)) == 300, (len(got), len(set(got)))
    rc, out, err = bulk("submit", "--input", d + "/c.jsonl", "--output", d + "/sub.jsonl", "--url", url,
                        "--poll-s", "1", *tls)
    assert rc == 0, err[-2000:]
    assert sorted(ids(d + "/sub.jsonl")) == sorted(got), len(ids(d + "/sub.jsonl"))
    rc, out, err = bulk("--input", d + "/c.jsonl", "--output", d + "/no-cert.jsonl", "--url", url,
                        "--cacert", c("ca.pem"))
    assert rc == 2 and "preflight failed, nothing was sent" in err and url in err, (rc, err[-1000:])
    assert not os.path.exists(d + "/no-cert.jsonl") or not lines(d + "/no-cert.jsonl")
    rc, out, err = bulk("--input", d + "/c.jsonl", "--output", d + "/x.jsonl", "--url", url,
                        "--cacert", d + "/missing.pem")
    assert rc == 2 and "--cacert: '" + d + "/missing.pem': No such file or directory" in err, (rc, err)
    gw.send_signal(signal.SIGTERM)
    assert gw.wait(15) == 0
    shutil.rmtree(d, ignore_errors=True)


run()
