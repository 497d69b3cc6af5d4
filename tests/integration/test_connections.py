#!/usr/bin/env python3
"""A closed connection frees its place at once, whatever it was doing; the
head of a request has a deadline of its own; one address can be held to a
number of connections; and X-Forwarded-For is passed on, believed only from
trusted proxies (issue 46, items 2 and 6).

Before, libmicrohttpd 0.9.75 (edge-triggered epoll, a short read taken for
an empty socket) never read the FIN of a client whose last bytes and FIN
came together: 320 connections that sent half a request line and closed
held max_connections 300 in CLOSE_WAIT for client_timeout_s, /health
unanswered, and a SIGTERM waited out its grace for those closed mid-body.
The flood here is the issue's figure: 10,000 such connections in 10 s
against max_connections 300, /health asked every 50 ms from another thread
(its worst time kept) and the gateway's CLOSE_WAIT sockets read from
/proc/net/tcp every 100 ms (the longest any stayed kept)."""

import http.client as httpclient  # (harness.http is the function)
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time

from harness import (Collector, FakeBackend, Dir, assert_openai_error, binary, chat_body, gateway_queue, http, http_json,
                     metric, raw_post, responses, rss_kb, run, sanitized, sim_requests, start_gateway, start_sim,
                     test, wait_until)

HALF_LINE = b"GET /v1/mod"                      # half a request line
BODY_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n" + b'{"model": "sim-model", "messages": [' + b" " * 900)


