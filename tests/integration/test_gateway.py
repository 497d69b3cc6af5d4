"""infergate against real infergate-sim processes on loopback ports.

Each test asserts what a client would notice: bytes received, the backend
that served (X-Infergate-Backend), status codes and OpenAI-shaped errors,
exit codes and messages."""

import collections
import http.client as httpclient
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time

from harness import (assert_openai_error, binary, chat_body, free_port, http, http_json,
                     metric, parallel, read_until, run, sse_events, start, start_gateway, start_sim,
                     start_sims, test, wait_until)

FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")
# Probes fast enough that up/down changes show within a second.
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "500")


def wait_healthy(gw, n):
    def ok():
        st, _, obj = http_json("GET", gw.url + "/health")
        return st == 200 and obj["healthy_backends"] == n
    wait_until(ok, timeout=10, what=f"{n} healthy backends")


def backend_states(gw):
    _, _, obj = http_json("GET", gw.url + "/health/backends")
    return {b["url"]: b for b in obj["backends"]}


def norm(url):
    return url if url.count(":") == 2 else url + ":80"


@test
def completion_passes_through_byte_for_byte():
    sims = start_sims(2, "--seed", "7", *FAST)
    gw = start_gateway(sims)
    wait_healthy(gw, 2)
    body = chat_body("Tell me about the sea.", max_tokens=40)
    st, hdrs, via_gw = http("POST", gw.url + "/v1/chat/completions", body)
    assert st == 200, (st, via_gw)
    served_by = hdrs["x-infergate-backend"]
    assert served_by in [s.url for s in sims], served_by
    assert hdrs["content-type"].startswith("application/json")
    assert len(hdrs["x-request-id"]) >= 16
    _, _, direct = http("POST", served_by + "/v1/chat/completions", body)
    a, b = json.loads(via_gw), json.loads(direct)
    # ids and timestamps are per response; everything else is the same bytes.
    for o in (a, b):
        o.pop("id"), o.pop("created")
    assert a == b, (a, b)
    # The completions route too.
    st, hdrs, obj = http_json("POST", gw.url + "/v1/completions",
                              {"model": "sim-model", "prompt": "Once upon", "max_tokens": 5})
    assert st == 200 and obj["object"] == "text_completion", obj
    assert obj["usage"]["completion_tokens"] == 5, obj


@test
def stream_passes_through_as_sse():
    sims = start_sims(2, "--seed", "7", "--tokens-per-second", "200", "--ttft-ms", "20")
    gw = start_gateway(sims)
    wait_healthy(gw, 2)
    body = chat_body("A streamed story", max_tokens=30, stream=True,
                     stream_options={"include_usage": True})
    st, hdrs, data = http("POST", gw.url + "/v1/chat/completions", body)
    assert st == 200, (st, data)
    assert hdrs["content-type"].startswith("text/event-stream"), hdrs
    assert hdrs["cache-control"] == "no-cache", hdrs
    assert hdrs["x-accel-buffering"] == "no", hdrs
    events = sse_events(data)
    assert events[-1] == "[DONE]", events[-3:]
    _, _, direct = http("POST", hdrs["x-infergate-backend"] + "/v1/chat/completions", body)
    dev = sse_events(direct)
    assert len(events) == len(dev), (len(events), len(dev))

    def text(evs):
        out = ""
        for e in evs[:-1]:
            for c in json.loads(e)["choices"]:
                out += c["delta"].get("content") or ""
        return out
    assert text(events) == text(dev) and text(events), (text(events), text(dev))
    usage = json.loads(events[-2])["usage"]
    assert usage["completion_tokens"] == 30, usage


@test
def stream_chunks_arrive_as_they_are_made():
    """The gateway relays each chunk as the backend makes it: the client has
    the first token while the backend holds back the rest (the simulator's
    POST /sim/hold), then every other token once the backend goes on, and
    together they are the backend's text. A gateway that waited for the end
    never delivers the first token while the backend holds."""
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim])
    wait_healthy(gw, 1)
    assert http_json("POST", sim.url + "/sim/hold", {"after_tokens": 1})[0] == 200
    body = chat_body("pace", max_tokens=10, stream=True)
    conn = httpclient.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status

    def next_event():
        while True:
            try:
                line = resp.readline()
            except TimeoutError:
                raise AssertionError(f"no event relayed in 30 s; so far {events}") from None
            assert line, "the stream closed early"
            if line.startswith(b"data: "):
                return line[6:].strip()
    events = []
    while not events or '"content":"' not in events[-1] or '"role"' in events[-1]:
        events.append(next_event().decode())          # the role chunk, then the first token
    held = http_json("GET", sim.url + "/sim/hold")[2]
    assert held == {"after_tokens": 1, "held": 1}, held  # the backend has not made token 2 yet
    assert all(e != "[DONE]" for e in events), events
    assert http_json("POST", sim.url + "/sim/hold", {"after_tokens": None})[0] == 200
    while events[-1] != "[DONE]":
        events.append(next_event().decode())
    conn.close()
    tokens = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-1]]
    tokens = [t for t in tokens if t]
    assert len(tokens) == 10, events
    _, _, whole = http_json("POST", sim.url + "/v1/chat/completions", chat_body("pace", max_tokens=10))
    assert "".join(tokens) == whole["choices"][0]["message"]["content"], (tokens, whole)


