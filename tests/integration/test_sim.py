"""Integration tests of infergate-sim: real processes on loopback ports.

Each test asserts what a client would notice: bytes, status codes, counts in
/sim/state, /v1/loads, /get_load and /metrics, exit codes and messages.
"""

import asyncio
import json
import os
import re
import resource
import signal
import socket
import subprocess
import threading
import time
from http.client import HTTPConnection

from harness import (assert_openai_error, binary, http, http_json, metric, run, sse_events,
                     start_sim, test, wait_until)

CHAT = "/v1/chat/completions"
COMP = "/v1/completions"


def chat_body(content, **kw):
    return dict({"model": "m", "messages": [{"role": "user", "content": content}]}, **kw)


def chat(sim, content, **kw):
    status, _, obj = http_json("POST", sim.url + CHAT, chat_body(content, **kw))
    assert status == 200, (status, obj)
    return obj


def stream(sim, path, body):
    """A streamed request: (status, headers, list of decoded events, raw events)."""
    status, headers, data = http("POST", sim.url + path, body)
    assert status == 200, (status, data[:300])
    raw = sse_events(data)
    assert data.endswith(b"data: [DONE]\n\n"), data[-200:]
    return headers, [json.loads(e) for e in raw[:-1]], raw


def load(sim):
    """The simulator's live counts (GET /sim/state)."""
    status, _, obj = http_json("GET", sim.url + "/sim/state")
    assert status == 200, status
    return obj


def metrics(sim):
    """Samples of /metrics as {name: value}, labels dropped (one model per sim)."""
    status, hdrs, data = http("GET", sim.url + "/metrics")
    assert status == 200, status
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            name = name_labels.split("{", 1)[0]
            if name == "infergate_sim_fault_mode":
                name += "{" + name_labels.split("{", 1)[1]
            out[name] = float(value)
    return out


def samples(sim, name, headers=None):
    """Every sample of one metric as [(labels dict, value)]."""
    status, _, data = http("GET", sim.url + "/metrics", headers=headers)
    assert status == 200, status
    out = []
    for line in data.decode().splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) + 1:].rsplit("} ", 1)
            out.append((dict(re.findall(r'([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"', labels)), float(value)))
    return out


def gauge(sim, name, **want):
    """The value of the one sample of `name` whose labels include `want`."""
    got = [v for labels, v in samples(sim, name) if all(labels.get(k) == str(x) for k, x in want.items())]
    assert len(got) == 1, (name, want, samples(sim, name))
    return got[0]


def assert_flat_error(status, obj, want_status, want_type=None):
    """SGLang's error body: flat {"object": "error", "message", "type", "param", "code"}
    (python/sglang/srt/entrypoints/openai/serving_base.py create_error_response)."""
    assert status == want_status, f"status {status}, want {want_status}: {obj}"
    assert isinstance(obj, dict) and obj.get("object") == "error", obj
    assert set(obj) == {"object", "message", "type", "param", "code"}, obj
    assert isinstance(obj["message"], str) and obj["message"], obj
    assert obj["code"] == want_status, obj
    if want_type:
        assert obj["type"] == want_type, obj


def aborted(sim):
    return metrics(sim)["infergate_sim_requests_aborted_total"]


def running_waiting(sim):
    lo = load(sim)
    return lo["num_running_reqs"], lo["num_waiting_reqs"]


def raw_post(sim, path, obj):
    """Sends a request on a raw socket and returns the socket (to drop it later)."""
    s = socket.create_connection(("127.0.0.1", sim.port))
    body = json.dumps(obj).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return s


def set_fault(sim, mode):
    status, _, obj = http_json("POST", sim.url + "/sim/fault", {"mode": mode})
    assert status == 200 and obj["mode"] == mode, (status, obj)


# ---- command line ----