def close_waits(port):
    """The sockets of the listening port whose client has closed and which
    the gateway has not closed yet (CLOSE_WAIT, accepted or still in the
    kernel's backlog), as (local, remote) address pairs."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "08" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                    out.add((cols[1], cols[2]))
    return out


class Observer:
    """While the with-block runs: GET /health on a new connection every
    50 ms (worst time and failures kept), and the port's CLOSE_WAIT sockets
    every 100 ms (how long the longest-lived one stayed: from the first
    sample that saw it to the last)."""

    def __init__(self, gw, ctx=None):
        self.gw = gw
        self.ctx = ctx                  # an ssl.SSLContext for an HTTPS gateway
        self.worst_health = 0.0
        self.health_n = 0
        self.health_failures = []
        self.longest_close_wait = 0.0
        self.most_close_wait = 0
        self._seen = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._health), threading.Thread(target=self._close_wait)]

    def _health(self):
        while not self._stop.is_set():
            t = time.monotonic()
            try:
                st = self._get_health()
                if st != 200:
                    self.health_failures.append(st)
            except OSError as e:
                self.health_failures.append(repr(e))
            self.worst_health = max(self.worst_health, time.monotonic() - t)
            self.health_n += 1
            self._stop.wait(0.05)

    def _get_health(self):
        if not self.ctx:
            return http("GET", self.gw.url + "/health", timeout=5)[0]
        c = httpclient.HTTPSConnection("127.0.0.1", self.gw.port, timeout=5, context=self.ctx)
        try:
            c.request("GET", "/health")
            return c.getresponse().status
        finally:
            c.close()

    def sample(self):
        now = time.monotonic()
        cur = close_waits(self.gw.port)
        self.most_close_wait = max(self.most_close_wait, len(cur))
        for k in cur:
            self._seen.setdefault(k, now)
            self.longest_close_wait = max(self.longest_close_wait, now - self._seen[k])
        for k in list(self._seen):
            if k not in cur:
                del self._seen[k]
        return cur

    def _close_wait(self):
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.1)

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        time.sleep(1.0)  # a second after the last close: every socket of the flood gone
        self.sample()
        self._stop.set()
        for t in self._threads:
            t.join()

    def report(self, what):
        print(f"# {what}: /health asked {self.health_n} times, worst {self.worst_health * 1000:.0f} ms; "
              f"CLOSE_WAIT at most {self.most_close_wait} at once, the longest-lived seen for "
              f"{self.longest_close_wait * 1000:.0f} ms")
        assert not self.health_failures, self.health_failures[:5]
        assert self.health_n > 0
        assert self.worst_health < 1.0, f"/health took {self.worst_health:.2f} s"
        assert self.longest_close_wait < 1.0, f"a socket stayed in CLOSE_WAIT {self.longest_close_wait:.2f} s"
        left = close_waits(self.gw.port)
        assert not left, f"{len(left)} sockets still in CLOSE_WAIT"


def flood(port, n, seconds, payload, source="127.0.0.1"):
    """n connections over `seconds`, each sending payload and closing (FIN)."""
    t0 = time.monotonic()
    for i in range(n):
        d = t0 + i * seconds / n - time.monotonic()
        if d > 0.002:
            time.sleep(d)
        s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
        s.sendall(payload)
        s.close()
    return time.monotonic() - t0


def metrics_from(gw, source):
    """/metrics asked over a connection from another address (127.0.0.1's
    places may be full)."""
    s = socket.create_connection(("127.0.0.1", gw.port), source_address=(source, 0))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    data, _ = read_until_closed(s, 5)
    return responses(data)[0][2].decode()


def counter_from(gw, source, name):
    return metric(metrics_from(gw, source), name)


def held_connections(text):
    """The client connections the reactors hold, all of them together."""
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("infergate_reactor_connections{"))


def settled(gw):
    """Waits until the gateway holds no client connection but the one asking
    (from 127.0.0.2): the test's earlier ones, closed by the client, are
    closed by the gateway too, and count no more."""
    wait_until(lambda: held_connections(metrics_from(gw, "127.0.0.2")) == 1, timeout=5, what="no connection held")


def conns_held(gw):
    """Client connections the gateway holds but the one asking."""
    return held_connections(http("GET", gw.url + "/metrics")[2].decode()) - 1


def counter(gw, name):
    return metric(http("GET", gw.url + "/metrics")[2], name)


@test
def ten_thousand_half_sent_connections_that_close_hold_nothing():
    """The issue's figure: 10,000 connections in 10 s that each send half a
    request line and close, against max_connections 300 (client_timeout_s
    60, the default): /health answers within a second throughout, and every
    socket is closed within a second of its client's close. Then the same
    for 2,000 that close in the middle of their body. RSS back to where it
    was."""
    sim = start_sim()
    gw = start_gateway([sim], "--max-connections", "300", "--client-timeout-s", "60")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="up")
    for _ in range(20):
        http("GET", gw.url + "/health")
    rss0 = rss_kb(gw.pid)
    with Observer(gw) as obs:
        took = flood(gw.port, 10000, 10.0, HALF_LINE)
    print(f"# 10,000 half request lines closed in {took:.1f} s")
    obs.report("half request lines")
    with Observer(gw) as obs:
        took = flood(gw.port, 2000, 2.0, BODY_HEAD)
    print(f"# 2,000 bodies cut short in {took:.1f} s")
    obs.report("bodies cut short")
    wait_until(lambda: conns_held(gw) == 0, timeout=2, what="no connection held")
    hangups = counter(gw, "infergate_client_hangups_total")
    print(f"# of the 12,000 closes, {hangups:.0f} seen by the hang-up watch (the rest by MHD's own read)")
    # the watch sees about half of them on an idle machine (6,014), 36-43% with other tests beside
    # (2 cores): what matters, every socket closed and nothing held, is asserted above
    assert hangups >= 12000 * 0.2, hangups
    st, _, body = http("POST", gw.url + "/v1/chat/completions", chat_body("still here", max_tokens=3))
    assert st == 200, (st, body)
    time.sleep(0.5)
    rss1 = rss_kb(gw.pid)
    print(f"# gateway RSS {rss0} kB before, {rss1} kB after")
    assert sanitized(gw.pid) or rss1 < rss0 + 16384, (rss0, rss1)
    assert gw.stop() == 0, gw.read_log()[-2000:]  # (under ASan: nothing leaked)


@test
def closed_while_queued_or_streaming_frees_the_queue_and_the_slot():
    """Every backend slot taken by two slow streams: 20 requests wait in the
    gateway's queue and their clients close. The queue empties at once,
    none reaches the backend, their sockets close. Then a stream's client
    closes: the backend sees it go (its running count drops) and the slot
    goes to the request waiting behind it."""
    sim = start_sim("--tokens-per-second", "5", "--ttft-ms", "0", "--output-tokens", "200")
    gw = start_gateway([sim], "--max-connections", "300", "--max-inflight", "2")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="up")
    held = [raw_post(gw.port, chat_body(f"held {i}", stream=True)) for i in range(2)]
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 2, what="2 running")
    aborts0 = counter(gw, "infergate_client_aborts_total")
    with Observer(gw) as obs:
        queued = [raw_post(gw.port, chat_body(f"queued {i}", stream=True)) for i in range(20)]
        wait_until(lambda: gateway_queue(gw) == 20, what="20 queued")
        t = time.monotonic()
        for s in queued:
            s.close()
        wait_until(lambda: gateway_queue(gw) == 0, timeout=5, what="the queue empty")
        emptied = time.monotonic() - t
    print(f"# 20 queued requests whose clients closed: the queue empty after {emptied * 1000:.0f} ms")
    obs.report("closed while queued")
    assert emptied < 1.0, emptied
    assert sim_requests(sim) == 2, sim_requests(sim)
    assert counter(gw, "infergate_client_aborts_total") == aborts0 + 20
    # one more waits behind the two streams; the first stream's client leaves
    waiting = raw_post(gw.port, chat_body("next", max_tokens=2))
    wait_until(lambda: gateway_queue(gw) == 1, what="1 queued")
    t = time.monotonic()
    held[0].close()
    waiting.settimeout(10)
    data = b""
    while not responses(data):
        d = waiting.recv(65536)
        assert d, data
        data += d
    served = time.monotonic() - t
    st, _, body = responses(data)[0]
    assert st == 200, (st, body)
    assert json.loads(body)["choices"][0]["message"]["content"]
    print(f"# a stream's client closed: the request behind it answered {served * 1000:.0f} ms later")
    assert sim_requests(sim) == 3
    # the backend saw the stream go: only the other one runs now
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 1, timeout=5,
               what="the closed stream gone from the backend")
    assert not close_waits(gw.port)
    held[1].close()
    waiting.close()
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 0, timeout=5,
               what="the other stream gone from the backend")


@test
def sigterm_with_closed_half_sent_connections_does_not_wait_out_the_grace():
    """Connections closed mid-body held a request each, and the stop waited
    for them (30 s of grace here); now they are gone before the signal."""
    sim = start_sim()
    gw = start_gateway([sim], "--shutdown-grace-s", "30")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="up")
    flood(gw.port, 100, 0.2, BODY_HEAD)
    flood(gw.port, 100, 0.2, HALF_LINE)
    time.sleep(0.3)
    t = time.monotonic()
    gw.send_signal(signal.SIGTERM)
    rc = gw.wait(60)
    took = time.monotonic() - t
    print(f"# stopped {took * 1000:.0f} ms after SIGTERM (grace 30 s)")
    assert rc == 0, (rc, gw.read_log()[-2000:])
    assert took < 10, took
    assert "0 requests in flight" in gw.read_log(), gw.read_log()[-1500:]


@test
def over_https_the_same_path_holds():
    """The HTTPS listener goes through the same watch: half ClientHellos and
    half requests sent over a finished handshake, then closed, are let go
    at once; a head that stalls after its handshake is closed at the
    deadline (no 408: it would have to go through the TLS session)."""
    d = Dir()
    cert, key = d("cert.pem"), d("key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=30)
    sim = start_sim()
    gw = start_gateway([sim], "--max-connections", "300", "--server-tls-cert", cert, "--server-tls-key", key,
                       "--client-header-timeout-s", "2")
    gw.url = gw.url.replace("http://", "https://")
    ctx = ssl.create_default_context(cafile=cert)
    with Observer(gw, ctx) as obs:
        flood(gw.port, 300, 1.0, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"r" * 40)
        for i in range(300):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", gw.port), timeout=5),
                                server_hostname="127.0.0.1")
            s.sendall(HALF_LINE)
            s.close()
    obs.report("half hellos and half requests over TLS")
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", gw.port)), server_hostname="127.0.0.1")
    t = time.monotonic()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\n")
    s.settimeout(10)
    try:
        got = s.recv(65536)
    except (ConnectionResetError, ssl.SSLError):
        got = b""
    took = time.monotonic() - t
    assert got == b"", got
    assert 1.9 < took < 10, took
    assert counter_tls(gw, ctx, "infergate_client_header_timeouts_total") == 1


def counter_tls(gw, ctx, name):
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", gw.port)), server_hostname="127.0.0.1")
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    data, _ = read_until_closed(s, 5)
    return metric(responses(data)[0][2], name)


def read_until_closed(s, limit=30.0):
    """What the server sent until it closed (or `limit` seconds), and when it closed."""
    s.settimeout(limit)
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except (ConnectionResetError, socket.timeout):
        pass
    return data, time.monotonic()


def trickle(s, piece, t0, limit=15):
    """Sends `piece` every 0.5 s, reading what comes back, until the
    gateway closes or resets the connection (or `limit` s from t0):
    returns what it answered."""
    s.settimeout(0.5)
    data = b""
    while time.monotonic() - t0 < limit:
        try:
            s.sendall(piece)
        except OSError:
            break
        try:
            d = s.recv(65536)
            if not d:
                break
            data += d
        except socket.timeout:
            pass
        except ConnectionResetError:
            break
    return data


@test
def a_request_head_sent_slowly_is_cut_at_the_header_deadline():
    """client_header_timeout_s 2 with client_timeout_s 30: a client that
    sends its headers a byte every half second (never idle long enough for
    the idle timeout) gets a 408 with an OpenAI error at the deadline and is
    closed; one that sends nothing is closed with no answer. A kept-alive
    connection may sit idle past the deadline (only the idle timeout counts
    there) and its next request is served; its next head, sent slowly, is
    cut too."""
    sim = start_sim()
    gw = start_gateway([sim], "--client-header-timeout-s", "2", "--client-timeout-s", "30")
    t0 = time.monotonic()
    slow = socket.create_connection(("127.0.0.1", gw.port))
    mute = socket.create_connection(("127.0.0.1", gw.port))
    slow.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\nX-Slow: ")
    data = trickle(slow, b"a", t0)
    cut = time.monotonic() - t0
    print(f"# a head sent a byte every 0.5 s: cut after {cut:.1f} s")
    st, hdrs, body = responses(data)[0]
    assert st == 408, data
    assert_openai_error(st, json.loads(body), 408)
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert "client_header_timeout_s" in json.loads(body)["error"]["message"]
    assert 1.9 < cut < 10, cut
    got, closed_at = read_until_closed(mute, 10)
    assert got == b"", got
    assert 1.9 < closed_at - t0 < 10, closed_at - t0
    # kept alive: idle 3 s (past the deadline) and still served
    k = socket.create_connection(("127.0.0.1", gw.port))
    k.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
    k.settimeout(5)
    assert responses(k.recv(65536))[0][0] == 200
    time.sleep(3)
    k.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
    assert responses(k.recv(65536))[0][0] == 200
    time.sleep(1.5)  # idle again, then a slow head
    t1 = time.monotonic()
    k.sendall(b"GET /health HTTP/1.1\r\n")
    data = trickle(k, b"X-Slow: a\r\n", t1)
    cut = time.monotonic() - t1
    print(f"# a kept-alive connection's slow second head: cut {cut:.1f} s after its first byte")
    assert responses(data) and responses(data)[0][0] == 408, data
    assert 1.9 < cut < 10, cut
    assert counter(gw, "infergate_client_header_timeouts_total") == 3
    assert http("GET", gw.url + "/health")[0] == 200
    assert gw.stop() == 0, gw.read_log()[-2000:]


def refused_429(data):
    (st, hdrs, body), = responses(data)
    assert st == 429, data
    assert_openai_error(st, json.loads(body), 429)
    assert json.loads(body)["error"]["code"] == "too_many_connections", body
    assert hdrs.get("connection") == "close", hdrs


@test
def max_connections_per_ip_refuses_the_sixth_and_frees_a_place_on_close():
    """max_connections_per_ip 5: five open connections from 127.0.0.1; the
    sixth is answered 429 at once (OpenAI-shaped) and closed, while
    127.0.0.2 still gets in; one of the five closing frees a place."""
    sim = start_sim()
    gw = start_gateway([sim], "--max-connections-per-ip", "5", "--client-header-timeout-s", "60")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="up")
    settled(gw)
    five = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(5)]
    for s in five:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\n")  # half a head: held open
    wait_until(lambda: held_connections(metrics_from(gw, "127.0.0.2")) == 6, timeout=5, what="5 held")
    sixth = socket.create_connection(("127.0.0.1", gw.port))
    sixth.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
    data, _ = read_until_closed(sixth, 5)
    refused_429(data)
    other = socket.create_connection(("127.0.0.1", gw.port), source_address=("127.0.0.2", 0))
    other.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    data, _ = read_until_closed(other, 5)
    assert responses(data)[0][0] == 200, data
    assert counter_from(gw, '127.0.0.2', 'infergate_per_ip_refused_total{stage="accept"}') == 1
    five[0].close()  # its place freed at once
    wait_until(lambda: held_connections(metrics_from(gw, "127.0.0.2")) == 5, timeout=1, what="one of 5 gone")
    again = socket.create_connection(("127.0.0.1", gw.port))
    again.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    data, _ = read_until_closed(again, 5)
    assert responses(data)[0][0] == 200, data
    for s in five[1:]:
        s.close()
    assert gw.stop() == 0, gw.read_log()[-2000:]




def forwarded(fb):
    """The X-Forwarded-For headers of each POST the fake backend received."""
    return [[v for k, v in r["headers"] if k.lower() == "x-forwarded-for"] for r in fb.posts()]


def log_clients(path):
    """The client of each chat completion in the access log."""
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return [e["client"] for e in lines if e["path"] == "/v1/chat/completions"]


def post_from(gw, xff=(), **body):
    headers = [("X-Forwarded-For", v) for v in xff]
    s = raw_post(gw.port, chat_body("hi", max_tokens=2, **body), headers + [("Connection", "close")])
    data, _ = read_until_closed(s, 10)
    return responses(data)[0]


@test
def x_forwarded_for_is_passed_on_and_believed_only_from_trusted_proxies():
    """Untrusted: the backend gets the client's chain with 127.0.0.1 added
    (or 127.0.0.1 alone), the access log and the spans name 127.0.0.1, and
    the per-address cap counts 127.0.0.1 whatever the header says. Trusting
    127.0.0.1/32 (and 10.0.0.0/8, walked past as nginx's real_ip_recursive
    does): the last untrusted address is the client, for the log, the
    spans and the cap (per request at once)."""
    d = Dir()
    fb = FakeBackend()
    col = Collector()
    alog = d("access.log")
    gw = start_gateway([fb], "--access-log", alog, "--tracing-endpoint", col.url + "/v1/traces",
                       "--tracing-schedule-delay-ms", "100")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="up")
    assert post_from(gw)[0] == 200
    assert post_from(gw, ["203.0.113.7"])[0] == 200
    assert post_from(gw, ["203.0.113.7, 10.1.2.3", "198.51.100.9"])[0] == 200
    assert forwarded(fb) == [["127.0.0.1"], ["203.0.113.7, 127.0.0.1"], ["203.0.113.7, 10.1.2.3, 198.51.100.9, 127.0.0.1"]]
    wait_until(lambda: len(log_clients(alog)) >= 3, what="3 log lines")
    assert log_clients(alog) == ["127.0.0.1"] * 3
    wait_until(lambda: len(col.server_spans()) >= 3, what="3 server spans")
    assert [(s["client.address"], s["network.peer.address"]) for s in col.server_spans()] == [("127.0.0.1",) * 2] * 3
    assert gw.stop() == 0, gw.read_log()[-2000:]  # traced: SIGTERM is the gateway's, not the exporter thread's

    # the cap counts the socket's address: a forged header does not get past it
    sim = start_sim("--tokens-per-second", "5", "--ttft-ms", "0", "--output-tokens", "200")
    gw = start_gateway([sim], "--max-connections-per-ip", "2")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="up")
    settled(gw)
    held = [raw_post(gw.port, chat_body("held", stream=True), [("X-Forwarded-For", f"198.51.100.{i}")])
            for i in range(2)]
    wait_until(lambda: sim_requests(sim) == 2, what="2 held")
    s = raw_post(gw.port, chat_body("forged"), [("X-Forwarded-For", "192.0.2.99")])
    data, _ = read_until_closed(s, 5)
    refused_429(data)
    for s in held:
        s.close()
    gw.stop()

    # trusted: the forged address is the client
    alog2 = d("access2.log")
    col2 = Collector()
    gw = start_gateway([sim], "--max-connections-per-ip", "2", "--trusted-proxies", "127.0.0.1/32, 10.0.0.0/8",
                       "--access-log", alog2, "--tracing-endpoint", col2.url + "/v1/traces",
                       "--tracing-schedule-delay-ms", "100")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="up")
    received = sim_requests(sim)
    held = [raw_post(gw.port, chat_body("held", stream=True), [("X-Forwarded-For", "203.0.113.7, 10.9.9.9")])
            for i in range(2)]
    wait_until(lambda: sim_requests(sim) == received + 2, what="2 held for 203.0.113.7")
    st, hdrs, body = post_from(gw, ["203.0.113.7"])  # a third at once from the same client: refused
    assert st == 429, (st, body)
    assert_openai_error(st, json.loads(body), 429)
    assert json.loads(body)["error"]["code"] == "too_many_connections"
    assert post_from(gw, ["1.1.1.1, 198.51.100.9, 10.1.2.3"])[0] == 200  # another client: served
    assert counter(gw, 'infergate_per_ip_refused_total{stage="request"}') == 1
    for s in held:
        s.close()
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 0, what="held gone")
    assert post_from(gw, ["203.0.113.7"])[0] == 200  # its places back
    wait_until(lambda: len(log_clients(alog2)) >= 5, what="5 log lines")
    clients = log_clients(alog2)
    assert sorted(clients) == sorted(["203.0.113.7"] * 4 + ["198.51.100.9"]), clients
    wait_until(lambda: len(col2.server_spans()) >= 4, what="the spans")
    spans = {(s["client.address"], s["network.peer.address"]) for s in col2.server_spans()}
    assert spans == {("203.0.113.7", "127.0.0.1"), ("198.51.100.9", "127.0.0.1")}, spans


@test
def a_bad_trusted_proxies_entry_stops_the_start_naming_it():
    sim = start_sim()
    for value in ("10.0.0.0/33", "10.0.0.300", "fd00::/129", "127.0.0.1:80", "proxy.example"):
        t = time.monotonic()
        p = subprocess.run([binary("infergate"), "--backend", sim.url, "--listen", "127.0.0.1:0",
                            "--trusted-proxies", f"127.0.0.1, {value}"], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, (value, p.returncode, p.stderr)
        assert "trusted_proxies" in p.stderr and f"'{value}'" in p.stderr, (value, p.stderr)
        assert time.monotonic() - t < 1.0, value
    d = Dir()
    cfg = d("gw.json")
    with open(cfg, "w") as f:
        json.dump({"backends": [sim.url], "trusted_proxies": ["10.0.0.0/8", "::1", "192.168.1.0/24x"]}, f)
    p = subprocess.run([binary("infergate"), "--config", cfg, "--check-config"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 2 and "trusted_proxies" in p.stderr and "'192.168.1.0/24x'" in p.stderr, p.stderr
    with open(cfg, "w") as f:
        json.dump({"backends": [sim.url], "trusted_proxies": ["10.1.2.3/8", "::ffff:192.0.2.0/120", "fd00::1"]}, f)
    p = subprocess.run([binary("infergate"), "--config", cfg, "--check-config"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["trusted_proxies"] == ["10.0.0.0/8", "192.0.2.0/24", "fd00::1/128"], p.stdout


run()
