"""Fault injection: infergate, infergate-sim and infergate-bulk on loopback,
with backends that die mid-stream, hang, crawl, answer garbage, close early
or flap, every backend gone for a while, the gateway itself restarted, and a
disk that fills. What is asserted is what a user sees: the bytes a client
received and when the stream closed, status codes, the gateway's health view
and log, and the bulk client's exit code and output lines (each id exactly
once)."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

from harness import (Dir, FakeBackend, Skip, assert_openai_error, binary, chat_body, http, http_json,
                     metric, parallel, read_until, run, sse_events, start, start_gateway, start_sim, start_sims,
                     test, wait_until)



MODEL = "sim-model"
FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "500")


def wait_healthy(gw, n, timeout=10):
    def ok():
        st, _, obj = http_json("GET", gw.url + "/health")
        return st == 200 and obj["healthy_backends"] == n
    wait_until(ok, timeout=timeout, what=f"{n} healthy backends")


def states(gw):
    _, _, obj = http_json("GET", gw.url + "/health/backends")
    return {b["url"]: b["state"] for b in obj["backends"]}


def set_fault(sim, mode):
    st, _, _ = http("POST", sim.url + "/sim/fault", {"mode": mode})
    assert st == 200, (sim.url, mode, st)


def state_lines(gw, url):
    """The gateway log's state-change lines for one backend, in order."""
    out = []
    for line in gw.read_log().splitlines():
        m = re.search(r"backend (\S+) is (up|down) ", line)
        if m and m.group(1) == url:
            out.append(m.group(2))
    return out