@test
def help_and_version_exit_0():
    p = subprocess.run([binary("infergate-sim"), "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p
    for flag in ("--listen", "--model", "--tokens-per-second", "--ttft-ms", "--max-running",
                 "--output-tokens", "--fail-rate", "--seed", "--version", "--flavor",
                 "--health-delay-ms", "--dp-ranks", "--enable-priority-scheduling",
                 "--metrics-refresh", "--api-key", "--context-length", "--stream-fail-rate",
                 "--schedule-low-priority-values-first", "--disable-priority-preemption",
                 "--priority-scheduling-preemption-threshold"):
        assert flag in p.stdout, flag
    p = subprocess.run([binary("infergate-sim"), "--version"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and re.match(r"infergate-sim \d+\.\d+", p.stdout), p


@test
def bad_flags_exit_2_naming_the_flag():
    cases = [
        (["--bogus"], "--bogus"),
        (["--max-running", "0"], "--max-running"),
        (["--max-running", "lots"], "lots"),
        (["--tokens-per-second", "-1"], "--tokens-per-second"),
        (["--fail-rate", "1.5"], "--fail-rate"),
        (["--ttft-ms=abc"], "abc"),
        (["--listen", "nope"], "nope"),
        (["--listen", "127.0.0.1:99999"], "99999"),
        (["--output-tokens", "x"], "--output-tokens"),
        (["--seed", "-3"], "--seed"),
        (["--log-level", "loud"], "loud"),
        (["--model"], "--model"),
        (["stray"], "stray"),
        (["--flavor", "tgi"], "--flavor"),
        (["--flavor", "SGLang"], "SGLang"),
        (["--health-delay-ms", "600001"], "--health-delay-ms"),
        (["--health-delay-ms", "-1"], "--health-delay-ms"),
        (["--dp-ranks", "0"], "--dp-ranks"),
        (["--dp-ranks", "65"], "--dp-ranks"),
        (["--enable-priority-scheduling=yes"], "--enable-priority-scheduling"),
        (["--metrics-refresh", "sometimes"], "--metrics-refresh"),
        (["--api-key", ""], "--api-key"),
        (["--api-key"], "--api-key"),
        (["--context-length", "-5"], "--context-length"),
        (["--stream-fail-rate", "2"], "--stream-fail-rate"),
        (["--stream-fail-rate", "x"], "--stream-fail-rate"),
        (["--flavor", "vllm", "--metrics-refresh", "sglang"], "--metrics-refresh"),
        (["--flavor", "vllm", "--enable-priority-scheduling"], "--enable-priority-scheduling"),
        (["--schedule-low-priority-values-first"], "--schedule-low-priority-values-first"),
        (["--disable-priority-preemption"], "--disable-priority-preemption"),
        (["--enable-priority-scheduling", "--priority-scheduling-preemption-threshold", "-1"],
         "--priority-scheduling-preemption-threshold"),
    ]
    for args, needle in cases:
        p = subprocess.run([binary("infergate-sim")] + args, capture_output=True, text=True, timeout=10)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert needle in p.stderr, (args, p.stderr)
        assert p.stdout == "", (args, p.stdout)


@test
def port_in_use_fails_with_message():
    sim = start_sim()
    p = subprocess.run([binary("infergate-sim"), "--listen", f"127.0.0.1:{sim.port}"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 1, p
    assert f"127.0.0.1:{sim.port}" in p.stderr, p.stderr


# ---- basic endpoints ----

@test
def health_models_and_model_echo():
    sim = start_sim("--model", "llama-sim", "--tokens-per-second", "0", "--ttft-ms", "0")
    # Both real servers answer /health with an empty body.
    for path in ("/health", "/health_generate"):
        status, hdrs, body = http("GET", sim.url + path)
        assert (status, body) == (200, b""), (path, status, body)
    status, _, obj = http_json("GET", sim.url + "/v1/models")
    assert status == 200 and obj["object"] == "list", obj
    assert [m["id"] for m in obj["data"]] == ["llama-sim"] and obj["data"][0]["object"] == "model", obj
    # The request's model is echoed; without one, --model is used.
    assert chat(sim, "hi")["model"] == "m"
    status, _, obj = http_json("POST", sim.url + CHAT, {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and obj["model"] == "llama-sim", obj
    lo = load(sim)
    assert lo["num_running_reqs"] == 0 and lo["num_waiting_reqs"] == 0, lo


@test
def response_shapes_match_openai():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    before = int(time.time())
    obj = chat(sim, "Describe a harbor.")
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{24}", obj["id"]), obj["id"]
    assert obj["object"] == "chat.completion" and before - 1 <= obj["created"] <= time.time() + 1, obj
    (c,) = obj["choices"]
    assert c["index"] == 0 and c["message"]["role"] == "assistant", c
    assert isinstance(c["message"]["content"], str) and c["message"]["content"], c
    assert c["finish_reason"] == "stop", c
    assert set(obj["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}, obj
    status, _, obj = http_json("POST", sim.url + COMP, {"model": "m", "prompt": "Once upon a time"})
    assert status == 200, obj
    assert re.fullmatch(r"cmpl-[0-9a-f]{24}", obj["id"]) and obj["object"] == "text_completion", obj
    (c,) = obj["choices"]
    assert c["index"] == 0 and isinstance(c["text"], str) and c["text"] and c["finish_reason"] == "stop", c


# ---- text, streams, usage ----

@test
def text_is_deterministic_per_prompt_and_seed():
    a = start_sim("--seed", "1", "--tokens-per-second", "0", "--ttft-ms", "0")
    b = start_sim("--seed", "1", "--tokens-per-second", "0", "--ttft-ms", "0")
    c = start_sim("--seed", "2", "--tokens-per-second", "0", "--ttft-ms", "0")
    for path, body in ((CHAT, chat_body("Tell me about rivers.")),
                       (COMP, {"model": "m", "prompt": "Tell me about rivers."})):
        texts = []
        for sim in (a, a, b, c):
            status, _, data = http("POST", sim.url + path, body)
            assert status == 200, data
            obj = json.loads(data)
            ch = obj["choices"][0]
            texts.append(ch["message"]["content"] if path == CHAT else ch["text"])
        assert texts[0].encode() == texts[1].encode() == texts[2].encode(), texts
        assert texts[0] != texts[3], "a different seed gave the same text"
    other = chat(a, "Tell me about mountains.")["choices"][0]["message"]["content"]
    assert other != chat(a, "Tell me about rivers.")["choices"][0]["message"]["content"]


@test
def stream_framing_chat():
    sim = start_sim("--tokens-per-second", "2000", "--ttft-ms", "5")
    for include_usage in (True, False):
        body = chat_body("Write about a lantern.", stream=True,
                         stream_options={"include_usage": include_usage})
        headers, events, raw = stream(sim, CHAT, body)
        assert headers["content-type"].startswith("text/event-stream"), headers
        assert raw[-1] == "[DONE]", raw[-3:]
        ids = {e["id"] for e in events}
        assert len(ids) == 1 and ids.pop().startswith("chatcmpl-"), events[0]
        assert all(e["object"] == "chat.completion.chunk" and e["model"] == "m" for e in events)
        assert events[0]["choices"][0]["delta"]["role"] == "assistant", events[0]
        assert all("role" not in e["choices"][0]["delta"] for e in events[1:] if e["choices"]), events
        if include_usage:
            usage_ev = events[-1]
            assert usage_ev["choices"] == [] and usage_ev["usage"]["completion_tokens"] > 0, usage_ev
            events = events[:-1]
        else:
            assert all("usage" not in e for e in events), events[-1]
        last = events[-1]["choices"][0]
        assert last["finish_reason"] == "stop" and last["delta"] == {}, events[-1]
        assert all(e["choices"][0]["finish_reason"] is None for e in events[:-1])
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events)
        plain = chat(sim, "Write about a lantern.")["choices"][0]["message"]["content"]
        assert text == plain, (text, plain)
        tokens = [e for e in events if e["choices"][0]["delta"].get("content")]
        if include_usage:
            assert len(tokens) == usage_ev["usage"]["completion_tokens"], (len(tokens), usage_ev)


@test
def stream_framing_completions():
    sim = start_sim("--tokens-per-second", "2000", "--ttft-ms", "5")
    body = {"model": "m", "prompt": "The kernel", "stream": True, "stream_options": {"include_usage": True}}
    _, events, raw = stream(sim, COMP, body)
    assert raw[-1] == "[DONE]"
    usage_ev = events[-1]
    assert usage_ev["choices"] == [] and usage_ev["object"] == "text_completion", usage_ev
    events = events[:-1]
    assert all(e["object"] == "text_completion" and e["id"].startswith("cmpl-") for e in events)
    assert events[-1]["choices"][0]["finish_reason"] == "stop"
    text = "".join(e["choices"][0]["text"] for e in events)
    status, _, obj = http_json("POST", sim.url + COMP, {"model": "m", "prompt": "The kernel"})
    assert obj["choices"][0]["text"] == text
    assert obj["usage"] == usage_ev["usage"], (obj["usage"], usage_ev["usage"])
    assert len(events) - 1 == obj["usage"]["completion_tokens"]


@test
def usage_numbers_are_consistent():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    short = chat(sim, "hello")["usage"]
    again = chat(sim, "hello")["usage"]
    long_ = chat(sim, "hello " * 200)["usage"]
    assert short == again, (short, again)
    assert long_["prompt_tokens"] > short["prompt_tokens"] + 100, (short, long_)
    for u in (short, long_):
        assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
        assert 16 <= u["completion_tokens"] <= 256, u
    lengths = {chat(sim, f"prompt number {i}")["usage"]["completion_tokens"] for i in range(30)}
    assert len(lengths) > 5, lengths   # lengths vary with the prompt
    m = metrics(sim)
    assert m["infergate_sim_requests_served_total"] == 33, m
    sim2 = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "7")
    obj = chat(sim2, "hello")
    assert obj["usage"]["completion_tokens"] == 7 and obj["choices"][0]["finish_reason"] == "stop", obj
    assert len(obj["choices"][0]["message"]["content"].split()) == 7, obj


@test
def max_tokens_is_honoured():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    for kw, want in (({"max_tokens": 5}, 5), ({"max_completion_tokens": 3}, 3),
                     ({"max_tokens": 9, "max_completion_tokens": 4}, 4)):
        obj = chat(sim, "A long story please", **kw)
        assert obj["choices"][0]["finish_reason"] == "length", (kw, obj)
        assert obj["usage"]["completion_tokens"] == want, (kw, obj)
        assert len(obj["choices"][0]["message"]["content"].split()) == want, obj
    _, events, _ = stream(sim, CHAT, chat_body("A long story please", stream=True, max_tokens=5))
    assert events[-1]["choices"][0]["finish_reason"] == "length", events[-1]
    assert sum(1 for e in events if e["choices"][0]["delta"].get("content")) == 5
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "x", "max_tokens": 2})
    assert obj["usage"]["completion_tokens"] == 2 and obj["choices"][0]["finish_reason"] == "length", obj
    # A cap above the answer's length changes nothing.
    sim2 = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")
    obj = chat(sim2, "x", max_tokens=10)
    assert obj["usage"]["completion_tokens"] == 4 and obj["choices"][0]["finish_reason"] == "stop", obj


@test
def pacing_follows_ttft_and_rate():
    sim = start_sim("--tokens-per-second", "50", "--ttft-ms", "200", "--output-tokens", "11")
    t0 = time.monotonic()
    chat(sim, "x")
    dt = time.monotonic() - t0
    # 200 ms to the first token, then 10 more at 20 ms each.
    assert 0.38 <= dt < 3.0, dt


# ---- batch slots and the queue ----

@test
def batch_limit_queues_the_third_request():
    sim = start_sim("--max-running", "2", "--tokens-per-second", "5", "--output-tokens", "100")
    socks = [raw_post(sim, CHAT, chat_body(f"r{i}")) for i in range(3)]
    try:
        wait_until(lambda: running_waiting(sim) == (2, 1), timeout=5, what="2 running, 1 waiting")
        m = metrics(sim)
        assert m["sglang:num_running_reqs"] == 2 and m["sglang:num_queue_reqs"] == 1, m
        # The first client leaves: the queued request takes its slot.
        socks[0].close()
        wait_until(lambda: running_waiting(sim) == (2, 0), timeout=5, what="queued request admitted")
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: running_waiting(sim) == (0, 0), timeout=5, what="slots freed")
    assert aborted(sim) == 3


@test
def queued_requests_are_served_in_order():
    sim = start_sim("--max-running", "1", "--tokens-per-second", "0", "--ttft-ms", "150")
    done = []

    def go(i):
        chat(sim, f"q{i}")
        done.append(i)

    threads = []
    for i in range(3):
        t = threading.Thread(target=go, args=(i,))
        t.start()
        threads.append(t)
        # In (running or waiting) or already answered: under load request 0
        # may finish before request 2 arrives.
        wait_until(lambda: sum(running_waiting(sim)) + len(done) == i + 1, timeout=5, what=f"request {i} in")
    for t in threads:
        t.join(10)
    assert done == [0, 1, 2], done
    assert metrics(sim)["infergate_sim_requests_served_total"] == 3


# ---- disconnects ----

@test
def disconnect_mid_stream_frees_slot_and_counts_abort():
    sim = start_sim("--max-running", "1", "--tokens-per-second", "20", "--output-tokens", "200", "--ttft-ms", "0")
    s = raw_post(sim, CHAT, chat_body("long", stream=True))
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    assert running_waiting(sim) == (1, 0)
    s.close()
    # 200 tokens at 20/s take 10 s: an abort counted before that is the hang-up seen.
    wait_until(lambda: aborted(sim) == 1, timeout=8, what="abort counted")
    assert running_waiting(sim) == (0, 0)
    # The freed slot serves the next request at once.
    sim_fast = chat(sim, "next", max_tokens=2)
    assert sim_fast["usage"]["completion_tokens"] == 2
    m = metrics(sim)
    assert m["infergate_sim_requests_aborted_total"] == 1 and m["infergate_sim_requests_served_total"] == 1, m


@test
def disconnect_non_streamed_and_during_ttft():
    sim = start_sim("--tokens-per-second", "10", "--output-tokens", "100", "--ttft-ms", "0")
    s = raw_post(sim, CHAT, chat_body("non-streamed"))
    wait_until(lambda: running_waiting(sim) == (1, 0), timeout=5, what="running")
    s.close()
    wait_until(lambda: aborted(sim) == 1, timeout=2, what="abort of a non-streamed request")
    assert running_waiting(sim) == (0, 0)
    sim2 = start_sim("--ttft-ms", "20000")
    for st in (True, False):
        s = raw_post(sim2, COMP, {"prompt": "x", "stream": st})
        wait_until(lambda: running_waiting(sim2) == (1, 0), timeout=5, what="in TTFT")
        s.close()
        wait_until(lambda: running_waiting(sim2) == (0, 0), timeout=2, what="slot freed during TTFT")
    assert aborted(sim2) == 2


@test
def disconnect_while_queued():
    sim = start_sim("--max-running", "1", "--tokens-per-second", "5", "--output-tokens", "100")
    a = raw_post(sim, CHAT, chat_body("a", stream=True))
    b = raw_post(sim, CHAT, chat_body("b"))
    c = raw_post(sim, CHAT, chat_body("c", stream=True))
    try:
        wait_until(lambda: running_waiting(sim) == (1, 2), timeout=5, what="1 running, 2 waiting")
        b.close()
        c.close()
        wait_until(lambda: running_waiting(sim) == (1, 0), timeout=2, what="queued requests dropped")
        assert aborted(sim) == 2
    finally:
        a.close()
    wait_until(lambda: running_waiting(sim) == (0, 0), timeout=2, what="all gone")
    assert aborted(sim) == 3


# ---- faults ----

@test
def fault_error_and_fail_rate():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    status, _, obj = http_json("GET", sim.url + "/sim/fault")
    assert status == 200 and obj == {"mode": "ok"}, obj
    set_fault(sim, "error")
    for body in (chat_body("x"), chat_body("x", stream=True)):
        status, _, obj = http_json("POST", sim.url + CHAT, body)
        assert_flat_error(status, obj, 500, "InternalServerError")
    assert http("GET", sim.url + "/health")[0] == 200
    assert metrics(sim)["infergate_sim_requests_failed_total"] == 2
    assert metrics(sim)['infergate_sim_fault_mode{mode="error"}'] == 1
    set_fault(sim, "ok")
    chat(sim, "x")

    def pattern(s):
        return [http("POST", s.url + CHAT, chat_body(f"p{i}"))[0] for i in range(60)]

    a = start_sim("--fail-rate", "0.5", "--seed", "3", "--tokens-per-second", "0", "--ttft-ms", "0")
    b = start_sim("--fail-rate", "0.5", "--seed", "3", "--tokens-per-second", "0", "--ttft-ms", "0")
    pa, pb = pattern(a), pattern(b)
    assert set(pa) == {200, 500} and 10 <= pa.count(500) <= 50, pa
    assert pa == pb, "the same --seed gave different failures"
    assert metrics(a)["infergate_sim_requests_failed_total"] == pa.count(500)
    everything = start_sim("--fail-rate", "1", "--tokens-per-second", "0", "--ttft-ms", "0")
    assert {s for s in pattern(everything)} == {500}


@test
def fault_down():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    set_fault(sim, "down")
    assert http("GET", sim.url + "/health")[::2] == (503, b"")
    status, _, obj = http_json("POST", sim.url + CHAT, chat_body("x"))
    assert_flat_error(status, obj, 503, "ServiceUnavailableError")
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "x", "stream": True})
    assert_flat_error(status, obj, 503)
    for path in ("/get_load", "/v1/loads", "/sim/state"):
        assert http("GET", sim.url + path)[0] == 200, path
    assert metrics(sim)["infergate_sim_requests_rejected_total"] == 2
    set_fault(sim, "ok")
    assert http("GET", sim.url + "/health") [:1] == (200,)
    chat(sim, "x")


@test
def fault_hang_holds_requests_until_the_client_leaves():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    set_fault(sim, "hang")
    socks = [raw_post(sim, CHAT, chat_body("x", stream=st)) for st in (False, True)]
    for s in socks:
        s.settimeout(0.5)
        try:
            data = s.recv(100)
            raise AssertionError(f"hung request answered: {data!r}")
        except socket.timeout:
            pass
    lo = load(sim)
    assert lo["num_hung_reqs"] == 2 and lo["fault"] == "hang", lo
    assert http("GET", sim.url + "/health")[0] == 200
    for s in socks:
        s.close()
    wait_until(lambda: aborted(sim) == 2, timeout=2, what="hung requests aborted")
    assert load(sim)["num_hung_reqs"] == 0
    set_fault(sim, "ok")
    chat(sim, "x")


@test
def fault_slow_is_ten_times_slower():
    sim = start_sim("--tokens-per-second", "100", "--ttft-ms", "10", "--output-tokens", "10")
    t0 = time.monotonic()
    chat(sim, "x")
    normal = time.monotonic() - t0
    set_fault(sim, "slow")
    t0 = time.monotonic()
    _, events, _ = stream(sim, CHAT, chat_body("x", stream=True))
    slow = time.monotonic() - t0
    # normal: 10 ms + 9 x 10 ms; slow: 100 ms + 9 x 100 ms. Only lower
    # bounds: the sim is never faster than its pace, a busy machine is slower.
    assert normal >= 0.095 and slow >= 0.95, (normal, slow)
    set_fault(sim, "ok")
    unpaced = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "5")
    set_fault(unpaced, "slow")
    t0 = time.monotonic()
    chat(unpaced, "x")
    assert time.monotonic() - t0 >= 0.35   # unpaced turns into 10 tokens/s


@test
def fault_mode_rejects_bad_input():
    sim = start_sim()
    status, _, obj = http_json("POST", sim.url + "/sim/fault", {"mode": "broken"})
    assert_openai_error(status, obj, 400)
    assert obj["error"]["param"] == "mode"
    status, _, obj = http_json("POST", sim.url + "/sim/fault", "{nope")
    assert_openai_error(status, obj, 400)
    assert http_json("GET", sim.url + "/sim/fault")[2] == {"mode": "ok"}


@test
def fault_for_a_number_of_probes_then_back():
    """POST /sim/fault {"probes": N}: exactly N /health answers in that mode,
    counted by answer, then the mode before (a prober's timing changes nothing)."""
    sim = start_sim()
    status, _, obj = http_json("POST", sim.url + "/sim/fault", {"mode": "down", "probes": 3})
    assert status == 200 and obj == {"mode": "down", "previous": "ok", "max_running": 256, "probes_left": 3,
                                     "then": "ok"}, obj
    assert http_json("GET", sim.url + "/sim/fault")[2] == {"mode": "down", "probes_left": 3, "then": "ok"}
    assert http("POST", sim.url + CHAT, chat_body("x"))[0] == 503      # the mode, not only /health
    assert [http("GET", sim.url + "/health")[0] for _ in range(5)] == [503, 503, 503, 200, 200]
    assert http_json("GET", sim.url + "/sim/fault")[2] == {"mode": "ok"}
    # from down: two good answers, then down again; a plain mode ends a window
    set_fault(sim, "down")
    http_json("POST", sim.url + "/sim/fault", {"mode": "ok", "probes": 2})
    assert [http("GET", sim.url + "/health")[0] for _ in range(4)] == [200, 200, 503, 503]
    http_json("POST", sim.url + "/sim/fault", {"mode": "ok", "probes": 2})
    set_fault(sim, "error")
    assert [http("GET", sim.url + "/health")[0] for _ in range(3)] == [200, 200, 200]
    assert http_json("GET", sim.url + "/sim/fault")[2] == {"mode": "error"}
    for bad in ({"probes": 2}, {"mode": "down", "probes": 0}, {"mode": "down", "probes": "2"}):
        status, _, obj = http_json("POST", sim.url + "/sim/fault", bad)
        assert_openai_error(status, obj, 400)
    assert "fault mode ok -> down for 3 /health answers" in sim.read_log()


@test
def hold_stops_generations_until_released():
    """POST /sim/hold {"after_tokens": N}: a stream has sent N tokens and no
    more, a whole answer is not written, until the next POST."""
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "6")
    assert http_json("GET", sim.url + "/sim/hold")[2] == {"after_tokens": None, "held": 0}
    status, _, obj = http_json("POST", sim.url + "/sim/hold", {"after_tokens": 2})
    assert status == 200 and obj == {"after_tokens": 2, "held": 0}, obj
    streamed = raw_post(sim, CHAT, chat_body("s", stream=True))
    whole = raw_post(sim, COMP, {"prompt": "w"})
    wait_until(lambda: http_json("GET", sim.url + "/sim/hold")[2]["held"] == 2, timeout=10, what="two held")
    got = b""
    while got.count(b"data: ") < 3:                  # the role chunk and two tokens
        got += streamed.recv(65536)
    streamed.settimeout(0.3)
    try:
        more = streamed.recv(65536)
    except socket.timeout:
        more = b""
    assert more == b"", more                         # nothing past the second token
    assert load(sim)["num_running_reqs"] == 2
    assert http_json("POST", sim.url + "/sim/hold", {"after_tokens": None})[2] == {"after_tokens": None, "held": 0}
    streamed.settimeout(10)
    while b"data: [DONE]" not in got:
        got += streamed.recv(65536)
    events = sse_events(got.split(b"\r\n\r\n", 1)[1].replace(b"\r\n", b"\n"))
    content = [e for e in events[:-1] if '"content":"' in e and '"role"' not in e]
    assert len(content) == 6, events
    whole.settimeout(10)
    answer = b""
    while b'"usage"' not in answer:
        answer += whole.recv(65536)
    assert b'"completion_tokens":6' in answer, answer
    streamed.close()
    whole.close()
    # a held client that leaves frees its slot and the count
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": 0})
    s = raw_post(sim, CHAT, chat_body("gone", stream=True))
    wait_until(lambda: http_json("GET", sim.url + "/sim/hold")[2]["held"] == 1, timeout=10, what="held")
    s.close()
    wait_until(lambda: http_json("GET", sim.url + "/sim/hold")[2]["held"] == 0 and load(sim)["num_running_reqs"] == 0,
               timeout=10, what="the held one aborted")
    for bad in ({}, {"after_tokens": -1}, {"after_tokens": "2"}):
        status, _, obj = http_json("POST", sim.url + "/sim/hold", bad)
        assert_openai_error(status, obj, 400)
    stepped = start_sim("--profile", "h100-8b")
    status, _, obj = http_json("POST", stepped.url + "/sim/hold", {"after_tokens": 1})
    assert_openai_error(status, obj, 400)


# ---- bad requests ----

@test
def bad_requests_get_the_servers_errors():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    # Validation errors: SGLang's RequestValidationError handler answers 400,
    # flat, type "Bad Request", param null; the message names the field.
    cases = [
        ("POST", CHAT, "{not json", "JSON"),
        ("POST", CHAT, "", "JSON"),
        ("POST", CHAT, "[1, 2]", "object"),
        ("POST", CHAT, '"text"', "JSON"),
        ("POST", CHAT, {"model": "m"}, "messages"),
        ("POST", CHAT, {"messages": []}, "messages"),
        ("POST", CHAT, {"messages": "hi"}, "messages"),
        ("POST", CHAT, {"messages": [{"content": "no role"}]}, "messages"),
        ("POST", CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages"),
        ("POST", CHAT, chat_body("x", max_tokens=0), "max_tokens"),
        ("POST", CHAT, chat_body("x", max_tokens="5"), "max_tokens"),
        ("POST", CHAT, chat_body("x", stream="yes"), "stream"),
        ("POST", CHAT, chat_body("x", n=3), "'n'"),
        ("POST", CHAT, dict(chat_body("x"), model=7), "model"),
        ("POST", COMP, {"model": "m"}, "prompt"),
        ("POST", COMP, {"prompt": 42}, "prompt"),
    ]
    for method, path, body, needle in cases:
        status, hdrs, obj = http_json(method, sim.url + path, body)
        assert_flat_error(status, obj, 400, "Bad Request")
        assert obj["param"] is None and needle in obj["message"], (body, obj)
        assert hdrs["content-type"] == "application/json", hdrs
    # Paths and methods no route takes: FastAPI's own bodies.
    routing = [
        ("GET", "/v1/nothing", None, 404),
        ("POST", "/", "{}", 404),
        ("GET", "/sim/nothing", None, 404),
        ("GET", CHAT, None, 405),
        ("DELETE", COMP, None, 405),
        ("POST", "/health", "{}", 405),
        ("PUT", "/metrics", None, 405),
        ("POST", "/v1/loads", "{}", 405),
        ("POST", "/sim/state", "{}", 405),
    ]
    for method, path, body, want in routing:
        status, hdrs, obj = http_json(method, sim.url + path, body)
        assert status == want, (method, path, status, obj)
        assert obj == {"detail": "Not Found" if want == 404 else "Method Not Allowed"}, (path, obj)
        if want == 405:
            assert "allow" in hdrs, (path, hdrs)
            assert method not in hdrs["allow"], hdrs
    assert http("GET", sim.url + "/v1/nothing")[1]["content-type"] == "application/json"
    assert metrics(sim)["infergate_sim_requests_invalid_total"] == len(cases) + len(routing) + 1
    # Array content parts and a one-string prompt list are accepted.
    chat(sim, [{"type": "text", "text": "hello"}])
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": ["hello"]})
    assert status == 200, obj
    status, _, obj = http_json("POST", sim.url + CHAT, "x" * (17 * 1024 * 1024))
    assert_flat_error(status, obj, 413)
    # Without --enable-priority-scheduling a "priority" is not looked at.
    assert chat(sim, "x", priority="high")["object"] == "chat.completion"


@test
def metrics_are_valid_prometheus_text():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    chat(sim, "x")
    status, hdrs, data = http("GET", sim.url + "/metrics")
    assert status == 200 and hdrs["content-type"].startswith("text/plain"), hdrs
    text = data.decode()
    assert text.endswith("\n")
    helped, typed = set(), {}
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                        r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*\})? (-?[0-9.e+]+|NaN|[+-]Inf)$')
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind in ("counter", "gauge"), line
            typed[name] = kind
        else:
            m = sample.match(line)
            assert m, f"bad sample line: {line!r}"
            assert m.group(1) in typed and m.group(1) in helped, f"no HELP/TYPE before {line!r}"
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
        assert typed.get(name) == "gauge", name
    for name in ("infergate_sim_requests_served_total", "infergate_sim_requests_aborted_total",
                 "infergate_sim_requests_failed_total"):
        assert typed.get(name) == "counter", name
    m = metrics(sim)
    assert m["infergate_sim_requests_served_total"] == 1 and m["sglang:generation_tokens_total"] > 0, m


