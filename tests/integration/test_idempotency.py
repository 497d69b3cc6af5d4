"""Idempotency-Key: a POST that names one runs once per API key and value. A duplicate while it
runs follows the same bytes, one after it gets the kept answer; a client whose connection broke
after it sent the POST retries and is answered without a second run; the official `openai` npm
client (which sends the header on every POST and keeps it across its retries) through a TCP relay
that cuts its first connection. What is asserted: the requests the backends received, the bytes
and headers the clients got, status codes."""

import json
import os
import socket
import threading
import time

import subprocess

from harness import (FakeBackend, Dir, chat_body, ensure_openai, http, http_json, keys_file, metric, run, run_client,
                     sse_events, start_clustered, start_gateway, start_redis, start_sim, test, wait_cluster,
                     wait_until)

PACED = ("--tokens-per-second", "40", "--ttft-ms", "0", "--output-tokens", "400", "--seed", "3")


def sim_requests(sim):
    _, _, text = http("GET", sim.url + "/metrics")
    for line in text.decode().splitlines():
        if line.startswith("sglang:num_requests_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def sim_aborted(sim):
    _, _, text = http("GET", sim.url + "/metrics")
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.decode().splitlines()
               if l.startswith("infergate_sim_requests_aborted_total{"))


def idem_counts(gw):
    _, _, text = http("GET", gw.url + "/metrics")
    return {o: metric(text, f'infergate_idempotency_requests_total{{outcome="{o}"}}')
            for o in ("ran", "joined", "replayed", "conflict")}


def post(gw, body, key, headers=None, timeout=60):
    h = {"Idempotency-Key": key, **(headers or {})}
    return http("POST", gw.url + "/v1/chat/completions", body, headers=h, timeout=timeout)


def failing_backend(statuses):
    """A FakeBackend that answers its POSTs with the statuses popped from the list while it has
    some (after 0.6 s for a body that says "slowly"), and like a small OpenAI server after."""
    def handler(fb, req, sock):
        if req["method"] == "POST" and statuses:
            if b"slowly" in req["body"]:
                time.sleep(0.6)
            FakeBackend.reply(sock, statuses.pop(), {"error": {"message": "boom", "type": "server_error", "code": 500}})
            return True
        return FakeBackend.answer_ok(fb, req, sock)
    return FakeBackend(handler)


def answer_and_its_replay(gw1, gw2, fb, body, key, kept=lambda: True):
    """body with key through gw1, then (once kept() says its answer is kept) again through
    gw2: the same bytes and Content-Type, the second replayed, the backend asked once."""
    st1, h1, b1 = post(gw1, body, key)
    wait_until(kept, timeout=5, what="the answer kept")
    st2, h2, b2 = post(gw2, body, key)
    assert (st1, st2) == (200, 200) and b1 == b2, (st1, st2, b1, b2)
    assert "idempotent-replayed" not in h1 and h2["idempotent-replayed"] == "true", (h1, h2)
    assert h2["content-type"] == h1["content-type"], (h1, h2)
    assert len(fb.posts()) == 1, fb.posts()


@test
def a_duplicate_after_the_answer_gets_the_same_bytes_and_runs_nothing():
    fb = FakeBackend()
    gw = start_gateway([fb])
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="healthy")
    body = chat_body("only once", max_tokens=5)
    answer_and_its_replay(gw, gw, fb, body, "key-1")
    # Another value runs again; no header is as before.
    assert post(gw, body, "key-2")[0] == 200 and http("POST", gw.url + "/v1/chat/completions", body)[0] == 200
    assert len(fb.posts()) == 3
    assert idem_counts(gw) == {"ran": 2, "joined": 0, "replayed": 1, "conflict": 0}, idem_counts(gw)