def raw_stream(gw, body, headers=b""):
    """Starts a streamed request on a raw socket; returns (socket, header bytes, first body bytes)."""
    s = socket.create_connection(("127.0.0.1", gw.port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%s"
              b"Content-Length: %d\r\n\r\n%s" % (headers, len(data), data))
    got = read_until(s, b"data: ")
    head, _, rest = got.partition(b"\r\n\r\n")
    return s, head, rest


def read_to_close(s, limit=15):
    """Reads until the server closes; raises if it is still open after limit s."""
    s.settimeout(limit)
    got = b""
    t0 = time.monotonic()
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return got, time.monotonic() - t0
            got += d
    except ConnectionResetError:
        return got, time.monotonic() - t0
    except socket.timeout:
        raise AssertionError(f"stream still open {limit}s after the backend died: {got[-300:]!r}")


def unchunk(data):
    """The payload of a chunked body, as far as it goes (no final chunk needed)."""
    out = b""
    while data:
        line, sep, rest = data.partition(b"\r\n")
        if not sep:
            break
        try:
            n = int(line.split(b";")[0], 16)
        except ValueError:
            break
        if n == 0 or len(rest) < n:
            out += rest[:n]
            break
        out += rest[:n]
        data = rest[n + 2:]
    return out


# ------------------------------------------------------------ bulk helpers

class Dir:
    def __init__(self, base=None):
        self.path = tempfile.mkdtemp(prefix="ig-faults-", dir=base)

    def __call__(self, name):
        return os.path.join(self.path, name)

    def cleanup(self):
        shutil.rmtree(self.path, ignore_errors=True)


def bulk(*args, timeout=110):
    p = subprocess.run([binary("infergate-bulk"), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def generate(path, count, seed=1):
    rc, _, err = bulk("generate", "--count", count, "--seed", seed, "--kind", "chat", "--output", path)
    assert rc == 0, err


def ids(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                out.append(json.loads(line)["custom_id"])
    return out


def input_ids(path):
    with open(path) as f:
        return [json.loads(line)["custom_id"] for line in f if line.strip()]


def exactly_once(corpus, out, errs=None):
    errs = errs or out.replace(".jsonl", ".errors.jsonl")
    got, bad = ids(out), ids(errs)
    assert len(got) == len(set(got)), f"{len(got) - len(set(got))} ids twice in the output"
    assert not bad, f"{len(bad)} lines in the errors file, e.g. {open(errs).readline()[:300]}"
    assert sorted(got) == sorted(input_ids(corpus)), (len(got), len(input_ids(corpus)))


def lines_in(path):
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return f.read().count(b"\n")


# ----------------------------------------------------- a backend that dies

SEEDED = ("--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "400", "--seed", "7")


def one_stream(gw, body, path="/v1/chat/completions", kill_after=None, sims=(), on_served=None):
    """Streams one request on a raw socket; after kill_after seconds, does on_served(the
    serving simulator) (default: SIGKILL it). Returns (served_by, events as parsed objects or
    "[DONE]")."""
    s = socket.create_connection(("127.0.0.1", gw.port))
    payload = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
              b"Connection: close\r\n\r\n%s" % (path.encode(), len(payload), payload))
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    head, first = data.split(b"\r\n\r\n", 1)
    assert b" 200 " in head.split(b"\r\n")[0], head
    served_by = re.search(rb"X-Infergate-Backend: (\S+)", head, re.I).group(1).decode()
    if kill_after is not None:
        time.sleep(kill_after)
        victim = next(x for x in sims if x.url == served_by)
        (on_served or (lambda v: v.send_signal(signal.SIGKILL)))(victim)
    rest, _ = read_to_close(s, limit=30)
    s.close()
    return served_by, [e if e == "[DONE]" else json.loads(e) for e in sse_events(unchunk(first + rest))]


def stream_text(events, chat=True):
    out = []
    for e in events:
        if e == "[DONE]" or not e.get("choices"):
            continue
        c = e["choices"][0]
        out.append((c.get("delta") or {}).get("content") or "" if chat else c.get("text") or "")
    return "".join(out)


def assert_one_whole_stream(events, want_text, want_usage, chat=True):
    """One stream as a client sees it: [DONE] last, no error event, one id, created and model,
    one role chunk, the text a whole answer has, the usage of the whole answer."""
    assert events and events[-1] == "[DONE]", events[-3:]
    objs = events[:-1]
    assert not any("error" in e for e in objs), [e for e in objs if "error" in e]
    assert len({(e["id"], e["created"], e["model"]) for e in objs}) == 1, {(e["id"], e["created"]) for e in objs}
    if chat:
        roles = [e for e in objs if e.get("choices") and "role" in e["choices"][0].get("delta", {})]
        assert len(roles) == 1, roles
    assert stream_text(objs, chat) == want_text, (stream_text(objs, chat), want_text)
    usage = [e["usage"] for e in objs if e.get("usage")]
    assert usage == [want_usage], (usage, want_usage)
    ends = [e["choices"][0]["finish_reason"] for e in objs if e.get("choices") and e["choices"][0].get("finish_reason")]
    assert ends == ["length"], ends


def direct_answer(sim, body, path="/v1/chat/completions"):
    """What a simulator answers the same request, asked directly, not streamed."""
    b = dict(body, stream=False)
    b.pop("stream_options", None)
    st, _, obj = http_json("POST", sim.url + path, b, timeout=60)
    assert st == 200, obj
    c = obj["choices"][0]
    text = c["message"]["content"] if "message" in c else c["text"]
    u = obj["usage"]
    return text, {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
                  "total_tokens": u["total_tokens"]}


def continuations(gw):
    _, _, text = http("GET", gw.url + "/metrics")
    return {r: metric(text, f'infergate_stream_continuations_total{{reason="{r}"}}')
            for r in ("reset", "error_event", "stall")}


@test
def a_stream_whose_backend_is_killed_goes_on_on_another_word_for_word():
    sims = start_sims(2, *SEEDED)
    gw = start_gateway(sims, *QUICK_HEALTH, "--access-log", "-")
    wait_healthy(gw, 2)
    body = chat_body("die while talking", stream=True, max_tokens=40, stream_options={"include_usage": True})
    served_by, events = one_stream(gw, body, kill_after=0.6, sims=sims)
    survivor = next(x for x in sims if x.url != served_by)
    want_text, want_usage = direct_answer(survivor, body)
    assert_one_whole_stream(events, want_text, want_usage)
    assert continuations(gw) == {"reset": 1, "error_event": 0, "stall": 0}, continuations(gw)
    entry = wait_until(lambda: [json.loads(l) for l in gw.read_log().splitlines()
                                if l.startswith("{") and '"/v1/chat/completions"' in l], timeout=5,
                       what="the access log line")
    assert [(e["status"], e["continuations"], e["backend"], e["completion_tokens"]) for e in entry] == \
        [(200, 1, survivor.url, 40)], entry
    # Without include_usage the client gets no usage event, and the same text.
    pair = [survivor, start_sim(*SEEDED)]
    gw2 = start_gateway(pair, *QUICK_HEALTH)
    wait_healthy(gw2, 2)
    _, events = one_stream(gw2, chat_body("die while talking", stream=True, max_tokens=40), kill_after=0.6,
                           sims=pair)
    assert events[-1] == "[DONE]" and not any("usage" in e for e in events[:-1]), events[-3:]
    assert stream_text(events[:-1]) == want_text


@test
def a_stream_goes_on_on_vllm_which_wants_add_generation_prompt_false():
    # vLLM's ChatCompletionRequest refuses continue_final_message with add_generation_prompt
    # left at its default (true): the continuation sends both.
    sims = start_sims(2, *SEEDED, "--flavor", "vllm")
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_healthy(gw, 2)
    body = chat_body("die on vllm", stream=True, max_tokens=30, stream_options={"include_usage": True})
    served_by, events = one_stream(gw, body, kill_after=0.5, sims=sims)
    survivor = next(x for x in sims if x.url != served_by)
    want_text, want_usage = direct_answer(survivor, body)
    assert_one_whole_stream(events, want_text, want_usage)
    assert continuations(gw)["reset"] == 1


@test
def a_completions_stream_goes_on_after_its_prompt_and_text_so_far():
    sims = start_sims(2, *SEEDED)
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_healthy(gw, 2)
    body = {"model": MODEL, "prompt": "once upon a time", "stream": True, "max_tokens": 30,
            "stream_options": {"include_usage": True}}
    served_by, events = one_stream(gw, body, path="/v1/completions", kill_after=0.5, sims=sims)
    survivor = next(x for x in sims if x.url != served_by)
    want_text, want_usage = direct_answer(survivor, body, "/v1/completions")
    assert_one_whole_stream(events, want_text, want_usage, chat=False)
    assert continuations(gw)["reset"] == 1


@test
def with_continue_max_0_a_killed_backends_stream_ends_with_an_error_event():
    sims = start_sims(2, "--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "400")
    gw = start_gateway(sims, *QUICK_HEALTH, "--continue-max", "0")
    wait_healthy(gw, 2)
    served_by, events = one_stream(gw, chat_body("die while talking", stream=True), kill_after=0.3, sims=sims)
    assert events and "[DONE]" not in events, events[-3:]
    assert set(events[-1]) == {"error"} and events[-1]["error"]["message"] and events[-1]["error"]["type"], events[-1]
    assert any("choices" in e for e in events[:-1]), events[:3]   # tokens came before it
    assert continuations(gw) == {"reset": 0, "error_event": 0, "stall": 0}
    # The survivor serves the next stream whole.
    st, hdrs, data = http("POST", gw.url + "/v1/chat/completions",
                          chat_body("after", stream=True, max_tokens=5), timeout=30)
    assert st == 200 and sse_events(data)[-1] == "[DONE]", data[-200:]
    assert hdrs["x-infergate-backend"] != served_by


@test
def a_stream_that_carries_an_error_event_goes_on_on_another_backend():
    # The first simulator ends every stream with an error event half way (HTTP 200 sent).
    bad = start_sim(*SEEDED, "--stream-fail-rate", "1")
    good = start_sim(*SEEDED)
    gw = start_gateway([bad, good], *QUICK_HEALTH, "--policy", "round-robin")
    wait_healthy(gw, 2)
    body = chat_body("half and half", stream=True, max_tokens=20, stream_options={"include_usage": True})
    want_text, want_usage = direct_answer(good, body)
    served = []
    for _ in range(2):   # round robin: one of the two starts on the bad one
        by, events = one_stream(gw, body)
        served.append(by)
        assert_one_whole_stream(events, want_text, want_usage)
    assert bad.url in served, served
    assert continuations(gw)["error_event"] == 1, continuations(gw)


@test
def a_stream_that_stalls_past_token_gap_timeout_goes_on_on_another_backend():
    sims = start_sims(2, *SEEDED)
    gw = start_gateway(sims, *QUICK_HEALTH, "--token-gap-timeout-ms", "600", "--health-fall", "100")
    wait_healthy(gw, 2)
    body = chat_body("stall while talking", stream=True, max_tokens=30, stream_options={"include_usage": True})
    stopped = []

    def freeze(victim):
        victim.send_signal(signal.SIGSTOP)
        stopped.append(victim)

    try:
        served_by, events = one_stream(gw, body, kill_after=0.5, sims=sims, on_served=freeze)
    finally:
        for v in stopped:
            v.send_signal(signal.SIGCONT)
    survivor = next(x for x in sims if x.url != served_by)
    want_text, want_usage = direct_answer(survivor, body)
    assert_one_whole_stream(events, want_text, want_usage)
    assert continuations(gw) == {"reset": 0, "error_event": 0, "stall": 1}, continuations(gw)


def breaker(gw, url):
    _, _, obj = http_json("GET", gw.url + "/health/backends")
    return next(b["breaker"] for b in obj["backends"] if b["url"] == url)


@test
def a_backends_breaker_opens_after_ten_failures_in_a_row_and_closes_after_a_good_trial():
    failing = {"on": True}

    def handler(fb, req, sock):
        if req["method"] == "POST" and failing["on"]:
            FakeBackend.reply(sock, 503, {"error": {"message": "overloaded", "type": "x", "code": 503}})
            return True
        return FakeBackend.answer_ok(fb, req, sock)

    bad, good = FakeBackend(handler), FakeBackend()
    # health.fall high: the breaker alone keeps requests away (the probes pass).
    gw = start_gateway([bad, good], *QUICK_HEALTH, "--policy", "round-robin", "--health-fall", "100",
                       "--breaker-failures", "10", "--breaker-open-ms", "1500")
    wait_healthy(gw, 2)

    def send(n):
        for _ in range(n):
            st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("x"), timeout=30)
            assert st == 200, st      # retried on the good one
    # Round robin: every other request starts on the bad one; 19 requests, 10 failures there.
    send(19)
    assert len(bad.posts()) == 10, len(bad.posts())
    b = breaker(gw, bad.url)
    assert b["state"] == "open" and b["opened"] == 1 and b["failures_in_a_row"] == 10, b
    _, _, text = http("GET", gw.url + "/metrics")
    assert metric(text, f'infergate_backend_breaker_state{{backend="{bad.url}"}}') == 1
    assert metric(text, f'infergate_backend_breaker_opened_total{{backend="{bad.url}"}}') == 1
    # Open: nothing is sent there.
    send(10)
    assert len(bad.posts()) == 10, len(bad.posts())
    # Half-open, still failing: one trial, it fails, the breaker opens again.
    wait_until(lambda: breaker(gw, bad.url)["state"] == "half_open", timeout=10, what="half-open")
    send(4)
    assert len(bad.posts()) == 11, len(bad.posts())
    b = breaker(gw, bad.url)
    assert b["state"] == "open" and b["opened"] == 2, b
    # It recovers: the next trial succeeds and the breaker closes.
    failing["on"] = False
    wait_until(lambda: breaker(gw, bad.url)["state"] == "half_open", timeout=10, what="half-open again")
    send(4)
    assert len(bad.posts()) >= 12, len(bad.posts())
    b = breaker(gw, bad.url)
    assert b["state"] == "closed" and b["failures_in_a_row"] == 0 and b["opened"] == 2, b
    assert "circuit breaker closed" in gw.read_log()


def hedges(gw):
    _, _, text = http("GET", gw.url + "/metrics")
    return {o: metric(text, f'infergate_hedges_total{{outcome="{o}"}}') for o in ("sent", "won", "lost", "not_sent")}


def sim_aborted(sim):
    _, _, text = http("GET", sim.url + "/metrics")
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.decode().splitlines()
               if l.startswith("infergate_sim_requests_aborted_total{"))


@test
def a_straggler_is_hedged_on_another_backend_and_the_first_byte_wins():
    slow = start_sim("--tokens-per-second", "0", "--ttft-ms", "3000", "--output-tokens", "10", "--seed", "3")
    quick = start_sim("--tokens-per-second", "0", "--ttft-ms", "10", "--output-tokens", "10", "--seed", "3")
    gw = start_gateway([slow, quick], "--policy", "round-robin", "--hedge-after-ms", "200",
                       "--hedge-budget-percent", "100", "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    want = direct_answer(quick, chat_body("hedge me"))[0]
    got = []
    for stream in (False, False, True, True):   # round robin: one of each pair starts on the slow one
        st, h, b = http("POST", gw.url + "/v1/chat/completions", chat_body("hedge me", stream=stream), timeout=30)
        assert st == 200, (st, b)
        text = json.loads(b)["choices"][0]["message"]["content"] if not stream else \
            "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in sse_events(b)[:-1]
                    if json.loads(e).get("choices"))
        got.append((h["x-infergate-backend"], h.get("x-infergate-hedged"), text == want))
    # Every answer came from the quick one, the same text; two were hedged there.
    assert [g[0] for g in got] == [quick.url] * 4 and all(g[2] for g in got), got
    assert sorted(g[1] or "" for g in got) == ["", "", "true", "true"], got
    assert hedges(gw) == {"sent": 2, "won": 2, "lost": 0, "not_sent": 0}, hedges(gw)
    # The slow one's requests were dropped (aborted), not left to run.
    wait_until(lambda: sim_aborted(slow) == 2, timeout=10, what="the slow backend's requests aborted")
    assert metric(http("GET", gw.url + "/metrics")[2], "infergate_inflight_requests") == 0


@test
def a_primary_that_answers_first_drops_its_hedge():
    # A answers after 700 ms, B after 4 s; hedged after 200 ms: a request that starts on A
    # wins over its hedge on B; one that starts on B is answered by its hedge on A.
    a = start_sim("--tokens-per-second", "0", "--ttft-ms", "700", "--output-tokens", "5")
    b = start_sim("--tokens-per-second", "0", "--ttft-ms", "4000", "--output-tokens", "5")
    gw = start_gateway([a, b], "--policy", "round-robin", "--hedge-after-ms", "200", "--hedge-budget-percent", "100",
                       "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    served = [http("POST", gw.url + "/v1/chat/completions", chat_body(f"race {i}"), timeout=30)[1]["x-infergate-backend"]
              for i in range(2)]
    assert served == [a.url, a.url], served
    assert hedges(gw) == {"sent": 2, "won": 1, "lost": 1, "not_sent": 0}, hedges(gw)
    wait_until(lambda: sim_aborted(b) == 2, timeout=10, what="both of B's requests dropped")
    assert sim_aborted(a) == 0
    # Each race's loser was sent the prompt ("user" + "race N" + 2, at 4 bytes a token: 3 tokens)
    # and held B for at least the 200 ms before its hedge.
    text = http("GET", gw.url + "/metrics")[2]
    assert metric(text, "infergate_hedge_waste_prompt_tokens_total") == 2 * 3, text
    assert metric(text, "infergate_hedge_waste_seconds_total") >= 0.2, text


@test
def hedging_after_the_models_learned_p95_time_to_first_byte():
    sims = start_sims(2, "--tokens-per-second", "0", "--ttft-ms", "50", "--output-tokens", "5")
    gw = start_gateway(sims, "--policy", "round-robin", "--hedge-after-ms", "-1", "--hedge-budget-percent", "100",
                       "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    # 32 answers are needed before the p95 is learned; it is, at the 32nd's end. No request runs
    # with it learned before the fault (a quick one over it on a loaded machine would be hedged).
    for i in range(32):
        assert http("POST", gw.url + "/v1/chat/completions", chat_body(f"learn {i}"), timeout=30)[0] == 200
    p95 = metric(http("GET", gw.url + "/metrics")[2], 'infergate_model_ttfb_p95_seconds{model="sim-model"}')
    assert 0.04 <= p95 < 0.5, p95
    assert hedges(gw)["sent"] == 0, hedges(gw)   # nothing hedged while it was learned
    set_fault(sims[0], "slow")                    # ten times slower to its first token: 500 ms
    served = [http("POST", gw.url + "/v1/chat/completions", chat_body(f"after {i}"), timeout=30)[1]
              for i in range(4)]
    # Those that started on the slowed server (round robin: at least every other one) were
    # answered by their hedges, and the slow one's attempts dropped; a quick one a little over
    # the p95 may be hedged too (5% of them).
    assert [h["x-infergate-backend"] for h in served] == [sims[1].url] * 4, served
    assert any(h.get("x-infergate-hedged") == "true" for h in served), served
    assert hedges(gw)["won"] >= 1, hedges(gw)
    wait_until(lambda: sim_aborted(sims[0]) >= 1, timeout=10, what="the slowed server's attempts dropped")


@test
def hedges_stay_within_their_budget_and_class_low_is_hedged_only_when_configured():
    slow = start_sim("--tokens-per-second", "0", "--ttft-ms", "600", "--output-tokens", "5")
    quick = start_sim(*FAST)
    gw = start_gateway([slow, quick], "--policy", "round-robin", "--hedge-after-ms", "100",
                       "--hedge-budget-percent", "0", "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    served = [http("POST", gw.url + "/v1/chat/completions", chat_body(f"b {i}"), timeout=30)[1]["x-infergate-backend"]
              for i in range(2)]
    assert sorted(served) == sorted([slow.url, quick.url]), served   # the slow one answered its own
    assert hedges(gw)["sent"] == 0 and hedges(gw)["not_sent"] == 1, hedges(gw)
    gw.stop()
    gw = start_gateway([slow, quick], "--policy", "round-robin", "--hedge-after-ms", "100",
                       "--hedge-budget-percent", "100", "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    served = [http("POST", gw.url + "/v1/chat/completions", chat_body(f"l {i}"), timeout=30,
                   headers={"X-Infergate-Priority": "low"})[1]["x-infergate-backend"] for i in range(2)]
    assert sorted(served) == sorted([slow.url, quick.url]), served
    assert hedges(gw) == {"sent": 0, "won": 0, "lost": 0, "not_sent": 0}, hedges(gw)
    gw.stop()
    # hedge.low: class low is hedged too
    gw = start_gateway([slow, quick], "--policy", "round-robin", "--hedge-after-ms", "100",
                       "--hedge-budget-percent", "100", "--hedge-low", "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    served = [http("POST", gw.url + "/v1/chat/completions", chat_body(f"h {i}"), timeout=30,
                   headers={"X-Infergate-Priority": "low"})[1]["x-infergate-backend"] for i in range(2)]
    assert served == [quick.url] * 2, served
    assert hedges(gw) == {"sent": 1, "won": 1, "lost": 0, "not_sent": 0}, hedges(gw)


@test
def non_streamed_requests_in_flight_on_a_killed_backend_are_retried():
    sims = start_sims(3, "--tokens-per-second", "50", "--ttft-ms", "0", "--output-tokens", "60")
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_healthy(gw, 3)
    victim = sims[1]
    results = {}

    def one(i):
        results[i] = http("POST", gw.url + "/v1/chat/completions", chat_body(f"in flight {i}"), timeout=60)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(30)]
    for t in threads:
        t.start()
    # Every request is mid-generation (60 tokens at 50/s) when the victim dies.
    wait_until(lambda: http_json("GET", victim.url + "/sim/state")[2]["num_running_reqs"] >= 5,
               timeout=10, what="requests running on the victim")
    time.sleep(0.2)
    victim.send_signal(signal.SIGKILL)
    for t in threads:
        t.join(60)
    codes = sorted(r[0] for r in results.values())
    assert codes == [200] * 30, codes
    served = {r[1]["x-infergate-backend"] for r in results.values()}
    assert victim.url not in served, served
    for st, _, body in results.values():
        assert json.loads(body)["usage"]["completion_tokens"] == 60
    _, _, text = http("GET", gw.url + "/metrics")
    assert metric(text, "infergate_retries_total") >= 5, text


@test
def bulk_streaming_through_gateway_survives_a_killed_backend():
    d = Dir()
    try:
        sims = start_sims(3, "--tokens-per-second", "400", "--ttft-ms", "5", "--output-tokens", "20")
        gw = start_gateway(sims, *QUICK_HEALTH)
        wait_healthy(gw, 3)
        generate(d("c.jsonl"), 1500, seed=3)
        p = start([binary("infergate-bulk"), "--input", d("c.jsonl"), "--output", d("o.jsonl"),
                   "--url", gw.url, "--model", MODEL, "--concurrency", 48, "--stream",
                   "--backoff-ms", 50, "--retries", 10])
        wait_until(lambda: lines_in(d("o.jsonl")) >= 300 or p.poll() is not None, timeout=60,
                   what="a fifth of the run done")
        sims[0].send_signal(signal.SIGKILL)
        assert p.wait(timeout=100) == 0, p.read_log()[-2000:]
        exactly_once(d("c.jsonl"), d("o.jsonl"))
        # Streams cut by the kill were retried whole: every body is complete.
        with open(d("o.jsonl")) as f:
            for line in f:
                body = json.loads(line)["response"]["body"]
                assert body["usage"]["completion_tokens"] == 20, body
                assert body["choices"][0]["finish_reason"] in ("length", "stop"), body
    finally:
        d.cleanup()


# ------------------------------------------- backends that hang or crawl

@test
def hung_backend_is_timed_out_retried_and_ejected_by_fall():
    sims = start_sims(3, *FAST)
    gw = start_gateway(sims, "--idle-timeout-s", "1", "--health-interval-ms", "200",
                       "--health-rise", "2", "--health-fall", "3")
    wait_healthy(gw, 3)
    hung = sims[2]
    set_fault(hung, "hang")
    t0 = time.monotonic()
    res = parallel(lambda i: http("POST", gw.url + "/v1/chat/completions", chat_body(f"h{i}"), timeout=30),
                   range(40), workers=8)
    took = time.monotonic() - t0
    assert [r[0] for r in res] == [200] * 40, [r[0] for r in res]
    assert hung.url not in {r[1]["x-infergate-backend"] for r in res}
    assert took >= 1.0, took                                 # some waited out the idle timeout
    _, _, text = http("GET", gw.url + "/metrics")
    timeouts = metric(text, 'infergate_upstream_errors_total{type="timeout"}')
    assert timeouts >= 1, text
    # /health stays 200 on a hung sim, so only timeouts eject it: a down
    # needs `fall` (3) of them, so the log cannot show more downs than that allows.
    downs = state_lines(gw, hung.url).count("down")
    assert downs <= timeouts // 3 + 1, (downs, timeouts, gw.read_log()[-2000:])


@test
def slow_backend_streams_to_the_end_past_the_idle_timeout():
    sim = start_sim("--tokens-per-second", "40", "--ttft-ms", "20", "--output-tokens", "12")
    gw = start_gateway([sim], "--idle-timeout-s", "1")
    wait_healthy(gw, 1)
    set_fault(sim, "slow")                                    # TTFT x10, 4 tokens/s
    t0 = time.monotonic()
    st, hdrs, data = http("POST", gw.url + "/v1/chat/completions", chat_body("slow", stream=True), timeout=60)
    took = time.monotonic() - t0
    events = sse_events(data)
    assert st == 200 and events[-1] == "[DONE]", (st, events[-3:])
    text = "".join(c["delta"].get("content") or "" for e in events[:-1] for c in json.loads(e)["choices"])
    assert text, events[:3]
    assert took > 2.0, took                                   # longer than idle_s: no total deadline
    # Not streamed, the backend sends nothing until it is done: under idle_s
    # that is fine, over it a 504 (documented: idle_s must exceed the longest
    # non-streamed generation).
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("slow too", max_tokens=2),
                           timeout=60)
    assert st == 200 and obj["usage"]["completion_tokens"] == 2, obj


