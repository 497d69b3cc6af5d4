"""The gateway in front of servers that behave as SGLang and vLLM really do
(sgl-project/sglang, vllm-project/vllm), not as our simulator once did:
a /health that takes over a second, load gauges with one series per
data-parallel rank or engine and per priority, /metrics that goes stale, API
keys on every path but /health and /metrics, errors in their own shapes and
inside 200 streams. The payloads come from tests/fixtures (each names the
upstream file it follows), served by scripted fake backends, and from
infergate-sim's switches for each behaviour (in both flavours)."""

import json
import os
import select
import tempfile
import threading
import time

from harness import (FakeBackend, assert_openai_error, chat_body, fixture, http, http_json, metric, parallel, sim_requests,
                     run, sse_events, start_gateway, start_sim, test, wait_until)


def backends(gw):
    return {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}


def healthy(gw, n=1, timeout=15):
    wait_until(lambda: http_json("GET", gw.url + "/health")[2].get("healthy_backends") == n,
               timeout=timeout, what=f"{n} healthy backend(s)")


def serving(routes):
    """A FakeBackend handler: routes maps (method, path) to (status, body, content type);
    anything else gets the default small OpenAI server's answer."""
    def handler(fb, req, sock):
        key = (req["method"], req["path"].split("?")[0])
        if key in routes:
            st, body, ctype = routes[key]
            FakeBackend.reply(sock, st, body, ctype)
        else:
            FakeBackend.answer_ok(fb, req, sock)
        return True
    return handler


# ---- errors in the shapes real servers answer with ----

@test
def backend_errors_reach_clients_in_openai_shape_with_their_message():
    cases = [
        # (fixture or bytes, status, want message start, want type, want code)
        ("sglang-error-flat.json", 400, "Requested token count exceeds the model's maximum context length",
         "BadRequestError", 400),
        ("sglang-error-validation.json", 400, "1 validation error for ChatCompletionRequest", "Bad Request", 400),
        ("fastapi-detail.json", 422, "body.messages: Field required", "invalid_request_error", None),
        ("sglang-error-auth.json", 401, "Unauthorized", "authentication_error", None),
        (b"Internal Server Error", 500, "Internal Server Error", "server_error", None),
    ]
    for src, status, message, etype, code in cases:
        body = fixture(src) if isinstance(src, str) else src
        ctype = "application/json" if isinstance(src, str) else "text/plain"
        fb = FakeBackend(serving({("POST", "/v1/chat/completions"): (status, body, ctype)}))
        gw = start_gateway([fb], "--retries", "0")
        healthy(gw)
        st, hdrs, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("hi"))
        assert_openai_error(st, obj, status, etype)
        assert obj["error"]["message"].startswith(message), (src, obj)
        assert obj["error"]["code"] == code, (src, obj)
        assert hdrs["content-type"] == "application/json", hdrs
        assert hdrs["x-infergate-backend"] == fb.url, hdrs
        gw.stop()
        fb.stop()
    # vLLM's errors are OpenAI's shape already: relayed byte for byte.
    body = fixture("vllm-error-404.json")
    fb = FakeBackend(serving({("POST", "/v1/chat/completions"): (404, body, "application/json")}),
                     model="llama-70b")
    gw = start_gateway([fb], "--retries", "0")
    healthy(gw)
    st, _, data = http("POST", gw.url + "/v1/chat/completions", chat_body("hi", model="llama-70b"))
    assert st == 404 and data == body, (st, data)


@test
def a_stream_that_carries_an_error_event_counts_as_failed():
    alog = tempfile.NamedTemporaryFile(prefix="ig-alog-", suffix=".jsonl", delete=False).name
    stream = fixture("sglang-error-stream.sse")
    # The same stream with the error event in SGLang's flat shape and `data:` without the space.
    flat = stream.replace(b'data: {"error": {"object": "error"', b'data:{"object": "error"').replace(
        b'"code": 400}}', b'"code": 400}')
    assert flat != stream
    for body, name in ((stream, "nested"), (flat, "flat")):
        fb = FakeBackend(serving({("POST", "/v1/chat/completions"): (200, body, "text/event-stream")}))
        gw = start_gateway([fb], "--access-log", alog)
        healthy(gw)
        st, hdrs, data = http("POST", gw.url + "/v1/chat/completions", chat_body("hi", stream=True))
        assert st == 200, (st, data)
        events = sse_events(data)
        assert events[-1] == "[DONE]", events
        err = json.loads(events[-2])
        # What an OpenAI client looks for: {"error": {"message", ...}} (the flat one rewritten).
        assert err["error"]["message"].startswith("Requested token count exceeds"), (name, err)
        assert err["error"]["code"] == 400 and err["error"]["type"] == "BadRequestError", (name, err)
        assert json.loads(events[1])["choices"][0]["delta"]["content"] == "Once", (name, events)
        # Counted as what it was: a 400, not a success.
        _, _, text = http("GET", gw.url + "/metrics")
        assert metric(text, f'infergate_requests_total{{route="/v1/chat/completions",code="400",'
                            f'backend="{fb.url}"}}') == 1, (name, text.decode()[:3000])
        assert metric(text, "infergate_stream_errors_total") == 1, name
        assert b'code="200"' not in text, name
        gw.stop()
        fb.stop()
        with open(alog) as f:
            line = [json.loads(x) for x in f.read().splitlines()
                    if json.loads(x)["path"] == "/v1/chat/completions"][-1]
        assert line["status"] == 400 and line["status_sent"] == 200, (name, line)
        assert line["error"].startswith("Requested token count exceeds"), (name, line)
        assert line["stream"] is True, line
    os.unlink(alog)