# ---- behaviours of the real servers ----

@test
def health_delay_defers_the_answer_without_blocking():
    delay = 4.0
    sim = start_sim("--health-delay-ms", str(int(delay * 1000)), "--tokens-per-second", "0", "--ttft-ms", "0")
    done = {}

    def probe(method, path):
        t0 = time.monotonic()
        status, _, body = http(method, sim.url + path)
        done[(method, path)] = (status, body, time.monotonic() - t0, time.monotonic())

    probes = [("GET", "/health"), ("GET", "/health_generate"), ("HEAD", "/health")]
    threads = [threading.Thread(target=probe, args=p) for p in probes]
    for t in threads:
        t.start()
    time.sleep(0.3)   # let the probes arrive: not an assertion
    # Meanwhile the reactor answers everything else.
    chat(sim, "meanwhile")
    assert http_json("GET", sim.url + "/v1/models")[0] == 200
    assert http("GET", sim.url + "/metrics")[0] == 200
    answered_others = time.monotonic()
    # A probe whose client leaves during the delay is dropped quietly.
    gone = socket.create_connection(("127.0.0.1", sim.port))
    gone.sendall(b"GET /health HTTP/1.1\r\nHost: sim\r\n\r\n")
    gone.close()
    for t in threads:
        t.join(60)
    assert sorted(done) == sorted(probes), done
    for key, (status, body, dt, finished) in done.items():
        assert (status, body) == (200, b""), (key, status, body)
        assert dt >= delay, f"{key} answered after {dt:.3f}s, before the {delay}s delay"
        assert finished > answered_others, "another request waited for the health probe"
    # Down: 503 with no body, without the delay's wait being needed.
    set_fault(sim, "down")
    assert http("GET", sim.url + "/health")[::2] == (503, b"")
    set_fault(sim, "ok")
    assert http("GET", sim.url + "/health")[::2] == (200, b"")
    assert sim.stop(signal.SIGTERM) == 0, sim.read_log()
    assert "LeakSanitizer" not in sim.read_log()