@test
def least_loaded_spreads_evenly():
    sims = start_sims(7, "--tokens-per-second", "100", "--ttft-ms", "0", "--output-tokens", "30")
    gw = start_gateway(sims)
    wait_healthy(gw, 7)

    def one(i):
        st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", chat_body(f"p{i}"), timeout=60)
        assert st == 200, st
        return hdrs["x-infergate-backend"]
    counts = collections.Counter(parallel(one, range(700), workers=700))
    assert len(counts) == 7, counts
    for url, n in counts.items():
        assert 85 <= n <= 115, counts


@test
def slow_backend_gets_less_work():
    fast = start_sims(3, "--tokens-per-second", "400", "--ttft-ms", "0", "--output-tokens", "20")
    slow = start_sim("--tokens-per-second", "100", "--ttft-ms", "0", "--output-tokens", "20")
    gw = start_gateway(fast + [slow])
    wait_healthy(gw, 4)
    counts = collections.Counter()
    lock = threading.Lock()
    left = [400]

    def worker(_):
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("x"), timeout=60)
            assert st == 200, st
            with lock:
                counts[hdrs["x-infergate-backend"]] += 1
    parallel(worker, range(16), workers=16)
    fast_avg = sum(counts[s.url] for s in fast) / 3
    assert counts[slow.url] < 0.6 * fast_avg, counts


@test
def policies_all_route():
    sims = start_sims(3, *FAST)
    for policy in ("round-robin", "random", "power-of-two", "least-loaded"):
        gw = start_gateway(sims, "--policy", policy)
        wait_healthy(gw, 3)
        seen = collections.Counter()
        for i in range(30):
            st, hdrs, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": f"x{i}", "max_tokens": 2})
            assert st == 200, (policy, st)
            seen[hdrs["x-infergate-backend"]] += 1
        assert len(seen) == 3, (policy, seen)
        if policy == "round-robin":
            assert set(seen.values()) == {10}, seen
        gw.stop()


@test
def killed_backend_costs_no_request():
    sims = start_sims(7, "--tokens-per-second", "2000", "--ttft-ms", "5", "--output-tokens", "10")
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_healthy(gw, 7)
    victim = sims[3]
    done = [0]
    lock = threading.Lock()
    statuses = collections.Counter()

    def one(i):
        st, _, body = http("POST", gw.url + "/v1/chat/completions", chat_body(f"k{i}"), timeout=60)
        with lock:
            statuses[st] += 1
            done[0] += 1
        return st
    killer_fired = threading.Event()

    def killer():
        wait_until(lambda: done[0] >= 500, timeout=60)
        victim.send_signal(signal.SIGKILL)
        killer_fired.set()
    t = threading.Thread(target=killer)
    t.start()
    parallel(one, range(2000), workers=32)
    t.join()
    assert killer_fired.is_set()
    assert statuses == {200: 2000}, statuses
    # Down within interval x fall (100 ms x 3), plus scheduling slack.
    wait_until(lambda: backend_states(gw)[victim.url]["state"] == "down", timeout=2,
               what="victim shown down")
    # Restart it on the same port: it comes back by itself.
    start_sim(*FAST, port=victim.port)
    wait_until(lambda: backend_states(gw)[victim.url]["state"] == "up", timeout=5,
               what="victim back up")


@test
def all_backends_down_then_recovery():
    sims = start_sims(2, *FAST)
    ports = [s.port for s in sims]
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_healthy(gw, 2)
    for s in sims:
        s.stop(signal.SIGKILL)
    wait_until(lambda: http("GET", gw.url + "/health")[0] == 503, timeout=5, what="/health 503")
    st, hdrs, obj = http_json("GET", gw.url + "/health")
    assert obj == {"status": "unavailable", "healthy_backends": 0, "backends": 2}, obj
    st, hdrs, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("x"))
    assert_openai_error(st, obj, 503)
    assert hdrs.get("retry-after"), hdrs
    for p in ports:
        start_sim(*FAST, port=p)
    wait_healthy(gw, 2)
    st, _, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("x"))
    assert st == 200, st