# ---- probes: keys, slow /health ----

@test
def probes_send_the_backend_key_on_every_path():
    # SGLang's API-key middleware lets only /health*, /ready* and /metrics through without
    # the key (python/sglang/srt/utils/auth.py); without it the model list and the load
    # stay unknown.
    key = "sk-backend-7f3a"
    def handler(fb, req, sock):
        path = req["path"].split("?")[0]
        auth = dict((k.lower(), v) for k, v in req["headers"]).get("authorization")
        if not (path.startswith("/health") or path.startswith("/metrics")) and auth != f"Bearer {key}":
            FakeBackend.reply(sock, 401, fixture("sglang-error-auth.json"))
        elif path == "/v1/loads":
            FakeBackend.reply(sock, 200, fixture("sglang-v1-loads.json"))
        else:
            FakeBackend.answer_ok(fb, req, sock)
        return True
    fb = FakeBackend(handler, model="qwen3")
    gw = start_gateway([fb], "--backend-api-key", key, "--health-interval-ms", "100")
    healthy(gw)
    wait_until(lambda: backends(gw)[fb.url].get("reported_load") == 17, what="load learned through the key")
    assert backends(gw)[fb.url]["load_path"] == "/v1/loads"
    models = wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], what="models")
    assert [m["id"] for m in models] == ["qwen3"], models
    gets = [r for r in fb.requests if r["method"] == "GET"]
    for path in ("/health", "/v1/models", "/v1/loads"):
        seen = [dict((k.lower(), v) for k, v in r["headers"]).get("authorization")
                for r in gets if r["path"] == path]
        assert seen and all(a == f"Bearer {key}" for a in seen), (path, seen)
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("hi", model="qwen3"))
    assert st == 200, obj


@test
def a_slow_probe_is_not_a_failure_while_requests_are_answered():
    # SGLang's /health waits for any output of its scheduler (http_server.py health_generate):
    # a long prefill can hold it past the probe timeout while requests still flow. Here the
    # probe hangs after the first ones; a tight timeout with fall 1 would take the backend
    # down at the first slow probe, were requests not answered meanwhile.
    probes = {"n": 0}
    def handler(fb, req, sock):
        if req["path"] == "/health":
            probes["n"] += 1
            if probes["n"] > 2:
                time.sleep(1.0)
            FakeBackend.reply(sock, 200, b"", "text/plain")
        else:
            FakeBackend.answer_ok(fb, req, sock)
        return True
    fb = FakeBackend(handler)
    gw = start_gateway([fb], "--health-timeout-ms", "300", "--health-interval-ms", "100",
                       "--health-fall", "1", "--load-source", "gateway")
    healthy(gw)
    stop = threading.Event()
    codes = []
    def traffic():
        while not stop.is_set():
            codes.append(http("POST", gw.url + "/v1/chat/completions", chat_body("hi"))[0])
            time.sleep(0.01)
    t = threading.Thread(target=traffic)
    t.start()
    try:
        wait_until(lambda: backends(gw)[fb.url]["last_probe"].get("slow", 0) >= 3, timeout=20,
                   what="three slow probes")
        b = backends(gw)[fb.url]
        assert b["state"] == "up", b
        assert "requests are answered" in b["last_probe"].get("error", ""), b
    finally:
        stop.set()
        t.join()
    assert codes and set(codes) == {200}, set(codes)
    assert "is down" not in gw.read_log(), gw.read_log()
    # Without requests, the next slow probe is a failure again: down (fall 1).
    wait_until(lambda: backends(gw)[fb.url]["state"] == "down", timeout=20, what="down without traffic")
    _, _, text = http("GET", gw.url + "/metrics")
    assert metric(text, f'infergate_backend_probes_total{{backend="{fb.url}",result="slow"}}') >= 3