@test
def dp_ranks_split_requests_round_robin():
    sim = start_sim("--dp-ranks", "4", "--max-running", "1", "--tokens-per-second", "5",
                    "--output-tokens", "100", "--ttft-ms", "0")
    socks = [raw_post(sim, CHAT, chat_body(f"r{i}", stream=i % 2 == 0)) for i in range(4)]
    try:
        # Four long requests: one on each rank (round-robin), none waiting.
        wait_until(lambda: running_waiting(sim) == (4, 0), timeout=5, what="4 running")
        assert [(r["num_running_reqs"], r["num_waiting_reqs"]) for r in load(sim)["ranks"]] == [(1, 0)] * 4
        # Four more: each rank has its own slot and its own queue.
        socks += [raw_post(sim, CHAT, chat_body(f"r{i}")) for i in range(4, 8)]
        wait_until(lambda: running_waiting(sim) == (4, 4), timeout=5, what="4 running, 4 waiting")
        assert [(r["num_running_reqs"], r["num_waiting_reqs"]) for r in load(sim)["ranks"]] == [(1, 1)] * 4
        status, _, obj = http_json("GET", sim.url + "/v1/loads")
        assert status == 200, obj
        assert [(x["dp_rank"], x["num_running_reqs"], x["num_waiting_reqs"]) for x in obj["loads"]] == \
            [(i, 1, 1) for i in range(4)], obj
        status, _, arr = http_json("GET", sim.url + "/get_load")
        assert [(x["dp_rank"], x["num_reqs"], x["num_waiting_reqs"]) for x in arr] == \
            [(i, 2, 1) for i in range(4)], arr
        for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
            got = sorted((labels["dp_rank"], v) for labels, v in samples(sim, name))
            assert got == [(str(i), 1.0) for i in range(4)], (name, got)
        # A client leaves: only its rank changes (its waiting request moves up).
        socks[0].close()
        wait_until(lambda: sorted((r["num_running_reqs"], r["num_waiting_reqs"]) for r in load(sim)["ranks"])
                   == [(1, 0), (1, 1), (1, 1), (1, 1)], timeout=5, what="one rank's queue moved up")
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: running_waiting(sim) == (0, 0), timeout=5, what="all gone")
    # One rank (the default): no dp_rank label, one series.
    one = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    (labels, v), = samples(one, "sglang:num_running_reqs")
    assert labels == {"engine_type": "unified", "model_name": "sim-model", "moe_ep_rank": "0",
                      "pp_rank": "0", "tp_rank": "0"}, labels
    assert len(http_json("GET", one.url + "/v1/loads")[2]["loads"]) == 1