# ------------------------------------------------------- garbage backends

def garbage_handler(mode):
    def handler(fb, req, sock):
        if req["method"] == "GET":
            return FakeBackend.answer_ok(fb, req, sock)
        if mode == "close_at_once":
            return False
        if mode == "not_http":
            sock.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\xff\xfe garbage\r\n\r\n")
            return False
        if mode == "truncated_length":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
                         b'{"id":"trunc","choices":[')
            return False
        if mode == "truncated_chunked":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"10\r\n{\"id\":\"trunc\",\"c\r\n")
            return False
        if mode == "bad_chunk_size":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"zzzz\r\nhello\r\n0\r\n\r\n")
            return False
        if mode == "headers_then_close":
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n")
            return False
        if mode == "status_502":
            FakeBackend.reply(sock, 502, b"<html>bad gateway</html>", "text/html")
            return True
        raise AssertionError(mode)
    return handler


@test
def garbage_answers_are_retried_on_a_good_backend_or_reported():
    modes = ["close_at_once", "not_http", "truncated_length", "truncated_chunked", "bad_chunk_size",
             "headers_then_close", "status_502"]
    for mode in modes:
        fb = FakeBackend(garbage_handler(mode))
        good = start_sim(*FAST)
        gw = start_gateway([fb, good], "--policy", "round-robin", "--health-interval-ms", "60000")
        wait_healthy(gw, 2)
        for i in range(4):
            st, hdrs, body = http("POST", gw.url + "/v1/chat/completions", chat_body(f"{mode} {i}"), timeout=30)
            assert st == 200 and hdrs["x-infergate-backend"] == good.url, (mode, st, body[:200])
            assert json.loads(body)["object"] == "chat.completion", (mode, body[:200])
        assert fb.posts(), f"{mode}: the garbage backend was never tried"
        gw.stop()
        # Alone, with no retry: an OpenAI-shaped 502, at once, and the gateway lives on.
        gw = start_gateway([fb], "--retries", "0", "--health-interval-ms", "60000")
        wait_healthy(gw, 1)
        st, hdrs, body = http("POST", gw.url + "/v1/chat/completions", chat_body(mode), timeout=30)
        if mode == "status_502":
            # Its own answer, in OpenAI's shape with its text as the message.
            obj = json.loads(body)
            assert_openai_error(st, obj, 502, "server_error")
            assert obj["error"]["message"] == "<html>bad gateway</html>", obj
        else:
            assert_openai_error(st, json.loads(body), 502)
        assert http("GET", gw.url + "/health")[0] in (200, 503)
        gw.stop()
        good.stop()
        fb.stop()