# ---- load reports ----

@test
def load_reports_of_real_servers_are_summed_once():
    cases = [("/metrics", "sglang-metrics-dp2.prom", 17, 5), ("/metrics", "sglang-metrics-dp4-rank0-idle.prom", 12, 3),
             ("/metrics", "sglang-metrics-priority.prom", 12, 4), ("/metrics", "vllm-metrics-engines.prom", 17, 5),
             ("/metrics", "metrics-timestamps.prom", 5, 1), ("/v1/loads", "sglang-v1-loads.json", 17, 5),
             ("/get_load", "sglang-get-load.json", 17, 5)]
    fbs = []
    for path, name, load, waiting in cases:
        ctype = "text/plain" if name.endswith(".prom") else "application/json"
        fb = FakeBackend(serving({("GET", path): (200, fixture(name), ctype)}))
        fbs.append((fb, path, name, load, waiting))
    gw = start_gateway([f[0] for f in fbs], "--health-interval-ms", "100")
    healthy(gw, len(fbs))
    def read():
        b = backends(gw)
        return all(b[fb.url].get("load_path") == path and b[fb.url].get("reported_load") == load
                   and b[fb.url].get("reported_waiting") == waiting for fb, path, _, load, waiting in fbs)
    try:
        wait_until(read, timeout=10, what="every report read")
    except TimeoutError:
        b = backends(gw)
        raise AssertionError([(name, b[fb.url].get("reported_load"), b[fb.url].get("reported_waiting"), load, waiting)
                              for fb, _, name, load, waiting in fbs])


# ---- the same behaviours from infergate-sim's switches ----

def state(sim):
    return http_json("GET", sim.url + "/sim/state")[2]


class Held:
    """Completion requests sent on raw sockets and held open (the caller closes them)."""

    def __init__(self):
        import socket
        self.socket = socket
        self.socks = []

    def send(self, url, body, path="/v1/chat/completions", headers=b""):
        host, port = url.split("//")[1].split(":")
        s = self.socket.create_connection((host, int(port)))
        data = json.dumps(body).encode()
        s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
                  b"Content-Length: %d\r\n\r\n%s" % (path.encode(), headers, len(data), data))
        self.socks.append(s)
        return s

    def close(self):
        for s in self.socks:
            s.close()
        self.socks = []


@test
def sglang_health_of_over_a_second_is_up_with_default_settings():
    sim = start_sim("--health-delay-ms", "1050")
    gw = start_gateway([sim])
    healthy(gw)
    st, hdrs, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("hi"))
    assert st == 200 and hdrs["x-infergate-backend"] == sim.url, obj
    assert backends(gw)[sim.url]["last_probe"]["latency_ms"] >= 1050
    # The old default, 1000 ms, never sees it up.
    old = start_gateway([sim], "--health-timeout-ms", "1000", "--health-interval-ms", "100")
    wait_until(lambda: backends(old)[sim.url]["last_probe"].get("status") == 0 and
               http("GET", old.url + "/metrics")[2].count(b'result="failed"} 0') == 0, timeout=20,
               what="failed probes")
    assert http("GET", old.url + "/health")[0] == 503
    assert backends(old)[sim.url]["state"] == "down"


def expect_load(gw, sim, what):
    """Waits until the gateway's reading of sim's load equals the sim's own totals."""
    def same():
        st, b = state(sim), backends(gw)[sim.url]
        want = (st["num_running_reqs"] + st["num_waiting_reqs"], st["num_waiting_reqs"])
        got = (b.get("reported_load"), b.get("reported_waiting"))
        return (got == want, got, want)
    try:
        wait_until(lambda: same()[0], timeout=10, what=what)
    except TimeoutError:
        raise AssertionError(f"{what}: gateway read {same()[1]}, the sim has {same()[2]}")