LOWEST = str(-2**63)


@test
def priority_scheduling_runs_larger_first_and_preempts_as_sglang():
    # One slot: a low request (-20) runs; 0 (20 above it, over the threshold of 10) preempts it,
    # then 5, 3 and -15 queue behind 0 in priority order (5 does not preempt 0: only 5 apart),
    # the preempted one back among them by its priority. Every stream ends whole, the preempted
    # one too. /server_info says how it schedules.
    sim = start_sim("--enable-priority-scheduling", "--max-running", "1", "--tokens-per-second", "40",
                    "--output-tokens", "40", "--ttft-ms", "0")
    info = http_json("GET", sim.url + "/server_info")[2]
    assert info["enable_priority_scheduling"] is True and info["disable_priority_preemption"] is False, info
    assert info["priority_scheduling_preemption_threshold"] == 10, info
    assert info["schedule_low_priority_values_first"] is False and info["max_running_requests"] == 1, info
    assert http_json("GET", sim.url + "/get_server_info")[2] == info   # the older name
    state = lambda: http_json("GET", sim.url + "/sim/state")[2]
    done, words = [], {}

    def go(name, prio):
        _, events, _ = stream(sim, CHAT, chat_body(name, priority=prio, stream=True))
        words[name] = sum(1 for e in events if e["choices"] and e["choices"][0]["delta"].get("content"))
        done.append(name)
    threads = []
    for n, (name, prio) in enumerate((("low", -20), ("zero", 0), ("five", 5), ("three", 3), ("minus15", -15))):
        threads.append(threading.Thread(target=go, args=(name, prio)))
        threads[-1].start()
        wait_until(lambda: state()["requests_received"] == n + 1, timeout=5, what=name)
        if name == "low":
            wait_until(lambda: running_waiting(sim) == (1, 0), timeout=5, what="low running")
        if name == "zero":   # counted when its headers came; submitted (and preempting) with its body
            wait_until(lambda: state()["requests_preempted"] == 1, timeout=5, what="low preempted")
    for t in threads:
        t.join(30)
    assert done == ["zero", "five", "three", "minus15", "low"], done
    assert words == {"low": 40, "zero": 40, "five": 40, "three": 40, "minus15": 40}, words
    assert state()["requests_preempted"] == 1, state()


@test
def priority_series_for_every_priority_seen():
    sim = start_sim("--enable-priority-scheduling", "--max-running", "1", "--tokens-per-second", "5",
                    "--output-tokens", "100", "--ttft-ms", "0")
    for bad in ("high", 1.5, [1], True):
        status, _, obj = http_json("POST", sim.url + CHAT, chat_body("x", priority=bad))
        assert_flat_error(status, obj, 400, "Bad Request")
        assert "priority" in obj["message"], obj

    def by_priority(name):
        return {labels["priority"]: v for labels, v in samples(sim, name)}

    # Before any request: the total only, under priority="".
    assert by_priority("sglang:num_running_reqs") == {"": 0}
    socks = [raw_post(sim, CHAT, chat_body("a", priority=5))]
    try:
        wait_until(lambda: running_waiting(sim) == (1, 0), timeout=5, what="a running")
        socks += [raw_post(sim, CHAT, chat_body("b", priority=0)), raw_post(sim, COMP, {"prompt": "c", "priority": 5}),
                  raw_post(sim, CHAT, chat_body("d")), raw_post(sim, CHAT, chat_body("e", priority=-2))]
        wait_until(lambda: running_waiting(sim) == (1, 4), timeout=5, what="4 waiting")
        # d sent none: SGLang gives it the lowest priority there is, -sys.maxsize - 1
        assert by_priority("sglang:num_running_reqs") == {"": 1, "-2": 0, "0": 0, "5": 1, LOWEST: 0}
        assert by_priority("sglang:num_queue_reqs") == {"": 4, "-2": 1, "0": 1, "5": 1, LOWEST: 1}
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: running_waiting(sim) == (0, 0), timeout=5, what="all gone")
    # A priority seen once keeps its series, at 0.
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
        assert by_priority(name) == {"": 0, "-2": 0, "0": 0, "5": 0, LOWEST: 0}, name
    # The other SGLang metrics carry priority="" too.
    assert {labels["priority"] for labels, _ in samples(sim, "sglang:num_requests_total")} == {""}


@test
def metrics_refresh_sglang_leaves_gauges_stale():
    # max_tokens 1 and a 1 s TTFT: `a` holds the only slot for a second.
    # 40 decode steps at 2 tokens/s: a decode log only every 20 s.
    sim = start_sim("--metrics-refresh", "sglang", "--max-running", "1", "--tokens-per-second", "2",
                    "--ttft-ms", "1000", "--output-tokens", "1000")
    socks = [raw_post(sim, CHAT, chat_body("a", max_tokens=1))]
    try:
        wait_until(lambda: running_waiting(sim) == (1, 0), timeout=5, what="a running")
        for i, name in enumerate("bcd"):   # one by one: b, c, d queue in this order
            socks.append(raw_post(sim, CHAT, chat_body(name)))
            wait_until(lambda: running_waiting(sim) == (1, i + 1), timeout=5, what=f"{name} queued")
        # When `a` ends, b gets the slot: SGLang logs that prefill batch with
        # the queue it leaves behind (c, d) and the batch before b joined.
        wait_until(lambda: metrics(sim)["sglang:num_queue_reqs"] == 2, timeout=10, what="prefill log")
        assert metrics(sim)["sglang:num_running_reqs"] == 0
        assert running_waiting(sim) == (1, 2)
        # The queued clients leave, then the running one: nothing is logged.
        for s in socks[2:]:
            s.close()
        wait_until(lambda: running_waiting(sim) == (1, 0), timeout=5, what="c, d gone")
        socks[1].close()
        wait_until(lambda: running_waiting(sim) == (0, 0), timeout=5, what="b gone")
    finally:
        for s in socks:
            s.close()
    # The live endpoints say idle; /metrics still shows the burst (until the
    # 30 s idle refresh).
    loads = http_json("GET", sim.url + "/v1/loads")[2]["loads"]
    assert [(x["num_running_reqs"], x["num_waiting_reqs"]) for x in loads] == [(0, 0)], loads
    assert [(x["num_reqs"], x["num_waiting_reqs"]) for x in http_json("GET", sim.url + "/get_load")[2]] == [(0, 0)]
    m = metrics(sim)
    assert m["sglang:num_queue_reqs"] == 2 and m["sglang:num_running_reqs"] == 0, m
    # Live (the default) follows at once.
    live = start_sim("--max-running", "1", "--tokens-per-second", "2", "--ttft-ms", "0", "--output-tokens", "1000")
    s1, s2 = raw_post(live, CHAT, chat_body("a")), raw_post(live, CHAT, chat_body("b"))
    wait_until(lambda: (metrics(live)["sglang:num_running_reqs"], metrics(live)["sglang:num_queue_reqs"]) == (1, 1),
               timeout=5, what="live gauges")
    s1.close()
    s2.close()
    wait_until(lambda: metrics(live)["sglang:num_running_reqs"] == 0, timeout=5, what="live gauges back to 0")


