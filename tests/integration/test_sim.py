"""Integration tests of infergate-sim: real processes on loopback ports.

Each test asserts what a client would notice: bytes, status codes, counts in
/get_load and /metrics, exit codes and messages.
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

from harness import (assert_openai_error, binary, http, http_json, run, sse_events,
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
    status, _, obj = http_json("GET", sim.url + "/get_load")
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
                 "--output-tokens", "--fail-rate", "--seed", "--version"):
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
    status, hdrs, body = http("GET", sim.url + "/health")
    assert (status, body) == (200, b"ok"), (status, body)
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
    t0 = time.monotonic()
    s.close()
    wait_until(lambda: aborted(sim) == 1, timeout=2, what="abort counted")
    assert time.monotonic() - t0 < 2
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
        assert_openai_error(status, obj, 500, "server_error")
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
    assert http("GET", sim.url + "/health")[0] == 503
    status, _, obj = http_json("POST", sim.url + CHAT, chat_body("x"))
    assert_openai_error(status, obj, 503, "server_error")
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "x", "stream": True})
    assert_openai_error(status, obj, 503)
    assert http("GET", sim.url + "/get_load")[0] == 200
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


# ---- bad requests ----

@test
def bad_requests_get_openai_errors():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    cases = [
        ("POST", CHAT, "{not json", 400, None),
        ("POST", CHAT, "", 400, None),
        ("POST", CHAT, "[1, 2]", 400, None),
        ("POST", CHAT, '"text"', 400, None),
        ("POST", CHAT, {"model": "m"}, 400, "messages"),
        ("POST", CHAT, {"messages": []}, 400, "messages"),
        ("POST", CHAT, {"messages": "hi"}, 400, "messages"),
        ("POST", CHAT, {"messages": [{"content": "no role"}]}, 400, "messages"),
        ("POST", CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages"),
        ("POST", CHAT, chat_body("x", max_tokens=0), 400, "max_tokens"),
        ("POST", CHAT, chat_body("x", max_tokens="5"), 400, "max_tokens"),
        ("POST", CHAT, chat_body("x", stream="yes"), 400, "stream"),
        ("POST", CHAT, chat_body("x", n=3), 400, "n"),
        ("POST", CHAT, dict(chat_body("x"), model=7), 400, "model"),
        ("POST", COMP, {"model": "m"}, 400, "prompt"),
        ("POST", COMP, {"prompt": 42}, 400, "prompt"),
        ("GET", "/v1/nothing", None, 404, None),
        ("POST", "/", "{}", 404, None),
        ("GET", CHAT, None, 405, None),
        ("DELETE", COMP, None, 405, None),
        ("POST", "/health", "{}", 405, None),
        ("PUT", "/metrics", None, 405, None),
    ]
    for method, path, body, want, param in cases:
        status, hdrs, obj = http_json(method, sim.url + path, body)
        assert_openai_error(status, obj, want)
        if param:
            assert obj["error"]["param"] == param, (path, body, obj)
        if want == 405:
            assert "allow" in hdrs, (path, hdrs)
            assert method not in hdrs["allow"], hdrs
    assert http("GET", sim.url + "/v1/nothing")[1]["content-type"] == "application/json"
    assert metrics(sim)["infergate_sim_requests_invalid_total"] == len(cases) + 1
    # Array content parts and a one-string prompt list are accepted.
    chat(sim, [{"type": "text", "text": "hello"}])
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": ["hello"]})
    assert status == 200, obj
    status, _, obj = http_json("POST", sim.url + CHAT, "x" * (17 * 1024 * 1024))
    assert_openai_error(status, obj, 413)


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
    t0 = time.monotonic()
    rc = sim.stop(signal.SIGTERM)
    assert rc == 0, (rc, sim.read_log())
    assert time.monotonic() - t0 < 5
    log = sim.read_log()
    assert "stopping" in log and "ERROR: " not in log and "LeakSanitizer" not in log, log
    for s in socks:
        s.close()


run()