@test
def data_parallel_ranks_and_engines_are_summed():
    # N ranks with 2 slots each, requests round-robin over the ranks; the ones that land on
    # rank 0 finish at once, the others run for seconds and queue 1 per rank: rank 0 idle,
    # the others 2 running and 1 waiting. Every load path, both flavours.
    cases = [("sglang", 2, "/metrics"), ("sglang", 4, "/metrics"), ("sglang", 4, "/v1/loads"),
             ("sglang", 4, "/get_load"), ("vllm", 4, "/metrics")]
    for flavor, ranks, path in cases:
        sim = start_sim("--flavor", flavor, "--dp-ranks", str(ranks), "--max-running", "2",
                        "--tokens-per-second", "10", "--output-tokens", "300", "--ttft-ms", "0")
        gw = start_gateway([sim], "--load-path", path, "--health-interval-ms", "100")
        healthy(gw)
        held = Held()
        for i in range(3 * ranks):
            body = chat_body(f"r{i}", stream=True, max_tokens=1 if i % ranks == 0 else 300)
            held.send(sim.url, body)
            # In order: each one accepted (the short ones gone) before the next is sent.
            long_sent = i + 1 - (i // ranks + 1)
            wait_until(lambda: state(sim)["num_running_reqs"] + state(sim)["num_waiting_reqs"] == long_sent,
                       timeout=5, what="request accepted")
        ranks_now = state(sim)["ranks"]
        assert ranks_now[0]["num_running_reqs"] == 0 and ranks_now[0]["num_waiting_reqs"] == 0, ranks_now
        assert all(r["num_running_reqs"] == 2 and r["num_waiting_reqs"] == 1 for r in ranks_now[1:]), ranks_now
        expect_load(gw, sim, f"{flavor}, {ranks} ranks, {path}")
        assert backends(gw)[sim.url]["reported_load"] == 3 * (ranks - 1)
        held.close()
        gw.stop()
        sim.stop()


@test
def sglang_priority_series_are_not_counted_twice():
    sim = start_sim("--enable-priority-scheduling", "--dp-ranks", "2", "--max-running", "2",
                    "--tokens-per-second", "10", "--output-tokens", "300", "--ttft-ms", "0")
    gw = start_gateway([sim], "--load-path", "/metrics", "--health-interval-ms", "100")
    healthy(gw)
    held = Held()
    for i in range(7):
        held.send(sim.url, chat_body(f"p{i}", stream=True, priority=5 if i % 3 else 0))
    wait_until(lambda: state(sim)["num_running_reqs"] + state(sim)["num_waiting_reqs"] == 7, what="7 at the sim")
    text = http("GET", sim.url + "/metrics")[2].decode()
    assert 'priority=""' in text and 'priority="5"' in text, text
    expect_load(gw, sim, "priority series")
    assert backends(gw)[sim.url]["reported_load"] == 7
    held.close()


@test
def a_stale_sglang_report_after_a_burst_does_not_shrink_the_learned_slots():
    # SGLang refreshes its /metrics gauges only when its scheduler logs; requests that leave
    # its queue without being scheduled (their clients gave up) leave the queue on show until
    # the 30 s idle refresh. The learned slot count must not fall to 1 on it.
    # The queued ones leave first (no admission, no log), then the running ones: the last
    # log (a decode step with the queue full) stays on show. The setup is checked and, if
    # need be, tried again.
    for attempt in range(3):
        sim = start_sim("--metrics-refresh", "sglang", "--max-running", "4", "--tokens-per-second", "40",
                        "--output-tokens", "400", "--ttft-ms", "0")
        gw = start_gateway([sim], "--load-path", "/metrics", "--health-interval-ms", "100")
        healthy(gw)
        held = Held()
        for i in range(16):
            held.send(gw.url, chat_body(f"s{i}", stream=True))
        wait_until(lambda: backends(gw)[sim.url].get("learned_slots") == 4, timeout=15, what="4 slots learned")
        # The 4 the sim runs are those whose stream flows (the gateway sends nothing for one
        # the sim queues); which they are is up to the order the gateway's reactors forward them.
        wait_until(lambda: len(select.select(held.socks, [], [], 0)[0]) == 4, timeout=10, what="4 streams flowing")
        first = select.select(held.socks, [], [], 0)[0]
        held.socks = [s for s in held.socks if s not in first]
        held.close()          # the other 12: queued at the sim
        time.sleep(0.3)
        for sock in first:    # then the 4 it runs: the gateway aborts, the sim is idle
            sock.close()
        wait_until(lambda: state(sim)["num_running_reqs"] + state(sim)["num_waiting_reqs"] == 0, what="sim idle")
        text = http("GET", sim.url + "/metrics")[2].decode()
        queued = [l for l in text.splitlines() if l.startswith("sglang:num_queue_reqs")]
        if queued and float(queued[0].rsplit(" ", 1)[1]) > 0:
            break             # the stale report is real
        gw.stop()
        sim.stop()
    else:
        raise AssertionError(f"no stale queue on show after 3 tries: {queued}")

    def probes():
        _, _, t = http("GET", gw.url + "/metrics")
        return metric(t, f'infergate_backend_probes_total{{backend="{sim.url}",result="ok"}}')
    n = probes()
    wait_until(lambda: probes() >= n + 10, timeout=20, what="ten more probes")
    b = backends(gw)[sim.url]
    assert b["learned_slots"] == 4, b
    assert b["reported_waiting"] > 0, b
    assert "at most 1 in flight" not in gw.read_log(), gw.read_log()


@test
def with_the_backend_key_models_and_load_are_learned():
    key = "sk-sim-backend"
    sim = start_sim("--api-key", key, "--model", "qwen3")
    gw = start_gateway([sim], "--backend-api-key", key, "--health-interval-ms", "100")
    healthy(gw)
    wait_until(lambda: backends(gw)[sim.url].get("load_path") == "/v1/loads", what="load read at /v1/loads")
    models = wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], what="models")
    assert [m["id"] for m in models] == ["qwen3"], models
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("hi", model="qwen3"))
    assert st == 200, obj
    # Without it: SGLang's {"error": "Unauthorized"} reaches the client in OpenAI's shape.
    gw2 = start_gateway([sim], "--health-interval-ms", "100")
    healthy(gw2)
    st, _, obj = http_json("POST", gw2.url + "/v1/chat/completions", chat_body("hi", model="qwen3"))
    assert_openai_error(st, obj, 401, "authentication_error")
    assert obj["error"]["message"] == "Unauthorized", obj
    # The load is still read where SGLang asks no key (/metrics, utils/auth.py), which states
    # no capacity: a ramp caps the backend. With the key, /v1/loads states it.
    wait_until(lambda: backends(gw2)[sim.url].get("load_path") == "/metrics", what="load read at /metrics")
    assert backends(gw2)[sim.url]["limit_from"] == "ramp", backends(gw2)
    assert backends(gw)[sim.url]["limit_from"] == "reported", backends(gw)
    assert http_json("GET", gw2.url + "/v1/models")[2]["data"] == []