@test
def a_clients_deadline_ends_the_request_with_a_504_and_aborts_the_backend():
    # X-Infergate-Timeout-Ms: the whole request's deadline (queue, attempts, retries). One slot,
    # 20 tokens/s, 100-token answers (5 s each).
    sim = start_sim("--max-running", "1", "--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "100")
    gw = start_gateway([sim], "--health-interval-ms", "200")
    wait_until(lambda: http_json("GET", gw.url + "/health/backends")[2]["backends"][0].get("limit_from") == "reported",
               timeout=10, what="the stated slot")
    dl = {"X-Infergate-Timeout-Ms": "400"}
    # running, not streamed: a 504 in OpenAI's shape, and the backend's request aborted
    st, _, body = http("POST", gw.url + "/v1/chat/completions", chat_body("slow"), headers=dl, timeout=30)
    assert_openai_error(st, json.loads(body), 504)
    assert json.loads(body)["error"]["code"] == "deadline_exceeded", body
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 0, timeout=5,
               what="the backend's request aborted")
    # streamed: the 200 went out, so the stream ends with an error event (no [DONE])
    s, head, first = raw_stream(gw, chat_body("slow stream", stream=True), b"X-Infergate-Timeout-Ms: 400\r\n")
    rest, _ = read_to_close(s)   # the gateway ends the stream: no last chunk, the connection closed
    s.close()
    events = sse_events(unchunk(first + rest))
    assert head.startswith(b"HTTP/1.1 200") and "[DONE]" not in events, events[-3:]
    assert "deadline" in json.loads(events[-1])["error"]["message"], events[-1]
    # waiting in the queue behind a long request: a 504 that says so, and the one in front runs on
    import threading
    first = {}
    t = threading.Thread(target=lambda: first.update(r=http("POST", gw.url + "/v1/chat/completions",
                                                            chat_body("in front", max_tokens=40), timeout=30)))
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 0, timeout=5,
               what="the backend free")
    t.start()
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 1, timeout=5,
               what="the first running")
    st, _, body = http("POST", gw.url + "/v1/chat/completions", chat_body("behind"), headers=dl, timeout=30)
    assert st == 504 and "waited for a backend" in json.loads(body)["error"]["message"], (st, body)
    t.join()
    assert first["r"][0] == 200
    text = http("GET", gw.url + "/metrics")[2].decode()
    assert metric(text, "infergate_retries_total") == 0  # a deadline is not retried
    b = http_json("GET", gw.url + "/health/backends")[2]["backends"][0]
    assert b["state"] == "up" and b["failures"] == 0 and b["aborted"] >= 2, b
    # a malformed deadline: a 400 that names the header, and nothing sent
    before = http_json("GET", sim.url + "/sim/state")[2]["requests_received"]
    st, _, body = http("POST", gw.url + "/v1/chat/completions", chat_body("x"),
                       headers={"X-Infergate-Timeout-Ms": "soon"})
    obj = json.loads(body)
    assert_openai_error(st, obj, 400)
    assert obj["error"]["param"] == "X-Infergate-Timeout-Ms" and obj["error"]["code"] == "invalid_timeout", obj
    assert http_json("GET", sim.url + "/sim/state")[2]["requests_received"] == before


