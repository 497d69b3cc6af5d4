"""More than one reactor (`workers`): each a thread with its own event loop,
libmicrohttpd daemons and curl multi handle; reactor 0 accepts and hands each
client to the reactor holding the fewest connections. What a user would
notice: clients spread over the reactors (their /metrics series), every
answer whole, one queue in one order whichever reactor holds a request, the
admin API answering from every reactor, a stop that lets every reactor's
streams end, and a bad `workers` refused at start."""

import hashlib
import http.client as httpclient
import json
import os
import signal
import tempfile
import threading
import time

from harness import (written_lines, chat_body, http, http_json, metric, raw_post, run, sse_events, start_gateway, start_sim, test,
                     wait_until)


def reactor_counts(gw, name, n):
    """The series of each reactor; the connection that asks counts in
    infergate_reactor_connections, and in its _total."""
    text = http("GET", gw.url + "/metrics")[2]
    return [int(metric(text, f'{name}{{reactor="{i}"}}')) for i in range(n)]


def check_answer(stream, status, body, max_tokens):
    """A whole answer: JSON with max_tokens tokens of usage, or a stream whose
    content chunks number max_tokens and that ends with [DONE]."""
    assert status == 200, (status, body[:200])
    if stream:
        events = sse_events(body)
        assert events and events[-1] == "[DONE]", body[-200:]
        chunks = [json.loads(e) for e in events[:-1]]
        content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
        assert len(content) == max_tokens, (len(content), body[:300])
    else:
        obj = json.loads(body)
        assert obj["usage"]["completion_tokens"] == max_tokens and obj["choices"][0]["message"]["content"], obj


def clients_share_the_reactors(workers):
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim], "--workers", str(workers))
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    nconn, per_conn = 24 * workers, 4
    before = reactor_counts(gw, "infergate_reactor_connections_total", workers)
    conns = []
    for _ in range(nconn):                     # all open at once: the hand-out is by fewest held
        c = httpclient.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        c.connect()
        conns.append(c)
    wait_until(lambda: sum(reactor_counts(gw, "infergate_reactor_connections", workers)) >= nconn + 1,
               timeout=10, what="every connection given to a reactor")
    errors = []

    def client(i):
        try:
            for k in range(per_conn):
                stream = (i + k) % 2 == 0
                body = json.dumps(chat_body(f"client {i} request {k}", max_tokens=3 + k, stream=stream))
                conns[i].request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                r = conns[i].getresponse()
                check_answer(stream, r.status, r.read(), 3 + k)
        except Exception as e:  # noqa: BLE001 - reported below, with the client's number
            errors.append((i, repr(e)))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(nconn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    given = [a - b for a, b in zip(reactor_counts(gw, "infergate_reactor_connections_total", workers), before)]
    served = reactor_counts(gw, "infergate_reactor_requests_total", workers)
    # nconn clients, and the few /metrics polls made while they were taken
    assert sum(given) >= nconn and min(given) >= nconn // workers - 2, given
    assert sum(served) == nconn * per_conn and min(served) >= (nconn // workers - 1) * per_conn, served
    for c in conns:
        c.close()
    st, _, state = http_json("GET", sim.url + "/sim/state")
    assert state["requests_received"] == nconn * per_conn, state


@test
def two_reactors_share_the_clients_and_every_answer_is_whole():
    clients_share_the_reactors(2)


@test
def three_reactors_on_two_cores_do_the_same():
    clients_share_the_reactors(3)


def read_all(s, deadline):
    """Everything until the gateway closes (the requests say Connection: close)."""
    out = b""
    while True:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        d = s.recv(65536)
        if not d:
            return out
        out += d


@test
def one_queue_in_one_order_whichever_reactor_holds_the_request():
    """One backend slot: twelve requests, each on its own connection, wait in
    the gateway's queue and go out in the order they came, each started by
    the reactor that holds its client. The first is held at the backend
    (POST /sim/hold) until all twelve wait, and the test asks the gateway on
    one kept-open connection and lets each new client in only once the
    gateway counts the one before: the hand-out to the reactor with the
    fewest connections is then exact, 7 connections each, the test's own
    among them."""
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    d = tempfile.mkdtemp(prefix="ig-workers-")
    log = os.path.join(d, "access.log")
    gw = start_gateway([sim], "--workers", "2", "--max-inflight", "1", "--access-log", log)
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    ask = httpclient.HTTPConnection("127.0.0.1", gw.port, timeout=10)

    def scrape():
        ask.request("GET", "/metrics")
        r = ask.getresponse()
        assert r.status == 200, r.status
        text = r.read()
        conns = [int(metric(text, f'infergate_reactor_connections{{reactor="{i}"}}')) for i in range(2)]
        return conns, metric(text, "infergate_queue_depth")
    wait_until(lambda: sum(scrape()[0]) == 1, timeout=10, what="the test's own connection alone")
    mine = scrape()[0].index(1)                  # the reactor that holds the test's connection
    assert http_json("POST", sim.url + "/sim/hold", {"after_tokens": 1})[0] == 200
    socks = [raw_post(gw.port, chat_body("first", max_tokens=40), [("X-Request-Id", "first"), ("Connection", "close")])]
    wait_until(lambda: http_json("GET", sim.url + "/sim/hold")[2]["held"] == 1, timeout=10,
               what="the first request held at the backend")
    ids = [f"q{i:02d}" for i in range(12)]

    def settled(n):                              # n queued, each client counted: + the first, + ours
        conns, depth = scrape()
        return depth == n and sum(conns) == n + 2
    for i, rid in enumerate(ids):
        socks.append(raw_post(gw.port, chat_body(rid, max_tokens=2), [("X-Request-Id", rid), ("Connection", "close")]))
        wait_until(lambda: settled(i + 1), timeout=10, what=f"{rid} queued and its connection counted")
    conns = scrape()[0]
    assert conns == [7, 7], conns                # fewest first: 14 connections, even
    assert http_json("POST", sim.url + "/sim/hold", {"after_tokens": None})[0] == 200
    deadline = time.monotonic() + 60
    answers = [read_all(s, deadline) for s in socks]
    for s in socks:
        s.close()
    for a in answers:
        assert a.startswith(b"HTTP/1.1 200"), a[:200]
        check_answer(False, 200, a.split(b"\r\n\r\n", 1)[1], 40 if b"X-Request-Id: first" in a else 2)

    def sent():
        return [o for o in written_lines(log) if o.get("dispatch") is not None]
    wait_until(lambda: len(sent()) == 13, timeout=10, what="13 requests logged")
    order = [x["request_id"] for x in sorted(sent(), key=lambda x: x["dispatch"])]
    assert order == ["first"] + ids, order
    # Each reactor started the requests of the clients it held: 6 beside the test's own
    # connection, 7 on the other.
    ask.close()
    served = reactor_counts(gw, "infergate_reactor_requests_total", 2)
    assert served[mine] == 6 and served[1 - mine] == 7, (served, mine)


@test
def admin_calls_are_answered_from_every_reactor():
    """The admin API acts on reactor 0's control plane; a call that reaches
    another reactor is answered all the same (drain, then enable)."""
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    d = tempfile.mkdtemp(prefix="ig-workers-")
    keys = os.path.join(d, "admin.keys")
    with open(keys, "w") as f:
        f.write(hashlib.sha256(b"admin-secret").hexdigest() + "\n")
    gw = start_gateway([sim], "--workers", "2", "--admin-keys-file", keys)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, timeout=10, what="up")
    auth = {"Authorization": "Bearer admin-secret"}
    conns = [httpclient.HTTPConnection("127.0.0.1", gw.port, timeout=10) for _ in range(2)]
    for c in conns:   # both open: one to each reactor
        c.connect()
    wait_until(lambda: sorted(reactor_counts(gw, "infergate_reactor_connections", 2)) == [1, 2], timeout=10,
               what="one connection on each reactor (and the one asking)")
    for c in conns:
        for path, want in (("/admin/backends/0/drain", "draining"), ("/admin/backends/0/enable", "enabled")):
            c.request("POST", path, b"", auth)
            r = c.getresponse()
            obj = json.loads(r.read())
            assert r.status == 200 and obj["admin"] == want, (path, r.status, obj)
        c.request("GET", "/admin/backends", headers=auth)
        r = c.getresponse()
        assert r.status == 200 and len(json.loads(r.read())["backends"]) == 1
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("after", max_tokens=2))
    assert st == 200 and obj["usage"]["completion_tokens"] == 2, (st, obj)