@test
def context_length_errors_of_both_flavours_reach_the_client_as_openai_errors():
    for flavor in ("sglang", "vllm"):
        sim = start_sim("--flavor", flavor, "--context-length", "64", "--tokens-per-second", "0", "--ttft-ms", "0")
        gw = start_gateway([sim])
        healthy(gw)
        direct = http("POST", sim.url + "/v1/chat/completions", chat_body("hi", max_tokens=100))
        st, hdrs, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("hi", max_tokens=100))
        assert_openai_error(st, obj, 400)
        assert direct[0] == 400
        d = json.loads(direct[2])
        want = d["message"] if flavor == "sglang" else d["error"]["message"]
        assert obj["error"]["message"] == want and "context length" in want, (flavor, obj, d)
        # Streamed: whatever status the server gives, the client sees the message in OpenAI's shape.
        st, _, data = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "hi",
                                                                "max_tokens": 100, "stream": True})
        if st == 200:
            err = json.loads([e for e in sse_events(data) if e != "[DONE]"][-1])["error"]
        else:
            err = json.loads(data)["error"]
            assert st == 400, (st, data)
        assert "context length" in err["message"], (flavor, st, data)
        _, _, text = http("GET", gw.url + "/metrics")
        assert metric(text, f'infergate_requests_total{{route="/v1/completions",code="400",'
                            f'backend="{sim.url}"}}') == 1, (flavor, st)
        gw.stop()
        sim.stop()


@test
def vllm_unknown_model_is_a_404_relayed_as_is():
    # The gateway believes its configuration (URL#MODEL): vLLM's own 404
    # for a model it does not serve reaches the client as vLLM wrote it.
    sim = start_sim("--flavor", "vllm", "--model", "llama")
    gw = start_gateway([sim.url + "#mistral"])
    healthy(gw)
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("hi", model="mistral"))
    assert_openai_error(st, obj, 404)
    assert obj["error"]["message"] == "The model `mistral` does not exist.", obj
    assert obj["error"]["param"] == "model" and obj["error"]["code"] == 404, obj
    # Learned from its /v1/models instead, the gateway knows better: its
    # own 404, and vLLM never sees the request.
    gw2 = start_gateway([sim])
    healthy(gw2)
    before = sim_requests(sim)
    st, _, obj = http_json("POST", gw2.url + "/v1/chat/completions", chat_body("hi", model="mistral"))
    assert_openai_error(st, obj, 404, "invalid_request_error")
    assert obj["error"]["code"] == "model_not_found" and obj["error"]["param"] == "model", obj
    assert obj["error"]["message"] == ("The model 'mistral' does not exist or is not served here; "
                                       "served: llama"), obj
    assert sim_requests(sim) == before


run()