def stream_and_its_duplicate(gw1, gw2, sim, key):
    """A paced stream through gw1 and, while it runs (some events relayed), its duplicate
    through gw2: both get the same bytes, the duplicate says it was replayed, the simulator
    ran it once."""
    body = chat_body("a story", stream=True, max_tokens=40, stream_options={"include_usage": True})
    out = {}
    t = threading.Thread(target=lambda: out.update(first=post(gw1, body, key)))
    t.start()
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 1, what="running")
    time.sleep(0.3)
    st2, h2, b2 = post(gw2, body, key)
    t.join(30)
    st1, h1, b1 = out["first"]
    assert (st1, st2) == (200, 200), (st1, st2)
    assert b1 == b2 and sse_events(b2)[-1] == "[DONE]", (len(b1), len(b2))
    assert h2["idempotent-replayed"] == "true" and h2["content-type"].startswith("text/event-stream"), h2
    assert sim_requests(sim) == 1, sim_requests(sim)


@test
def a_duplicate_while_a_stream_runs_follows_it_byte_for_byte():
    sim = start_sim(*PACED)
    gw = start_gateway([sim])
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="healthy")
    stream_and_its_duplicate(gw, gw, sim, "stream-1")   # replays the events relayed, then follows
    assert idem_counts(gw)["joined"] == 1, idem_counts(gw)


@test
def a_retry_after_the_connection_broke_gets_the_one_answer():
    for workers in ("1", "2"):   # one reactor defers a detached request's end to its own turn
        sim = start_sim(*PACED)
        gw = start_gateway([sim], "--workers", workers)
        wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="healthy")
        cut_and_retry(gw, sim)
        # The detached runs ended and were freed: nothing is left in flight.
        wait_until(lambda: metric(http("GET", gw.url + "/metrics")[2], "infergate_inflight_requests") == 0,
                   what="no request left in flight")
        gw.stop()


def cut_and_retry(gw, sim):
    for stream in (False, True):
        key = f"cut-{stream}"
        body = json.dumps(chat_body("cut me", stream=stream, max_tokens=20)).encode()
        before = sim_requests(sim)
        s = socket.create_connection(("127.0.0.1", gw.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Idempotency-Key: %s\r\nContent-Length: %d\r\n\r\n%s" % (key.encode(), len(body), body))
        time.sleep(0.2)                   # it runs: 20 tokens at 40/s
        s.close()                         # the client's connection breaks; it does not know
        # The run goes on to its end (not aborted), for the retry.
        wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 0, what="its end")
        assert sim_aborted(sim) == 0, sim_aborted(sim)
        st, h, b = http("POST", gw.url + "/v1/chat/completions", body, timeout=30,
                        headers={"Idempotency-Key": key, "Content-Type": "application/json"})
        assert st == 200 and h["idempotent-replayed"] == "true", (st, h)
        if stream:
            ev = sse_events(b)
            assert ev[-1] == "[DONE]" and sum('"content"' in e for e in ev) == 21, ev[-3:]   # role + 20
        else:
            assert json.loads(b)["usage"]["completion_tokens"] == 20, b
        assert sim_requests(sim) == before + 1, (sim_requests(sim), before)
    assert sim_requests(sim) == 2


@test
def another_body_is_a_422_a_bad_key_a_400_and_another_api_keys_value_its_own():
    d = Dir()
    fb = FakeBackend()
    auth = keys_file(d("keys.json"), "team-a", "team-b")
    gw = start_gateway([fb], "--api-keys-file", d("keys.json"))
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="healthy")
    body = chat_body("same key", max_tokens=5)
    assert post(gw, body, "k", auth[0])[0] == 200
    st, _, b = post(gw, chat_body("another body", max_tokens=5), "k", auth[0])
    e = json.loads(b)["error"]
    assert st == 422 and e["code"] == "idempotency_key_conflict" and e["param"] == "Idempotency-Key", (st, e)
    st, _, b = post(gw, body, "x" * 256, auth[0])
    assert st == 400 and json.loads(b)["error"]["code"] == "invalid_idempotency_key", (st, b)
    # team-b's "k" is its own: it runs (and its different body is no conflict).
    st, h, _ = post(gw, chat_body("another body", max_tokens=5), "k", auth[1])
    assert st == 200 and "idempotent-replayed" not in h, h
    assert len(fb.posts()) == 2, len(fb.posts())
    assert idem_counts(gw) == {"ran": 2, "joined": 0, "replayed": 0, "conflict": 1}, idem_counts(gw)