@test
def a_stream_with_no_first_byte_in_ttft_timeout_is_tried_on_another_backend():
    # One backend takes 5 s to its first token (a long queue of its own), the other 0: with
    # --ttft-timeout-ms 300, every stream ends whole, answered by the quick one.
    slow = start_sim("--ttft-ms", "5000", "--tokens-per-second", "0")
    quick = start_sim(*FAST)
    gw = start_gateway([slow, quick], "--policy", "round-robin", "--ttft-timeout-ms", "300",
                       "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    served = []
    for i in range(4):
        st, hdrs, body = http("POST", gw.url + "/v1/chat/completions", chat_body(f"ttft {i}", stream=True),
                              timeout=30)
        events = sse_events(body)
        assert st == 200 and events[-1] == "[DONE]", (st, events[-3:])
        served.append(hdrs["x-infergate-backend"])
    text = http("GET", gw.url + "/metrics")[2].decode()
    print(f"# streams with a 300 ms first-byte limit over a 5 s and a 0 s backend: served by {served}, "
          f"retries {metric(text, 'infergate_retries_total'):.0f}")
    assert served == [quick.url] * 4, served
    assert metric(text, "infergate_retries_total") >= 1
    wait_until(lambda: http_json("GET", slow.url + "/sim/state")[2]["num_running_reqs"] == 0, timeout=5,
               what="the slow backend's requests cut")
    b = {x["url"]: x for x in http_json("GET", gw.url + "/health/backends")[2]["backends"]}[slow.url]
    assert b["state"] == "up" and b["failures"] == 0, b   # slow to start is busy, not failing


@test
def the_first_byte_timeout_may_differ_by_class():
    # Only class high has a first-byte limit (300 ms); normal and low wait for the slow backend.
    slow = start_sim("--ttft-ms", "1500", "--tokens-per-second", "0")
    quick = start_sim(*FAST)
    gw = start_gateway([slow, quick], "--policy", "round-robin", "--ttft-timeout-high-ms", "300",
                       "--health-interval-ms", "200")
    wait_healthy(gw, 2)
    served = {}
    for klass in ("high", "normal", "low"):
        served[klass] = []
        for i in range(2):   # round robin: one of the two starts on the slow one
            st, hdrs, body = http("POST", gw.url + "/v1/chat/completions",
                                  chat_body(f"{klass} {i}", stream=True, max_tokens=3), timeout=30,
                                  headers={"X-Infergate-Priority": klass})
            assert st == 200 and sse_events(body)[-1] == "[DONE]", (st, body[-200:])
            served[klass].append(hdrs["x-infergate-backend"])
    assert served["high"] == [quick.url] * 2, served
    assert sorted(served["normal"]) == sorted([slow.url, quick.url]), served
    assert sorted(served["low"]) == sorted([slow.url, quick.url]), served
    text = http("GET", gw.url + "/metrics")[2].decode()
    assert metric(text, "infergate_retries_total") == 1, text


@test
def the_timeouts_may_differ_by_route():
    # Chat has its own first-byte limit (300 ms) in the route table; completions keeps the
    # common one (none), so it waits for the slow backend. A bad value is named at start.
    slow = start_sim("--ttft-ms", "1500", "--tokens-per-second", "0")
    quick = start_sim(*FAST)
    d = Dir()
    with open(d("gw.json"), "w") as f:
        json.dump({"routes": [{"path": "/v1/chat/completions", "stream_options": True, "output": True,
                               "ttft_timeout_ms": 300, "token_gap_timeout_ms": 0}, "/v1/completions"]}, f)
    gw = start_gateway([slow, quick], "--policy", "round-robin", "--health-interval-ms", "200", config=d("gw.json"))
    wait_healthy(gw, 2)
    served = {"chat": [], "completions": []}
    for route in ("chat", "completions"):
        for i in range(2):   # round robin: one of the two starts on the slow one
            body = chat_body(f"chat {i}", stream=True, max_tokens=3) if route == "chat" else \
                {"model": "sim-model", "prompt": f"c {i}", "stream": True, "max_tokens": 3}
            st, hdrs, raw = http("POST", f"{gw.url}/v1/{'chat/' if route == 'chat' else ''}completions", body,
                                 timeout=30)
            assert st == 200 and sse_events(raw)[-1] == "[DONE]", (st, raw[-200:])
            served[route].append(hdrs["x-infergate-backend"])
    assert served["chat"] == [quick.url] * 2, served
    assert sorted(served["completions"]) == sorted([slow.url, quick.url]), served
    text = http("GET", gw.url + "/metrics")[2].decode()
    assert metric(text, "infergate_retries_total") == 1, text
    out = subprocess.run([binary("infergate"), "--config", d("gw.json"), "--backend", quick.url, "--check-config"],
                         capture_output=True, text=True, timeout=10)
    chat = json.loads(out.stdout)["routes"][0]
    assert chat["ttft_timeout_ms"] == 300 and chat["token_gap_timeout_ms"] == 0, chat
    with open(d("bad.json"), "w") as f:
        json.dump({"routes": [{"path": "/v1/chat/completions", "ttft_timeout_ms": -5}]}, f)
    bad = subprocess.run([binary("infergate"), "--config", d("bad.json"), "--backend", quick.url, "--check-config"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and "routes[0].ttft_timeout_ms: must be a whole number of milliseconds" in bad.stderr, \
        bad.stderr


@test
def the_retry_budget_caps_retries_when_every_backend_fails():
    # Three backends that close every request at once: with the budget's floor at 0 and 20%, 50
    # requests get at most a fifth of them in retries (the rest fail at once), against two
    # retries each with the defaults (a floor of 10 a second covers them).
    fbs = [FakeBackend(garbage_handler("close_at_once")) for _ in range(3)]
    counts = {}
    for name, extra in (("budget", ("--retry-budget-percent", "20", "--retry-budget-min-per-s", "0")),
                        ("defaults", ())):
        gw = start_gateway(fbs, "--retries", "2", "--health-interval-ms", "60000", "--health-fall", "100",
                           "--breaker-failures", "0", *extra)
        wait_healthy(gw, 3)
        messages = []
        for i in range(50):
            st, _, body = http("POST", gw.url + "/v1/chat/completions", chat_body(f"{name} {i}"), timeout=30)
            assert st == 502, (st, body[:200])
            messages.append(json.loads(body)["error"]["message"])
        text = http("GET", gw.url + "/metrics")[2].decode()
        counts[name] = (metric(text, "infergate_retries_total"), metric(text, "infergate_retries_denied_total"),
                        sum("the retry budget is spent" in m for m in messages))
        gw.stop()
    print(f"# 50 requests, every backend failing: retries/denied/answers saying so: {counts}")
    retries, denied, said = counts["budget"]
    assert 5 <= retries <= 11 and denied >= 39 and said == denied, counts
    assert counts["defaults"] == (100, 0, 0), counts
    for fb in fbs:
        fb.stop()


@test
def a_backend_that_answers_retry_after_is_sent_nothing_new_until_then():
    # SGLang and vLLM answer 429 or 503 when they are overloaded; one that says when to come back
    # (Retry-After) is alive and busy: the request goes to another backend at once, nothing new
    # goes to it until then, and it is not taken for a failing backend.
    def handler(fb, req, sock):
        if req["method"] == "POST" and len(fb.posts()) == 1:
            FakeBackend.reply(sock, 429, {"error": {"message": "too busy"}}, extra=b"Retry-After: 2\r\n")
            return True
        return FakeBackend.answer_ok(fb, req, sock)
    fb = FakeBackend(handler)
    good = start_sim(*FAST)
    gw = start_gateway([fb, good], "--policy", "round-robin", "--health-interval-ms", "60000")
    wait_healthy(gw, 2)
    served = []
    for i in range(8):
        st, hdrs, body = http("POST", gw.url + "/v1/chat/completions", chat_body(f"busy {i}"), timeout=30)
        assert st == 200, (st, body[:200])
        served.append(hdrs["x-infergate-backend"])
    assert len(fb.posts()) == 1 and served == [good.url] * 8, (len(fb.posts()), served)
    b = {x["url"]: x for x in http_json("GET", gw.url + "/health/backends")[2]["backends"]}[fb.url]
    assert b["state"] == "up" and b["failures"] == 0, b
    assert b["retry_after"]["answers"] == 1 and 0 < b["retry_after"]["resting_ms"] <= 2000, b
    text = http("GET", gw.url + "/metrics")[2].decode()
    assert metric(text, 'infergate_backend_retry_after_total{backend="%s"}' % fb.url) == 1
    # its time is up: it gets its turn again
    wait_until(lambda: http_json("GET", gw.url + "/health/backends")[2]["backends"][0]["retry_after"]["resting_ms"]
               == 0, timeout=10, what="the rest over")
    served = [http("POST", gw.url + "/v1/chat/completions", chat_body(f"back {i}"), timeout=30)[1]["x-infergate-backend"]
              for i in range(4)]
    assert fb.url in served and len(fb.posts()) >= 2, served
    gw.stop()
    # Alone, with nowhere else to go: the client gets the backend's own answer with its
    # Retry-After, and the backend stays up.
    fb2 = FakeBackend(lambda fb, req, sock: FakeBackend.reply(sock, 503, {"error": {"message": "overloaded"}},
                                                              extra=b"Retry-After: 30\r\n") or True
                      if req["method"] == "POST" else FakeBackend.answer_ok(fb, req, sock))
    gw = start_gateway([fb2], "--health-interval-ms", "60000")
    wait_healthy(gw, 1)
    st, hdrs, body = http("POST", gw.url + "/v1/chat/completions", chat_body("alone"), timeout=30)
    assert st == 503 and hdrs.get("retry-after") == "30", (st, hdrs)
    assert json.loads(body)["error"]["message"] == "overloaded", body
    assert len(fb2.posts()) == 1
    assert http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1
    fb.stop()
    fb2.stop()


@test
def truncated_stream_from_a_backend_ends_with_an_error_event():
    def handler(fb, req, sock):
        if req["method"] == "GET":
            return FakeBackend.answer_ok(fb, req, sock)
        chunk = b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"%x\r\n%s\r\n" % (len(chunk), chunk))
        time.sleep(0.3)
        sock.sendall(b"3e8\r\ndata: {\"trunc")               # a chunk cut short, then the connection goes
        return False
    fb = FakeBackend(handler)
    gw = start_gateway([fb], "--health-interval-ms", "60000")
    wait_healthy(gw, 1)
    s, head, first = raw_stream(gw, chat_body("cut", stream=True))
    rest, _ = read_to_close(s)   # raises if the gateway leaves the stream open
    s.close()
    events = sse_events(unchunk(first + rest))
    assert json.loads(events[0])["choices"][0]["delta"]["content"] == "Hi", events
    try:
        last = json.loads(events[-1])
    except ValueError:
        raise AssertionError(f"the last event is not JSON: {events[-1]!r}")
    assert set(last) == {"error"} and "[DONE]" not in events, events


@test
def non_json_200_is_relayed_byte_for_byte():
    # The gateway forwards bodies; it does not judge them (the bulk client does).
    junk = b"\x00\xff<html>not json</html>\r\n"

    def handler(fb, req, sock):
        if req["method"] == "GET":
            return FakeBackend.answer_ok(fb, req, sock)
        FakeBackend.reply(sock, 200, junk, "text/html")
        return True
    fb = FakeBackend(handler)
    gw = start_gateway([fb], "--health-interval-ms", "60000")
    wait_healthy(gw, 1)
    st, hdrs, body = http("POST", gw.url + "/v1/chat/completions", chat_body("x"))
    assert st == 200 and body == junk and hdrs["content-type"] == "text/html", (st, hdrs, body)


# ------------------------------------------------------------- flapping

@test
def flapping_backend_changes_state_no_faster_than_rise_and_fall():
    """rise and fall counted in probes, not in time: the simulator answers an
    exact number of /health probes in a row in a mode (POST /sim/fault with
    "probes"), whatever the probe interval or the machine's load, and the
    gateway's log shows each state change once. fall - 1 failed probes in a
    row leave a backend up, fall take it down; rise - 1 good probes in a row
    leave it down, rise bring it back."""
    sim = start_sim(*FAST)
    other = start_sim(*FAST)
    interval, rise, fall = 100, 3, 4
    gw = start_gateway([sim, other], "--health-interval-ms", str(interval), "--health-timeout-ms", "500",
                       "--health-rise", str(rise), "--health-fall", str(fall))
    wait_healthy(gw, 2)

    def probes(result):
        """The gateway's count of sim's probes with that result."""
        text = http("GET", gw.url + "/metrics")[2]
        return int(metric(text, f'infergate_backend_probes_total{{backend="{sim.url}",result="{result}"}}'))

    def last_probe_ok():
        backends = http_json("GET", gw.url + "/health/backends")[2]["backends"]
        return next(b for b in backends if b["url"] == sim.url)["last_probe"]["ok"]

    def run_of(mode, n):
        """n probes in a row answered in `mode` ("down": failed, "ok": passed), then the mode
        before; returns once the gateway has counted those n and the one after them."""
        result = "failed" if mode == "down" else "ok"
        before = probes(result)
        status, _, obj = http_json("POST", sim.url + "/sim/fault", {"mode": mode, "probes": n})
        assert status == 200 and obj["probes_left"] == n, (status, obj)
        wait_until(lambda: probes(result) == before + n, timeout=10, what=f"{n} probes {result}")
        wait_until(lambda: last_probe_ok() == (mode == "down"), timeout=10, what="the probe after them")

    # fall - 1 failures in a row, three times over: still up, no change logged.
    for _ in range(3):
        run_of("down", fall - 1)
    assert states(gw)[sim.url] == "up" and state_lines(gw, sim.url) == ["up"], state_lines(gw, sim.url)
    # fall in a row: down, logged once; then up again after rise good probes.
    run_of("down", fall)
    wait_until(lambda: state_lines(gw, sim.url) == ["up", "down", "up"], timeout=10, what="down, then up again")
    # Down for good; rise - 1 good probes in a row, three times over: still down.
    set_fault(sim, "down")
    wait_until(lambda: state_lines(gw, sim.url) == ["up", "down", "up", "down"], timeout=10, what="down")
    for _ in range(3):
        run_of("ok", rise - 1)
    assert states(gw)[sim.url] == "down", states(gw)
    assert state_lines(gw, sim.url) == ["up", "down", "up", "down"], state_lines(gw, sim.url)
    # rise in a row: up, before the failures that follow take it down again.
    run_of("ok", rise)
    wait_until(lambda: state_lines(gw, sim.url)[:5] == ["up", "down", "up", "down", "up"], timeout=10, what="up")
    assert state_lines(gw, other.url) == ["up"], state_lines(gw, other.url)
    # Requests kept flowing to the other backend all along.
    st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("x"))
    assert st == 200


# --------------------------------------------- outages during a bulk run


@test
def bulk_waits_out_a_server_that_fails_everything_for_a_while():
    # The smallest reproduction of the retry-pool overflow: every request
    # answered 500 for 2 s, 4 in flight, then the server recovers.
    d = Dir()
    try:
        sim = start_sim(*FAST)
        generate(d("c.jsonl"), 60, seed=12)
        set_fault(sim, "error")
        p = start([binary("infergate-bulk"), "--input", d("c.jsonl"), "--output", d("o.jsonl"),
                   "--url", sim.url, "--model", MODEL, "--concurrency", 4, "--retries", 20,
                   "--backoff-ms", 200])
        time.sleep(2)
        set_fault(sim, "ok")
        rc = p.wait(timeout=60)
        assert rc == 0, (rc, p.read_log()[-1500:])
        exactly_once(d("c.jsonl"), d("o.jsonl"))
    finally:
        d.cleanup()


@test
def all_backends_down_for_five_seconds_mid_bulk_run():
    d = Dir()
    try:
        sims = start_sims(3, "--tokens-per-second", "0", "--ttft-ms", "20")
        ports = [s.port for s in sims]
        gw = start_gateway(sims, *QUICK_HEALTH)
        wait_healthy(gw, 3)
        generate(d("c.jsonl"), 4000, seed=8)
        p = start([binary("infergate-bulk"), "--input", d("c.jsonl"), "--output", d("o.jsonl"),
                   "--url", gw.url, "--model", MODEL, "--concurrency", 32, "--retries", 30,
                   "--backoff-ms", 100, "--summary-json", d("s.json")])
        wait_until(lambda: lines_in(d("o.jsonl")) >= 800 or p.poll() is not None, timeout=60,
                   what="a fifth of the run")
        for s in sims:
            s.send_signal(signal.SIGKILL)
        t_down = time.monotonic()
        wait_until(lambda: http("GET", gw.url + "/health")[0] == 503, timeout=5, what="/health 503")
        stalled = lines_in(d("o.jsonl"))
        time.sleep(5)
        assert lines_in(d("o.jsonl")) == stalled                # nothing written while nothing serves
        assert p.poll() is None, p.read_log()[-1500:]           # still trying
        for port in ports:
            start_sim("--tokens-per-second", "0", "--ttft-ms", "20", port=port)
        assert p.wait(timeout=90) == 0, p.read_log()[-2000:]
        exactly_once(d("c.jsonl"), d("o.jsonl"))
        s = json.load(open(d("s.json")))
        assert s["ok"] == 4000 and s["retries"] > 0, s
        print(f"# all backends killed at {stalled} lines, back after 5 s; run done {time.monotonic() - t_down:.1f}s after the kill, "
              f"{s['retries']} retries, every id once")
    finally:
        d.cleanup()


@test
def gateway_restarted_mid_bulk_run():
    d = Dir()
    try:
        sims = start_sims(3, "--tokens-per-second", "0", "--ttft-ms", "20")
        gw = start_gateway(sims)
        wait_healthy(gw, 3)
        port = gw.port
        generate(d("c.jsonl"), 4000, seed=9)
        p = start([binary("infergate-bulk"), "--input", d("c.jsonl"), "--output", d("o.jsonl"),
                   "--url", gw.url, "--model", MODEL, "--concurrency", 32, "--retries", 30,
                   "--backoff-ms", 100, "--summary-json", d("s.json")])
        for cut, sig in ((800, signal.SIGKILL), (2000, signal.SIGTERM)):
            wait_until(lambda: lines_in(d("o.jsonl")) >= cut or p.poll() is not None, timeout=60,
                       what=f"{cut} lines")
            gw.stop(sig, timeout=40)
            time.sleep(1)
            gw = start_gateway(sims, port=port)
        assert p.wait(timeout=90) == 0, p.read_log()[-2000:]
        exactly_once(d("c.jsonl"), d("o.jsonl"))
        s = json.load(open(d("s.json")))
        assert s["ok"] == 4000 and s["retries"] > 0, s
    finally:
        d.cleanup()


@test
def disk_fills_on_tmpfs_then_resume_after_freeing_space():
    # test_bulk.py's full_disk test uses RLIMIT_FSIZE (EFBIG); this is a real
    # ENOSPC on a small tmpfs, space freed by deleting a file, through the gateway.
    if os.geteuid() != 0 or not shutil.which("mount"):
        raise Skip("needs root to mount a tmpfs")
    base = tempfile.mkdtemp(prefix="ig-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1024k", "tmpfs", base], capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(base)
        raise Skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    d = Dir()
    try:
        sims = start_sims(2, *FAST, "--output-tokens", "16")
        gw = start_gateway(sims)
        wait_healthy(gw, 2)
        generate(d("c.jsonl"), 1500, seed=10)
        filler = os.path.join(base, "filler")
        with open(filler, "wb") as f:
            f.write(b"\0" * (640 * 1024))
        out = os.path.join(base, "o.jsonl")
        args = ["--input", d("c.jsonl"), "--output", out, "--url", gw.url, "--model", MODEL,
                "--concurrency", 16]
        rc, so, err = bulk(*args)
        assert rc == 3, (rc, so, err)
        assert "cannot write" in err and "--resume" in err, err
        assert "No space left on device" in err or "space" in err.lower(), err
        partial = ids(out)                                    # whole lines only: json.loads each
        assert 0 < len(partial) < 1500, len(partial)
        assert len(set(partial)) == len(partial)
        os.unlink(filler)                                     # free the space
        rc, so, err = bulk(*args, "--resume")
        assert rc == 0, (rc, so, err)
        exactly_once(d("c.jsonl"), out)
        print(f"# disk full after {len(partial)} lines; resume finished the other {1500 - len(partial)}")
    finally:
        d.cleanup()
        subprocess.run(["umount", "-l", base], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


run()