@test
def gateway_starts_with_backends_down():
    port = free_port()
    gw = start_gateway([f"http://127.0.0.1:{port}"], *QUICK_HEALTH)
    st, _, obj = http_json("GET", gw.url + "/health")
    assert st == 503 and obj["healthy_backends"] == 0, obj
    start_sim(*FAST, port=port)
    wait_healthy(gw, 1)
    st, _, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "a"})
    assert st == 200


def sim_counter(sim, name):
    _, _, text = http("GET", sim.url + "/metrics")
    for line in text.decode().splitlines():
        if line.startswith(name) and not line.startswith("#"):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


def sim_load(sim):
    _, _, obj = http_json("GET", sim.url + "/sim/state")
    return obj


@test
def client_disconnect_aborts_upstream():
    sim = start_sim("--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "200")
    gw = start_gateway([sim])
    wait_healthy(gw, 1)
    for stream in (True, False):
        s = socket.create_connection(("127.0.0.1", gw.port))
        body = json.dumps(chat_body("bye", stream=stream)).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        wait_until(lambda: sim_load(sim)["num_running_reqs"] == 1, timeout=5, what="running")
        if stream:
            read_until(s, b"data: ")
        before = sim_counter(sim, "infergate_sim_requests_aborted_total")
        served = sim_counter(sim, "infergate_sim_requests_served_total")
        s.close()
        # The generation takes 10 s (200 tokens at 20/s): an abort counted,
        # and nothing served, is the disconnect reaching the backend.
        wait_until(lambda: sim_counter(sim, "infergate_sim_requests_aborted_total") == before + 1,
                   timeout=8, what=f"abort seen by the backend (stream={stream})")
        wait_until(lambda: sim_load(sim)["num_running_reqs"] == 0, timeout=8, what="slot freed")
        assert sim_counter(sim, "infergate_sim_requests_served_total") == served
    _, _, obj = http_json("GET", gw.url + "/health/backends")
    assert obj["backends"][0]["inflight"] == 0 and obj["backends"][0]["aborted"] == 2, obj


@test
def queue_waits_then_429():
    sim = start_sim("--tokens-per-second", "50", "--ttft-ms", "0", "--output-tokens", "10")
    gw = start_gateway([sim], "--max-inflight", "1", "--queue-size", "2")
    wait_healthy(gw, 1)
    # 3 requests: one runs, two wait, all succeed one after another.
    t0 = time.monotonic()
    res = parallel(lambda i: http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "q"})[0],
                   range(3), workers=3)
    took = time.monotonic() - t0
    assert res == [200, 200, 200], res
    assert took >= 0.5, took  # 3 x 0.2 s, one at a time
    # 4 at once with room for 1 + 2: exactly one is refused with 429.
    res = parallel(lambda i: http_json("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "q"}),
                   range(4), workers=4)
    codes = sorted(r[0] for r in res)
    assert codes == [200, 200, 200, 429], codes
    st, hdrs, obj = next(r for r in res if r[0] == 429)
    assert_openai_error(st, obj, 429, "rate_limit_error")
    assert hdrs.get("retry-after") == "1", hdrs


@test
def queue_timeout_is_503():
    sim = start_sim("--tokens-per-second", "10", "--ttft-ms", "0", "--output-tokens", "10")
    gw = start_gateway([sim], "--max-inflight", "1", "--queue-timeout-ms", "200")
    wait_healthy(gw, 1)
    res = parallel(lambda i: http_json("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "q"}),
                   range(2), workers=2)
    codes = sorted(r[0] for r in res)
    assert codes == [200, 503], codes
    st, hdrs, obj = next(r for r in res if r[0] == 503)
    assert_openai_error(st, obj, 503)
    assert obj["error"]["code"] == "queue_timeout", obj
    assert hdrs.get("retry-after"), hdrs


@test
def failing_backend_is_retried_elsewhere():
    sims = start_sims(3, *FAST)
    gw = start_gateway(sims, "--health-interval-ms", "60000")
    wait_healthy(gw, 3)
    st, _, _ = http("POST", sims[0].url + "/sim/fault", {"mode": "down"})
    assert st == 200
    for i in range(30):
        st, hdrs, body = http("POST", gw.url + "/v1/chat/completions", chat_body(f"r{i}"))
        assert st == 200, (st, body)
        assert hdrs["x-infergate-backend"] != sims[0].url
    # Passive checks took it out without any probe.
    assert backend_states(gw)[sims[0].url]["state"] == "down"
    _, _, text = http("GET", gw.url + "/metrics")
    assert metric(text, "infergate_retries_total") >= 1


@test
def idle_backend_times_out_with_504():
    sim = start_sim(*FAST)
    gw = start_gateway([sim], "--idle-timeout-s", "1", "--retries", "0",
                       "--health-interval-ms", "60000")
    wait_healthy(gw, 1)
    http("POST", sim.url + "/sim/fault", {"mode": "hang"})
    t0 = time.monotonic()
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("h"))
    assert_openai_error(st, obj, 504)
    assert time.monotonic() - t0 >= 0.9   # it waited out the idle timeout (a lower bound: no limit on speed)


@test
def bad_requests_get_openai_errors():
    sim = start_sim(*FAST)
    gw = start_gateway([sim], "--max-body-bytes", "2048")
    wait_healthy(gw, 1)
    u = gw.url + "/v1/chat/completions"
    cases = [
        ("POST", u, b"{not json", 400),
        ("POST", u, b"[1, 2]", 400),
        ("POST", u, b'{"stream": "yes"}', 400),
        ("POST", u, b'{"x": "' + b"a" * 4096 + b'"}', 413),
        ("GET", u, None, 405),
        ("POST", gw.url + "/v2/nothing", b"{}", 404),
        ("DELETE", gw.url + "/health", None, 405),
    ]
    for method, url, body, want in cases:
        st, hdrs, obj = http_json(method, url, body, {"Content-Type": "application/json"})
        assert_openai_error(st, obj, want)
    # The gateway still serves.
    st, _, _ = http("POST", u, chat_body("ok"))
    assert st == 200


@test
def request_id_is_kept_and_models_listed():
    sims = start_sims(2, "--model", "alpha", *FAST)
    gw = start_gateway(sims)
    wait_healthy(gw, 2)
    st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("x", model="alpha"),
                       {"X-Request-Id": "my-id-123"})
    assert st == 200 and hdrs["x-request-id"] == "my-id-123", hdrs

    def models():
        st, _, obj = http_json("GET", gw.url + "/v1/models")
        return st == 200 and [m["id"] for m in obj["data"]] == ["alpha"] and obj["object"] == "list"
    wait_until(models, timeout=5, what="model list")