@test
def decode_steps_refresh_sglang_gauges():
    # 40 steps at 100 tokens/s: a decode log every 0.4 s while a request runs.
    sim = start_sim("--metrics-refresh", "sglang", "--max-running", "1", "--tokens-per-second", "100",
                    "--ttft-ms", "0", "--output-tokens", "100000")
    socks = [raw_post(sim, CHAT, chat_body("a"))]
    try:
        wait_until(lambda: running_waiting(sim) == (1, 0), timeout=5, what="a running")
        # a's own prefill log counted the batch before it joined.
        socks += [raw_post(sim, CHAT, chat_body(f"w{i}")) for i in range(3)]
        wait_until(lambda: running_waiting(sim) == (1, 3), timeout=5, what="3 waiting")
        wait_until(lambda: (metrics(sim)["sglang:num_running_reqs"], metrics(sim)["sglang:num_queue_reqs"]) == (1, 3),
                   timeout=10, what="a decode log")
    finally:
        for s in socks:
            s.close()


@test
def load_endpoints_have_sglang_shapes():
    from datetime import datetime, timedelta
    sim = start_sim("--dp-ranks", "2", "--max-running", "1", "--tokens-per-second", "5",
                    "--output-tokens", "100", "--ttft-ms", "0")
    version = subprocess.run([binary("infergate-sim"), "--version"], capture_output=True, text=True).stdout.split()[1]
    socks = [raw_post(sim, COMP, {"prompt": "p" * 400 + str(i)}) for i in range(3)]
    try:
        wait_until(lambda: running_waiting(sim) == (2, 1), timeout=5, what="2 running, 1 waiting")
        before = time.time()
        status, hdrs, obj = http_json("GET", sim.url + "/v1/loads")
        assert status == 200 and hdrs["content-type"] == "application/json", (status, hdrs)
        assert set(obj) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}, obj
        assert datetime.fromisoformat(obj["timestamp"]).utcoffset() == timedelta(0), obj["timestamp"]
        assert (obj["version"], obj["accelerator"], obj["num_accelerators"]) == (version, "sim", 1), obj
        fields = {"dp_rank", "timestamp", "num_running_reqs", "num_waiting_reqs", "num_used_tokens",
                  "num_total_tokens", "max_total_num_tokens", "token_usage", "gen_throughput",
                  "cache_hit_rate", "utilization", "max_running_requests"}
        loads = obj["loads"]
        assert [x["dp_rank"] for x in loads] == [0, 1], loads
        for x in loads:
            assert set(x) == fields, x
            assert isinstance(x["timestamp"], float) and x["timestamp"] >= before - 1, x
            assert x["max_running_requests"] == 1 and x["num_running_reqs"] == 1, x
            assert x["num_used_tokens"] > 100 and 0 < x["token_usage"] <= 1, x   # prompts of 100+ tokens
            assert x["utilization"] == 1.0 and x["gen_throughput"] == 5.0, x
        # Round-robin: request 3 waits on rank 0; its tokens are pending there.
        assert [x["num_waiting_reqs"] for x in loads] == [1, 0], loads
        pending = [x["num_total_tokens"] - x["num_used_tokens"] for x in loads]
        assert pending[0] > 100 and pending[1] == 0, loads
        one = http_json("GET", sim.url + "/v1/loads?dp_rank=1")[2]["loads"]
        assert [x["dp_rank"] for x in one] == [1], one
        assert http_json("GET", sim.url + "/v1/loads?dp_rank=9")[2]["loads"] == []
        status, _, err = http_json("GET", sim.url + "/v1/loads?dp_rank=x")
        assert_flat_error(status, err, 400, "Bad Request")
        # The deprecated /get_load: an array, one object per rank.
        for _ in range(2):
            status, _, arr = http_json("GET", sim.url + "/get_load")
        assert status == 200 and isinstance(arr, list), arr
        assert [set(x) for x in arr] == [{"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens",
                                          "num_pending_tokens", "ts_tic"}] * 2, arr
        assert [(x["dp_rank"], x["num_reqs"], x["num_waiting_reqs"]) for x in arr] == [(0, 2, 1), (1, 1, 0)], arr
        assert [x["num_pending_tokens"] for x in arr] == pending, (arr, pending)
        assert all(x["num_tokens"] >= x["num_pending_tokens"] and isinstance(x["ts_tic"], float) for x in arr), arr
        assert sim.read_log().count("'/get_load' is deprecated") == 1, sim.read_log()
        # /sim/state: the live totals and the ranks.
        st = load(sim)
        assert st == {"requests_received": 3, "requests_preempted": 0, "num_running_reqs": 2, "num_waiting_reqs": 1, "num_hung_reqs": 0,
                      "max_running_requests": 1,
                      "fault": "ok", "flavor": "sglang", "traceparents": [],
                      "ranks": [{"num_running_reqs": 1, "num_waiting_reqs": 1, "requests_served": 0, "slowdown": 1},
                                {"num_running_reqs": 1, "num_waiting_reqs": 0, "requests_served": 0, "slowdown": 1}]}, st
    finally:
        for s in socks:
            s.close()


@test
def api_key_as_sglang_checks_it():
    sim = start_sim("--api-key", "s3cret", "--tokens-per-second", "0", "--ttft-ms", "0")
    guarded = [("POST", CHAT, chat_body("x")), ("POST", COMP, {"prompt": "x"}), ("GET", "/v1/models", None),
               ("GET", "/v1/loads", None), ("GET", "/get_load", None), ("GET", "/get_model_info", None),
               ("GET", "/no/such/path", None)]
    wrong = [{}, {"Authorization": "Bearer s3cre"}, {"Authorization": "Bearer s3cret2"},
             {"Authorization": "Basic s3cret"}, {"Authorization": "s3cret"}, {"x-api-key": "S3CRET"},
             {"Authorization": "Bearer  s3cret"}]
    for method, path, body in guarded:
        for headers in wrong:
            status, _, obj = http_json(method, sim.url + path, body, headers=headers)
            assert (status, obj) == (401, {"error": "Unauthorized"}), (path, headers, status, obj)
    for headers in ({"Authorization": "Bearer s3cret"}, {"Authorization": "bearer s3cret"},
                    {"x-api-key": "s3cret"}):
        status, _, obj = http_json("POST", sim.url + CHAT, chat_body("x"), headers=headers)
        assert status == 200 and obj["object"] == "chat.completion", (headers, status, obj)
        assert http("GET", sim.url + "/v1/loads", headers=headers)[0] == 200
    # Probes, scrapes and the simulator's own control endpoints need no key.
    assert http("GET", sim.url + "/health")[::2] == (200, b"")
    assert http("GET", sim.url + "/health_generate")[::2] == (200, b"")
    assert http("GET", sim.url + "/metrics")[0] == 200
    assert http("GET", sim.url + "/sim/state")[0] == 200
    set_fault(sim, "ok")
    assert http("OPTIONS", sim.url + "/v1/models")[0] == 405   # allowed through, then no such method
    # vLLM guards /v1 paths only, with Bearer only.
    v = start_sim("--flavor", "vllm", "--api-key", "s3cret", "--tokens-per-second", "0", "--ttft-ms", "0")
    for path in ("/v1/models", "/v1/loads", "/v1/nothing"):
        assert http_json("GET", v.url + path)[::2] == (401, {"error": "Unauthorized"}), path
    assert http_json("GET", v.url + "/v1/models", headers={"x-api-key": "s3cret"})[0] == 401
    assert http_json("GET", v.url + "/v1/models", headers={"Authorization": "Bearer s3cret"})[0] == 200
    assert http("GET", v.url + "/health")[::2] == (200, b"")
    assert http("GET", v.url + "/metrics")[0] == 200
    assert http_json("GET", v.url + "/nothing")[::2] == (404, {"detail": "Not Found"})