@test
def a_stop_lets_every_reactors_streams_end_whole():
    sim = start_sim("--tokens-per-second", "10", "--ttft-ms", "0")
    gw = start_gateway([sim], "--workers", "2", "--shutdown-grace-s", "30")
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    socks = [raw_post(gw.port, chat_body(f"s{i}", max_tokens=15, stream=True)) for i in range(6)]  # 1.5 s each
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["requests_received"] == 6, timeout=10,
               what="6 streams at the backend")
    assert sorted(reactor_counts(gw, "infergate_reactor_connections", 2)) == [3, 4]  # and the one asking
    gw.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for s in socks:
        data = b""
        s.settimeout(max(0.1, deadline - time.monotonic()))
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
            if b"data: [DONE]" in data:
                break
        s.close()
        assert data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in data, data[-300:]
        assert data.count(b'"content":"') >= 15, data[-300:]
    assert gw.wait(20) == 0, gw.read_log()[-2000:]
    assert "stopped" in gw.read_log()


@test
def a_bad_workers_value_is_refused_at_start():
    for bad in ("65", "-1", "two"):
        p = start_gateway([], "--workers", bad, wait=False)
        assert p.wait(10) == 2, bad
        log = p.read_log()
        assert "--workers" in log and bad in log, log
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim], "--workers", "1")
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    assert reactor_counts(gw, "infergate_reactor_connections_total", 1)[0] >= 1
    assert "infergate_reactor_connections_total{reactor=\"1\"}" not in http("GET", gw.url + "/metrics")[2].decode()
    assert http_json("GET", gw.url + "/health/backends")[2]["gateway"]["reactors"] == 1


run()