@test
def bad_configuration_fails_fast():
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"listen": "127.0.0.1:0", "backends": ["http://127.0.0.1:1", "http://127.0.0.1:1/"],
               "retries": 99, "helth": {}, "health": {"fall": 0}}, cfg)
    cfg.close()
    cases = [
        (["--config", cfg.name], ["helth", "did you mean 'health'", "listed twice", "retries", "99",
                                  "health.fall"]),
        (["--backend", "ftp://x"], ["ftp://x"]),
        (["--backend", "http://127.0.0.1:1", "--listen", "nowhere"], ["--listen", "nowhere"]),
        (["--backend", "http://127.0.0.1:1", "--retries", "-1"], ["--retries", "-1"]),
        (["--backend", "http://127.0.0.1:1", "--nope"], ["--nope"]),
        (["--backend", "http://127.0.0.1:1", "--policy", "fastest"], ["fastest"]),
    ]
    for args, words in cases:
        p = subprocess.run([binary("infergate"), *args], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert "listening" not in p.stderr, (args, p.stderr)   # failed before it started anything
        for w in words:
            assert w in p.stderr, (args, w, p.stderr)
    os.unlink(cfg.name)
    # A busy port.
    sim = start_sim(*FAST)
    p = subprocess.run([binary("infergate"), "--backend", sim.url, "--listen", f"127.0.0.1:{sim.port}"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and str(sim.port) in p.stderr and "in use" in p.stderr, p.stderr
    # --check-config prints the effective configuration.
    p = subprocess.run([binary("infergate"), "--config", os.path.join(os.environ.get("IG_SRCDIR", "."),
                        "etc", "infergate.json"), "--check-config", "--retries", "4"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    eff = json.loads(p.stdout)
    assert eff["retries"] == 4 and len(eff["backends"]) == 7, eff
    assert eff["health"]["fall"] == 3 and eff["policy"] == "least-loaded", eff
    for flag in ("--help", "--version"):
        p = subprocess.run([binary("infergate"), flag], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0 and p.stdout, (flag, p)


@test
def sigterm_lets_streams_finish():
    sim = start_sim("--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "20")
    gw = start_gateway([sim])
    wait_healthy(gw, 1)
    result = {}

    def client():
        result["r"] = http("POST", gw.url + "/v1/chat/completions",
                           chat_body("long", stream=True), timeout=30)
    t = threading.Thread(target=client)
    t.start()
    wait_until(lambda: sim_load(sim)["num_running_reqs"] == 1, timeout=5, what="stream running")
    gw.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    # New connections are refused while the stream finishes.
    try:
        socket.create_connection(("127.0.0.1", gw.port), timeout=1).close()
        refused = False
    except OSError:
        refused = True
    t.join(30)
    assert gw.wait(10) == 0
    st, _, data = result["r"]
    assert st == 200 and sse_events(data)[-1] == "[DONE]", data[-200:]
    assert refused


run()