@test
def flavor_vllm_names_errors_and_endpoints():
    sim = start_sim("--flavor", "vllm", "--model", "llama", "--dp-ranks", "2", "--max-running", "1",
                    "--tokens-per-second", "5", "--output-tokens", "100", "--ttft-ms", "0")
    status, _, obj = http_json("POST", sim.url + CHAT, chat_body("x", model="other"))
    assert (status, obj) == (404, {"error": {"message": "The model `other` does not exist.", "type": "NotFoundError",
                                             "param": "model", "code": 404}}), (status, obj)
    status, _, obj = http_json("POST", sim.url + COMP, {"model": "gpt-4", "prompt": "x", "stream": True})
    assert status == 404 and obj["error"]["param"] == "model", obj
    # The served name, or none, is fine.
    for body in (chat_body("x", model="llama", max_tokens=1), {"messages": [{"role": "user", "content": "x"}],
                                                               "max_tokens": 1}):
        status, _, obj = http_json("POST", sim.url + CHAT, body)
        assert status == 200 and obj["model"] == "llama", obj
    # Errors are nested: {"error": {"message", "type", "param", "code"}}.
    for body in ({"model": "llama"}, "{nope", chat_body("x", model="llama", max_tokens=0)):
        status, _, obj = http_json("POST", sim.url + CHAT, body)
        assert_openai_error(status, obj, 400, "Bad Request")
        assert set(obj) == {"error"} and set(obj["error"]) == {"message", "type", "param", "code"}, obj
        assert obj["error"]["code"] == 400, obj
    set_fault(sim, "error")
    status, _, obj = http_json("POST", sim.url + CHAT, chat_body("x", model="llama"))
    assert_openai_error(status, obj, 500, "InternalServerError")
    set_fault(sim, "ok")
    # SGLang's endpoints do not exist: FastAPI's 404.
    for path in ("/v1/loads", "/get_load", "/get_model_info", "/health_generate"):
        assert http_json("GET", sim.url + path)[::2] == (404, {"detail": "Not Found"}), path
    assert http("GET", sim.url + "/health")[::2] == (200, b"")
    assert http_json("GET", sim.url + "/sim/state")[2]["flavor"] == "vllm"
    # Gauges per engine (= DP rank), live.
    socks = [raw_post(sim, CHAT, chat_body(f"r{i}", model="llama")) for i in range(3)]
    try:
        wait_until(lambda: running_waiting(sim) == (2, 1), timeout=5, what="2 running, 1 waiting")
        run = samples(sim, "vllm:num_requests_running")
        assert sorted((labels["engine"], v) for labels, v in run) == [("0", 1.0), ("1", 1.0)], run
        assert all(labels == {"engine": labels["engine"], "model_name": "llama"} for labels, _ in run), run
        wait = samples(sim, "vllm:num_requests_waiting")
        assert sorted(v for _, v in wait) == [0.0, 1.0], wait
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: sum(v for _, v in samples(sim, "vllm:num_requests_running")) == 0, timeout=5,
               what="gauges back to 0")
    text = http("GET", sim.url + "/metrics")[2].decode()
    assert "sglang:" not in text, text
    ok = [v for labels, v in samples(sim, "vllm:request_success_total") if labels["finished_reason"] == "length"]
    assert sum(ok) == 2, samples(sim, "vllm:request_success_total")
    assert sum(v for _, v in samples(sim, "vllm:generation_tokens_total")) >= 2
    assert sum(v for _, v in samples(sim, "vllm:prompt_tokens_total")) > 0


SGLANG_TOO_LONG = ("Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested "
                   "a total of {total} tokens: {n} tokens from the input messages and {m} tokens for the completion. "
                   "Please reduce the number of tokens in the input messages or the completion to fit within the limit.")


@test
def context_length_is_checked_like_sglang():
    sim = start_sim("--context-length", "100", "--tokens-per-second", "0", "--ttft-ms", "0")
    assert http_json("GET", sim.url + "/v1/models")[2]["data"][0]["max_model_len"] == 100
    prompt = "x" * 40   # 10 tokens
    # 10 + 89 < 100 fits; 10 + 90 reaches the limit.
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": prompt, "max_tokens": 89})
    assert status == 200 and obj["usage"]["prompt_tokens"] == 10, obj
    for stream in (False, True):
        for key in ("max_tokens", "max_completion_tokens"):
            status, hdrs, obj = http_json("POST", sim.url + COMP, {"prompt": prompt, key: 90, "stream": stream})
            assert_flat_error(status, obj, 400, "BadRequestError")
            # Streamed too: SGLang runs the generator's first step before the 200.
            assert hdrs["content-type"] == "application/json", hdrs
            assert obj["message"] == SGLANG_TOO_LONG.format(ctx=100, total=100, n=10, m=90), obj
            assert obj["param"] is None, obj
    # Chat counts the rendered messages.
    n = chat(sim, "hello there", max_tokens=1)["usage"]["prompt_tokens"]
    for stream in (False, True):
        status, hdrs, obj = http_json("POST", sim.url + CHAT, chat_body("hello there", max_tokens=100 - n,
                                                                       stream=stream))
        assert_flat_error(status, obj, 400, "BadRequestError")
        assert obj["message"] == SGLANG_TOO_LONG.format(ctx=100, total=100, n=n, m=100 - n), obj
    # An input alone at the limit.
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "y" * 400})
    assert_flat_error(status, obj, 400, "BadRequestError")
    assert obj["message"] == "The input (100 tokens) is longer than the model's context length (100 tokens).", obj
    # Without max_tokens a fitting prompt passes.
    assert http_json("POST", sim.url + COMP, {"prompt": "y" * 396})[0] == 200
    # vLLM: its own messages, nested, with the param; input + max_tokens may equal the limit.
    v = start_sim("--flavor", "vllm", "--context-length", "100", "--tokens-per-second", "0", "--ttft-ms", "0")
    assert http_json("POST", v.url + COMP, {"prompt": prompt, "max_tokens": 90})[0] == 200
    for stream in (False, True):
        status, _, obj = http_json("POST", v.url + COMP, {"prompt": prompt, "max_tokens": 91, "stream": stream})
        assert (status, obj) == (400, {"error": {
            "message": "'max_tokens' or 'max_completion_tokens' is too large: 91. This model's maximum context "
                       "length is 100 tokens and your request has 10 input tokens (91 > 100 - 10).",
            "type": "BadRequestError", "param": "max_tokens", "code": 400}}), obj
    status, _, obj = http_json("POST", v.url + COMP, {"prompt": "y" * 400})
    assert (status, obj) == (400, {"error": {
        "message": "This model's maximum context length is 100 tokens. However, your request has 100 input tokens. "
                   "Please reduce the length of the input messages.",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}}), obj