@test
def a_5xx_is_not_kept_so_a_retry_runs_again():
    fb = failing_backend([500])
    gw = start_gateway([fb])
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="healthy")
    body = chat_body("fails once", max_tokens=5)
    assert post(gw, body, "r")[0] == 500
    st, h, _ = post(gw, body, "r")
    assert st == 200 and "idempotent-replayed" not in h, (st, h)
    st, h, _ = post(gw, body, "r")
    assert st == 200 and h["idempotent-replayed"] == "true", (st, h)
    assert len(fb.posts()) == 2, len(fb.posts())


class CuttingRelay:
    """A TCP relay to the gateway that cuts its first connection once the request was sent (no
    answer reaches the client) and passes the others through; records each request's
    Idempotency-Key and the answers it passed back."""

    def __init__(self, port):
        self.target = port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.keys, self.bodies, self.answers, self.conns = [], [], [], 0
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns += 1
            threading.Thread(target=self.serve, args=(c, self.conns == 1), daemon=True).start()

    def serve(self, c, cut):
        up = socket.create_connection(("127.0.0.1", self.target))
        buf = b""
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        head, rest = buf.split(b"\r\n\r\n", 1)
        n = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                n = int(v)
            if k.strip().lower() == b"idempotency-key":
                self.keys.append(v.strip().decode())
        while len(rest) < n:
            rest += c.recv(65536)
        self.bodies.append(rest)
        up.sendall(head + b"\r\n\r\n" + rest)
        if cut:                           # sent whole: the connection breaks before any answer
            time.sleep(0.2)
            c.close()
            up.close()
            return
        answer = b""
        up.settimeout(30)
        while True:
            d = up.recv(65536)
            if not d:
                break
            answer += d
            c.sendall(d)
            if b"\r\n\r\n" in answer:
                h, body = answer.split(b"\r\n\r\n", 1)
                cl = [int(l.split(b":")[1]) for l in h.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                if cl and len(body) >= cl[0]:
                    break
        self.answers.append(answer)
        c.close()
        up.close()


@test
def the_official_openai_client_retrying_after_a_cut_connection_gets_one_answer():
    ensure_openai()    # before any process starts: npm may take a while the first time
    sim = start_sim(*PACED)
    gw = start_gateway([sim])
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="healthy")
    relay = CuttingRelay(gw.port)

    class Via:
        url = f"http://127.0.0.1:{relay.port}"
    out = run_client(Via, "sim-model", "idempotent")
    # The client sent the POST twice with one key; the simulator ran it once.
    assert out["attempts"] == 2 and len(relay.keys) == 2 and relay.keys[0] == relay.keys[1], (out, relay.keys)
    assert sim_requests(sim) == 1, sim_requests(sim)
    assert out["replayed"] == "true" and out["usage"]["completion_tokens"] == 12 and out["content"], out
    # The bytes the client got are the kept answer's: asked again with its key (and its API key:
    # keys are scoped to it), the same body.
    assert relay.bodies[0] == relay.bodies[1]
    st, h, b = http("POST", gw.url + "/v1/chat/completions", relay.bodies[0], timeout=30,
                    headers={"Idempotency-Key": relay.keys[0], "Authorization": "Bearer unused",
                             "Content-Type": "application/json"})
    got = relay.answers[0].split(b"\r\n\r\n", 1)[1]
    assert st == 200 and b == got, (st, b, got)
    assert sim_requests(sim) == 1


def clustered(redis, name, backends):
    gw = start_clustered(redis, name, backends)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == len(backends),
               what=f"{name} healthy")
    return gw


def redis_get(redis, key):
    return subprocess.run(["redis-cli", "-p", str(redis.port), "--no-raw", *key], capture_output=True, text=True,
                          timeout=5).stdout