@test
def stream_fail_rate_ends_streams_with_an_error_event():
    sim = start_sim("--stream-fail-rate", "1", "--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "10")
    for path, body in ((CHAT, chat_body("x", stream=True)), (COMP, {"prompt": "x", "stream": True})):
        status, hdrs, data = http("POST", sim.url + path, body)
        assert status == 200 and hdrs["content-type"].startswith("text/event-stream"), (status, hdrs)
        # SGLang writes json.dumps of the flat error nested under "error".
        assert data.endswith(b'data: {"error": {"object": "error", "message": "Simulated generation failure '
                             b'(--stream-fail-rate).", "type": "INTERNAL_SERVER_ERROR", "param": null, '
                             b'"code": 500}}\n\ndata: [DONE]\n\n'), data[-300:]
        events = [json.loads(e) for e in sse_events(data)[:-2]]
        texts = [e["choices"][0]["delta"].get("content") if path == CHAT else e["choices"][0]["text"]
                 for e in events]
        assert len([t for t in texts if t]) == 5, texts   # half of the 10 tokens
        assert all(e["choices"][0]["finish_reason"] is None for e in events), events
    # Non-streamed answers are not affected.
    assert chat(sim, "x")["choices"][0]["finish_reason"] == "stop"
    m = metrics(sim)
    assert m["infergate_sim_requests_stream_failed_total"] == 2 and m["infergate_sim_requests_served_total"] == 1, m

    def pattern(s, n=50):
        out = []
        for i in range(n):
            status, _, data = http("POST", s.url + COMP, {"prompt": f"p{i}", "stream": True})
            assert status == 200 and data.endswith(b"data: [DONE]\n\n"), (status, data[-200:])
            out.append(b'data: {"error"' in data)
        return out

    flags = ("--stream-fail-rate", "0.2", "--seed", "7", "--tokens-per-second", "0", "--ttft-ms", "0")
    a, b = start_sim(*flags), start_sim(*flags)
    pa, pb = pattern(a), pattern(b)
    assert 0 < sum(pa) < 50, pa
    assert pa == pb, "the same --seed failed different streams"
    assert metrics(a)["infergate_sim_requests_stream_failed_total"] == sum(pa)
    # Its own generator: adding it does not change which requests --fail-rate fails.
    base = ("--fail-rate", "0.5", "--seed", "3", "--tokens-per-second", "0", "--ttft-ms", "0")
    c, d = start_sim(*base), start_sim(*base, "--stream-fail-rate", "0.5")
    statuses = [[http("POST", s.url + COMP, {"prompt": f"q{i}", "stream": True})[0] for i in range(40)]
                for s in (c, d)]
    assert statuses[0] == statuses[1] and set(statuses[0]) == {200, 500}, statuses
    assert metrics(d)["infergate_sim_requests_stream_failed_total"] > 0
    # vLLM's event: the nested ErrorResponse of a GenerationError.
    v = start_sim("--flavor", "vllm", "--stream-fail-rate", "1", "--tokens-per-second", "0", "--ttft-ms", "0")
    status, _, data = http("POST", v.url + CHAT, chat_body("x", stream=True, model="sim-model"))
    assert status == 200 and sse_events(data)[-1] == "[DONE]", data[-200:]
    assert json.loads(sse_events(data)[-2]) == {"error": {"message": "Internal server error",
                                                          "type": "InternalServerError", "param": None,
                                                          "code": 500}}, data[-300:]


# ---- scale ----

def _raise_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def _dechunk(body):
    out, i = b"", 0
    while True:
        j = body.index(b"\r\n", i)
        size = int(body[i:j].split(b";")[0], 16)
        if size == 0:
            return out
        out += body[j + 2:j + 2 + size]
        i = j + 2 + size + 2


@test
def thousand_concurrent_streams():
    n = 1000
    _raise_nofile(4 * n)
    # Each stream lasts about 4 s, so all 1,000 overlap even on a slow machine.
    sim = start_sim("--max-running", str(n), "--tokens-per-second", "5", "--output-tokens", "20",
                    "--ttft-ms", "100")
    results = []

    async def one(i):
        r, w = await asyncio.open_connection("127.0.0.1", sim.port)
        body = json.dumps(chat_body(f"stream {i}", stream=True)).encode()
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        await w.drain()
        data = await r.read()
        w.close()
        return data

    async def main():
        return await asyncio.gather(*(one(i) for i in range(n)))

    th = threading.Thread(target=lambda: results.extend(asyncio.run(main())))
    th.start()
    try:
        wait_until(lambda: running_waiting(sim)[0] == n, timeout=20, what=f"{n} streams running")
    finally:
        th.join(60)
    assert len(results) == n, len(results)
    for data in results:
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head[:100]
        if b"chunked" in head.lower():
            body = _dechunk(body)
        events = sse_events(body)
        assert events[-1] == "[DONE]" and len(events) == 1 + 20 + 1 + 1, events[-3:]
    m = metrics(sim)
    assert m["infergate_sim_requests_served_total"] == n and m["infergate_sim_requests_aborted_total"] == 0, m


def _rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _asan(pid):
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


def _hammer(sim, count):
    """count requests on one keep-alive connection: mostly plain chats, some
    streams and text completions, some cut by max_tokens."""
    conn = HTTPConnection("127.0.0.1", sim.port, timeout=30)
    bodies = [json.dumps(chat_body(f"memory {i}", max_tokens=(i % 7) * 10 or None)).encode() for i in range(50)]
    sbody = json.dumps(chat_body("s", stream=True, stream_options={"include_usage": True})).encode()
    cbody = json.dumps({"prompt": "c", "stream": True}).encode()
    for i in range(count):
        if i % 20 == 0:
            path, body = CHAT, sbody
        elif i % 20 == 1:
            path, body = COMP, cbody
        else:
            path, body = CHAT, bodies[i % 50]
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
    conn.close()


@test
def memory_stays_flat():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    if _asan(sim.pid):
        # ASan's quarantine makes RSS meaningless; LeakSanitizer at a clean
        # exit checks the same thing.
        _hammer(sim, 3000)
        assert sim.stop(signal.SIGTERM) == 0, sim.read_log()
        assert "LeakSanitizer" not in sim.read_log(), sim.read_log()
        return
    _hammer(sim, 2000)
    before = _rss_kb(sim.pid)
    _hammer(sim, 20000)
    after = _rss_kb(sim.pid)
    assert after - before < 3 * 1024, f"RSS grew from {before} kB to {after} kB"
    assert metrics(sim)["infergate_sim_requests_served_total"] == 22000


@test
def sigterm_with_requests_in_flight_exits_cleanly():
    sim = start_sim("--max-running", "1", "--tokens-per-second", "5", "--output-tokens", "100")
    socks = [raw_post(sim, CHAT, chat_body("a", stream=True)), raw_post(sim, CHAT, chat_body("b"))]
    wait_until(lambda: running_waiting(sim) == (1, 1), timeout=5, what="busy")
    # Requests dropped while queued are freed (LeakSanitizer checks this at
    # the exit below when built with --enable-sanitizers).
    dropped = [raw_post(sim, CHAT, chat_body(f"d{i}", stream=i % 2 == 0)) for i in range(40)]
    wait_until(lambda: running_waiting(sim) == (1, 41), timeout=5, what="40 more queued")
    for s in dropped:
        s.close()
    wait_until(lambda: aborted(sim) == 40, timeout=5, what="40 aborts")
    set_fault(sim, "hang")
    socks.append(raw_post(sim, COMP, {"prompt": "h"}))
    wait_until(lambda: load(sim)["num_hung_reqs"] == 1, timeout=5, what="hung")
    rc = sim.stop(signal.SIGTERM)
    assert rc == 0, (rc, sim.read_log())
    log = sim.read_log()
    assert "stopping" in log and "ERROR: " not in log and "LeakSanitizer" not in log, log
    for s in socks:
        s.close()



@test
def step_profile_reports_the_prefix_cache_it_keeps():
    # h100-8b, 100x faster than real time. Chat prompts are "role\ncontent\n"
    # per message, cut into 64-byte blocks of 16 tokens.
    sim = start_sim("--profile", "h100-8b", "--time-scale", "100", "--output-tokens", "8")
    system = "You answer questions about rivers. " * 30            # 1,050 bytes
    sys_bytes = len("system\n" + system + "\n")
    body = lambda q, **kw: {"model": "m", "messages": [{"role": "system", "content": system},
                                                       {"role": "user", "content": q}], **kw}
    st, _, first = http_json("POST", sim.url + CHAT, body("Which is the longest?"))
    assert st == 200 and first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}, first
    st, _, second = http_json("POST", sim.url + CHAT, body("Which is the widest one of them all?"))
    # the blocks wholly inside the shared system message are found cached
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == sys_bytes // 64 * 16, second["usage"]
    # the same again: its whole prompt but the last token is cached
    _, _, again = http_json("POST", sim.url + CHAT, body("Which is the widest one of them all?"))
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= (again["usage"]["prompt_tokens"] // 16 - 1) * 16
    # streamed: the usage chunk carries it too
    _, events, _ = stream(sim, CHAT, body("Which is the widest one of them all?", stream=True,
                                          stream_options={"include_usage": True}))
    assert events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, events[-1]
    _, _, text = http("GET", sim.url + "/metrics")
    labels = '{engine_type="unified",model_name="sim-model",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
    served = [first, second, again]
    rate = metric(text, "sglang:cache_hit_rate" + labels)
    assert 0 < rate < 1, rate
    assert 0 < metric(text, "sglang:token_usage" + labels) < 0.01
    _, _, loads = http_json("GET", sim.url + "/v1/loads")
    assert loads["loads"][0]["max_total_num_tokens"] == 420000, loads
    assert abs(loads["loads"][0]["cache_hit_rate"] - rate) < 1e-9, (loads, rate)
    assert sum(x["usage"]["prompt_tokens"] for x in served) > 0
    # the answer is cached too: a next turn that sends it back finds it
    a1 = first["choices"][0]["message"]["content"]
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Which is the longest?"},
            {"role": "assistant", "content": a1}, {"role": "user", "content": "And the second longest?"}]
    _, _, turn2 = http_json("POST", sim.url + CHAT, {"model": "m", "messages": msgs})
    before_new = len("system\n" + system + "\nuser\nWhich is the longest?\nassistant\n" + a1 + "\n")
    assert turn2["usage"]["prompt_tokens_details"]["cached_tokens"] == before_new // 64 * 16, (turn2["usage"],
                                                                                               before_new)
    # a step knob without a step profile is a mistake, said at once
    p = subprocess.run([binary("infergate-sim"), "--kv-tokens", "1000"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "--kv-tokens: the classic profile has no decode steps" in p.stderr, p.stderr

@test
def continue_final_message_goes_on_word_for_word_after_its_own_prefill():
    # What a gateway sends to continue a broken stream on another backend: the messages, the
    # text relayed so far as the final assistant message, continue_final_message true and
    # add_generation_prompt false (vLLM's ChatCompletionRequest; SGLang's has no
    # add_generation_prompt). The continuation is exactly the rest of the answer the first backend
    # was giving; a prefill that is not that answer's start gets an answer of its own.
    for flavor in ("sglang", "vllm"):
        sim = start_sim("--model", "m", "--flavor", flavor, "--tokens-per-second", "0", "--ttft-ms", "0")
        whole = chat(sim, "tell me a story", max_tokens=40)["choices"][0]["message"]["content"]
        words = whole.split(" ")
        for k in (1, 10, 39):
            prefix = " ".join(words[:k])
            body = {"model": "m", "messages": [{"role": "user", "content": "tell me a story"},
                                               {"role": "assistant", "content": prefix}],
                    "continue_final_message": True, "add_generation_prompt": False, "max_tokens": 40 - k}
            st, _, obj = http_json("POST", sim.url + CHAT, body)
            assert st == 200 and prefix + obj["choices"][0]["message"]["content"] == whole, (flavor, k, obj)
            assert obj["usage"]["completion_tokens"] == 40 - k, obj["usage"]
            _, events, _ = stream(sim, CHAT, dict(body, stream=True))
            streamed = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e.get("choices"))
            assert prefix + streamed == whole, (flavor, k, streamed)
        other = dict(body, messages=[body["messages"][0], {"role": "assistant", "content": "Not its start"}])
        st, _, obj = http_json("POST", sim.url + CHAT, other)
        assert st == 200 and not ("Not its start" + obj["choices"][0]["message"]["content"]).startswith(whole[:20])
        # vLLM refuses it with add_generation_prompt true (its default); SGLang has no such field
        st, _, obj = http_json("POST", sim.url + CHAT, dict(body, add_generation_prompt=True))
        if flavor == "vllm":
            assert st == 400 and "continue_final_message" in json.dumps(obj), (st, obj)
        else:
            assert st == 200 and prefix + obj["choices"][0]["message"]["content"] == whole, (st, obj)
        sim.stop()


run()