@test
def a_key_holds_across_gateways_sharing_redis():
    """Two gateways, one Redis, one backend: the answer run through one is replayed through the
    other (same bytes, the backend asked once); another body is the 422 there too; a 5xx through
    one lets go of the key, so a retry through the other runs, whether it came after the failure
    or waited for it."""
    answers = []
    redis = start_redis()
    fb = failing_backend(answers)
    a, b = clustered(redis, "gw-a", [fb]), clustered(redis, "gw-b", [fb])
    wait_cluster((a, b), ["gw-a", "gw-b"])
    # gw-a writes the kept answer to Redis as it answers, not before: wait for it, so that gw-b
    # replays a kept answer rather than following a run it still sees (counted as joined)
    answer_and_its_replay(a, b, fb, chat_body("once for the fleet", max_tokens=5), "fleet-1",
                          kept=lambda: '"D ' in "".join(redis_get(redis, ["GET", k]) for k in
                                                       redis_get(redis, ["KEYS", "infergate:idem:*"]).split('"')[1::2]))
    assert idem_counts(b) == {"ran": 0, "joined": 0, "replayed": 1, "conflict": 0}, idem_counts(b)
    # Kept in Redis for idempotency.ttl_s, under a digest (neither the API key nor the value readable).
    keys = redis_get(redis, ["KEYS", "infergate:idem:*"])
    assert keys.count("infergate:idem:") == 1 and "fleet-1" not in keys, keys
    ttl = int(redis_get(redis, ["PTTL", keys.split('"')[1]]).strip().split()[-1])
    assert ttl > 23 * 3600 * 1000, ttl
    # Another body under the key, through the other gateway: the 422, nothing run.
    st, h, raw = post(b, chat_body("another body", max_tokens=5), "fleet-1")
    assert st == 422 and json.loads(raw)["error"]["code"] == "idempotency_key_conflict", (st, raw)
    assert "idempotent-replayed" not in h and len(fb.posts()) == 1, h
    # A 5xx through gw-a is not kept: the retry through gw-b runs, then gw-a replays gw-b's answer.
    answers.append(500)
    body = chat_body("fails once", max_tokens=5)
    assert post(a, body, "fleet-2")[0] == 500
    st, h, b3 = post(b, body, "fleet-2")
    assert st == 200 and "idempotent-replayed" not in h, (st, h)
    st, h, b4 = post(a, body, "fleet-2")
    assert st == 200 and h["idempotent-replayed"] == "true" and b4 == b3, (st, h)
    assert len(fb.posts()) == 3, len(fb.posts())
    # A duplicate through gw-b of a request that fails while it runs through gw-a: it waits, and
    # once gw-a lets go of the key (a failure is not kept) it claims the key and runs, as a retry
    # would; its answer is then the one kept, and a third try is replayed.
    answers.append(500)
    body = chat_body("fails slowly", max_tokens=5)
    out = {}
    t = threading.Thread(target=lambda: out.update(first=post(a, body, "fleet-3")))
    t.start()
    wait_until(lambda: len(fb.posts()) == 4, what="running through gw-a")
    st, h, raw = post(b, body, "fleet-3")
    t.join(10)
    assert out["first"][0] == 500, out
    assert st == 200 and "idempotent-replayed" not in h and len(fb.posts()) == 5, (st, raw, len(fb.posts()))
    st, h, again = post(a, body, "fleet-3")
    assert st == 200 and h["idempotent-replayed"] == "true" and again == raw, (st, h)
    assert len(fb.posts()) == 5, len(fb.posts())


@test
def a_stream_running_through_one_gateway_is_answered_through_another():
    redis = start_redis()
    sim = start_sim(*PACED)
    a, b = clustered(redis, "gw-a", [sim]), clustered(redis, "gw-b", [sim])
    wait_cluster((a, b), ["gw-a", "gw-b"])
    stream_and_its_duplicate(a, b, sim, "stream-x")   # answered whole when the first ends
    assert idem_counts(b)["joined"] == 1, idem_counts(b)


run()
