#!/usr/bin/env python3
"""Anthropic's Messages API through the gateway (POST /v1/messages, /v1/messages/count_tokens),
answered by simulators that serve it as SGLang and vLLM do: routed by model, the key taken from
x-api-key (or Authorization: Bearer) and kept from the backend, the anthropic-* headers passed on,
the usage of each answer charged (input_tokens and output_tokens, streamed or not), and every
error the gateway itself decides in Anthropic's shape ({"type": "error", "error": {"type",
"message"}}) with its status and retry-after. The official SDK (@anthropic-ai/sdk) drives it
as a user's program would."""
import json
import os
import subprocess
import tempfile

from harness import (BUILDDIR, SRCDIR, FakeBackend, ensure_npm, http, http_json, keys_file, run, start_gateway,
                     start_sim, test, wait_until, written_lines)

ANTHROPIC_NPM_VERSION = os.environ.get("ANTHROPIC_NPM_VERSION", "1.17.0")  # test_sim_anthropic.py's
FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "1000")
BODY = {"model": "sim-model", "max_tokens": 16, "system": "You are terse.",
        "messages": [{"role": "user", "content": "Tell me about the sea."}]}


def ensure_sdk():
    return ensure_npm(os.path.join(BUILDDIR, "tests", "node-deps-anthropic"),
                      [f"@anthropic-ai/sdk@{ANTHROPIC_NPM_VERSION}"], timeout=300)


def events(data):
    """An Anthropic SSE body as [(event name, data object)]."""
    out = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            name, payload = block.split("\n", 1)
            assert name.startswith("event: ") and payload.startswith("data: "), block
            out.append((name[7:], json.loads(payload[6:])))
    return out


def gateway(sims, keys=None, *extra, log=None):
    """A gateway in front of sims; keys: [(name, entry fields)] in its keys file; the
    x-api-key header of each, in order."""
    d = tempfile.mkdtemp(prefix="ig-anth-")
    cfg = {"backends": [s.url for s in sims]}
    hdrs = []
    if keys:
        path = os.path.join(d, "keys.json")
        auth = keys_file(path, *[k[0] for k in keys])
        with open(path) as f:
            kf = json.load(f)
        for entry, (_, more) in zip(kf["keys"], keys):
            entry.update(more)
        with open(path, "w") as f:
            json.dump(kf, f)
        cfg["api_keys_file"] = path
        hdrs = [{"x-api-key": a["Authorization"][len("Bearer "):]} for a in auth]
    if log:
        cfg["access_log"] = log
    cpath = os.path.join(d, "gw.json")
    with open(cpath, "w") as f:
        json.dump(cfg, f)
    gw = start_gateway([], *QUICK_HEALTH, *extra, config=cpath)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == len(sims),
               what="backends up")
    return gw, hdrs


def anthropic_error(st, hdrs, obj, status, etype):
    assert st == status, (st, obj)
    assert obj["type"] == "error" and obj["error"]["type"] == etype and obj["error"]["message"], obj
    assert set(obj) == {"type", "error"} and set(obj["error"]) == {"type", "message"}, obj
    assert hdrs["content-type"].startswith("application/json"), hdrs


@test
def a_message_and_its_stream_through_the_gateway_are_the_servers():
    """Both flavors, the key in x-api-key: the Message the gateway relays is the simulator's
    (same text and usage as asked straight), the stream Anthropic's events in order,
    count_tokens routed too."""
    for flavor in ("sglang", "vllm"):
        sim = start_sim("--flavor", flavor, "--output-tokens", "12", *FAST)
        gw, (key,) = gateway([sim], [("agent", {})])
        want = http_json("POST", sim.url + "/v1/messages", BODY)[2]
        h = {**key, "anthropic-version": "2023-06-01", "anthropic-beta": "tools-2024-04-04"}
        st, hd, got = http_json("POST", gw.url + "/v1/messages", BODY, headers=h)
        assert st == 200 and hd["x-infergate-backend"] == sim.url, (st, got)
        assert got["type"] == "message" and got["content"] == want["content"], (got, want)
        assert got["usage"]["input_tokens"] == want["usage"]["input_tokens"], (got, want)
        st, _, data = http("POST", gw.url + "/v1/messages", {**BODY, "stream": True}, headers=h)
        assert st == 200, data[:300]
        evs = events(data)
        assert evs[0][0] == "message_start" and evs[-1][0] == "message_stop", [e[0] for e in evs]
        text = "".join(e[1]["delta"].get("text", "") for e in evs if e[0] == "content_block_delta")
        assert text == want["content"][0]["text"], (text, want)
        st, _, n = http_json("POST", gw.url + "/v1/messages/count_tokens",
                             {k: v for k, v in BODY.items() if k != "max_tokens"}, headers=h)
        assert st == 200 and n["input_tokens"] == want["usage"]["input_tokens"], (st, n, want)
        gw.stop()
        sim.stop()


@test
def the_key_is_kept_from_the_backend_and_the_anthropic_headers_go_on():
    """A fake server records the headers it got: anthropic-version and anthropic-beta as the
    client sent them, neither x-api-key nor an Authorization with the client's key."""
    fake = FakeBackend()
    gw, (key,) = gateway([fake], [("agent", {})])
    http("POST", gw.url + "/v1/messages", BODY,
         headers={**key, "anthropic-version": "2023-06-01", "anthropic-beta": "b1,b2"})
    posts = [r for r in fake.requests if r["method"] == "POST"]
    assert len(posts) == 1 and posts[0]["path"] == "/v1/messages", [(r["method"], r["path"]) for r in fake.requests]
    got = {k.lower(): v for k, v in posts[0]["headers"]}
    assert got.get("anthropic-version") == "2023-06-01" and got.get("anthropic-beta") == "b1,b2", got
    assert "x-api-key" not in got and "authorization" not in got, got


@test
def errors_the_gateway_decides_are_in_anthropics_shape():
    """No key, a wrong key, a model the key may not use, an unknown model, a body that is not
    JSON, a wrong method, a rate limit (429 with retry-after): Anthropic's error types, with
    their statuses; a chat route of the same gateway keeps OpenAI's shape."""
    sim = start_sim("--flavor", "sglang", *FAST)
    gw, (free, narrow, slow) = gateway([sim], [("free", {}), ("narrow", {"models": ["other-model"]}),
                                               ("slow", {"rpm": 1})])
    st, h, obj = http_json("POST", gw.url + "/v1/messages", BODY)
    anthropic_error(st, h, obj, 401, "authentication_error")
    st, h, obj = http_json("POST", gw.url + "/v1/messages", BODY, headers={"x-api-key": "ig-not-a-key"})
    anthropic_error(st, h, obj, 401, "authentication_error")
    st, h, obj = http_json("POST", gw.url + "/v1/messages", BODY, headers=narrow)
    anthropic_error(st, h, obj, 403, "permission_error")
    st, h, obj = http_json("POST", gw.url + "/v1/messages", {**BODY, "model": "no-such-model"}, headers=free)
    anthropic_error(st, h, obj, 404, "not_found_error")
    st, h, obj = http_json("POST", gw.url + "/v1/messages", b"{not json", headers=free)
    anthropic_error(st, h, obj, 400, "invalid_request_error")
    st, h, obj = http_json("GET", gw.url + "/v1/messages", headers=free)
    anthropic_error(st, h, obj, 405, "invalid_request_error")
    assert http("POST", gw.url + "/v1/messages", BODY, headers=slow)[0] == 200
    st, h, obj = http_json("POST", gw.url + "/v1/messages", BODY, headers=slow)
    anthropic_error(st, h, obj, 429, "rate_limit_error")
    assert int(h["retry-after"]) >= 1, h
    # the OpenAI routes are unchanged
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", {"model": "sim-model", "messages": []})
    assert st == 401 and obj["error"]["type"] and "type" not in obj, obj


@test
def usage_is_charged_from_input_and_output_tokens_streamed_or_not():
    """The access log's prompt and completion tokens of an Anthropic answer are its usage's
    input_tokens and output_tokens, streamed (message_start, then message_delta) or not."""
    sim = start_sim("--flavor", "vllm", "--output-tokens", "9", *FAST)
    log = os.path.join(tempfile.mkdtemp(prefix="ig-anth-"), "access.log")
    gw, (key,) = gateway([sim], [("agent", {"tpm": 100000})], log=log)
    st, _, m = http_json("POST", gw.url + "/v1/messages", BODY, headers=key)
    assert st == 200
    st, _, data = http("POST", gw.url + "/v1/messages", {**BODY, "stream": True}, headers=key)
    assert st == 200
    delta = [e[1] for e in events(data) if e[0] == "message_delta"][0]
    start_ev = [e[1] for e in events(data) if e[0] == "message_start"][0]
    lines = wait_until(lambda: (lambda v: v if len(v) >= 2 else None)(
        [x for x in written_lines(log) if x["path"] == "/v1/messages"]), what="two access log lines")
    got = [(x["prompt_tokens"], x["completion_tokens"]) for x in lines]
    assert got[0] == (m["usage"]["input_tokens"], m["usage"]["output_tokens"]), (got, m["usage"])
    assert got[1] == (start_ev["message"]["usage"]["input_tokens"], delta["usage"]["output_tokens"]), \
        (got, start_ev, delta)
    assert got[1][1] == 9, got


@test
def a_backend_killed_mid_stream_ends_it_with_anthropics_error_event():
    """The stream had begun (message_start and some text relayed) when its server was killed:
    the client's stream ends with `event: error` and Anthropic's error object, not OpenAI's
    data-only error, and the events before it are whole."""
    import http.client
    import signal
    sim = start_sim("--flavor", "sglang", "--tokens-per-second", "40", "--ttft-ms", "0", "--output-tokens", "400")
    gw, (key,) = gateway([sim], [("agent", {})], "--continue-max", "0")
    c = http.client.HTTPConnection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]), timeout=30)
    c.request("POST", "/v1/messages", json.dumps({**BODY, "max_tokens": 400, "stream": True}),
              {**key, "Content-Type": "application/json"})
    resp = c.getresponse()
    assert resp.status == 200
    got = b""
    while got.count(b"event: content_block_delta") < 3:
        chunk = resp.read1(4096)
        assert chunk, got
        got += chunk
    sim.stop(signal.SIGKILL)
    while True:  # to the end, which the gateway makes abrupt (the stream failed) after the event
        try:
            chunk = resp.read1(4096)
        except http.client.IncompleteRead as e:
            got += e.partial
            break
        if not chunk:
            break
        got += chunk
    evs = events(got)
    assert evs[0][0] == "message_start" and evs[-1][0] == "error", [e[0] for e in evs]
    err = evs[-1][1]
    assert err["type"] == "error" and err["error"]["type"] == "api_error" and err["error"]["message"], err
    assert all(e[0] != "message_stop" for e in evs), [e[0] for e in evs]


@test
def the_official_sdk_through_the_gateway():
    """@anthropic-ai/sdk with a key of ours: a message, a stream whose finalMessage() is the
    direct one's, count_tokens, and the server's own 400 as the SDK's error."""
    node_path = ensure_sdk()
    sim = start_sim("--flavor", "sglang", "--output-tokens", "40", *FAST)
    gw, (key,) = gateway([sim], [("sdk", {})])
    runs = {}
    for name, base, api_key in (("direct", sim.url, "unused"), ("gateway", gw.url, key["x-api-key"])):
        p = subprocess.run(["node", os.path.join(SRCDIR, "tests", "integration", "anthropic_client.cjs"), base,
                            "sim-model"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NODE_PATH": node_path, "ANTHROPIC_API_KEY": api_key})
        assert p.returncode == 0, (name, p.stderr[-2000:])
        runs[name] = json.loads(p.stdout)
    d, g = runs["direct"], runs["gateway"]
    assert g["message"]["content"] == d["message"]["content"], (g["message"], d["message"])
    assert g["stream"]["types"] == d["stream"]["types"] and g["stream"]["text"] == d["stream"]["text"], g["stream"]
    assert g["stream"]["final"]["content"] == d["stream"]["final"]["content"], g["stream"]
    assert g["count"] == d["count"], (g["count"], d["count"])
    assert g["error"]["status"] == 400 and g["error"]["isAPIError"], g["error"]


def chat_only_backend(sim):
    """A scripted server in front of sim that serves no /v1/messages (the 404 FastAPI gives a
    route it lacks) and relays everything else to it: a chat-only server."""
    import http.client as hc

    def handler(fb, req, sock):
        if req["path"].split("?")[0].startswith("/v1/messages"):
            FakeBackend.reply(sock, 404, {"detail": "Not Found"})
            return True
        u = sim.url.rsplit(":", 1)
        c = hc.HTTPConnection("127.0.0.1", int(u[1]), timeout=30)
        hdrs = {k: v for k, v in req["headers"] if k.lower() in ("content-type", "x-request-id")}
        c.request(req["method"], req["path"], body=req["body"] or None, headers=hdrs)
        r = c.getresponse()
        data = r.read()
        head = f"HTTP/1.1 {r.status} X\r\nContent-Type: {r.getheader('Content-Type')}\r\n" \
               f"Content-Length: {len(data)}\r\n\r\n"
        sock.sendall(head.encode() + data)
        return True
    return FakeBackend(handler)


@test
def translated_for_a_backend_without_the_route():
    """anthropic.translate: a server that answers /v1/messages 404 gets the request as a chat
    completion, and the client gets the Message (and the stream) the simulator's own
    /v1/messages gives for it, usage included; the access log says translated. Without the
    setting the server's 404 comes back in Anthropic's shape."""
    sim = start_sim("--flavor", "vllm", "--output-tokens", "14", *FAST)
    fake = chat_only_backend(sim)
    log = os.path.join(tempfile.mkdtemp(prefix="ig-anth-"), "access.log")
    gw, (key,) = gateway([fake], [("agent", {})], "--anthropic-translate", log=log)
    want = http_json("POST", sim.url + "/v1/messages", BODY)[2]
    st, _, got = http_json("POST", gw.url + "/v1/messages", BODY, headers=key)
    assert st == 200, (st, got)
    assert got["type"] == "message" and got["content"] == want["content"], (got, want)
    assert got["stop_reason"] == want["stop_reason"] and got["usage"]["output_tokens"] == \
        want["usage"]["output_tokens"], (got, want)
    st, _, data = http("POST", gw.url + "/v1/messages", {**BODY, "stream": True}, headers=key)
    direct = events(http("POST", sim.url + "/v1/messages", {**BODY, "stream": True})[2])
    evs = events(data)
    assert st == 200 and [e[0] for e in evs] == [e[0] for e in direct], ([e[0] for e in evs], [e[0] for e in direct])
    text = "".join(e[1]["delta"].get("text", "") for e in evs if e[0] == "content_block_delta")
    assert text == want["content"][0]["text"], (text, want)
    paths = [r["path"] for r in fake.requests if r["method"] == "POST"]
    assert paths == ["/v1/chat/completions", "/v1/chat/completions"], paths
    lines = wait_until(lambda: (lambda v: v if len(v) >= 2 else None)(
        [x for x in written_lines(log) if x["path"] == "/v1/messages"]), what="two access log lines")
    assert all(x.get("translated") is True and x["status"] == 200 for x in lines), lines
    assert lines[0]["completion_tokens"] == want["usage"]["output_tokens"], (lines, want)
    # a refused field: Anthropic's 400, nothing sent
    st, h, obj = http_json("POST", gw.url + "/v1/messages",
                           {**BODY, "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
                           headers=key)
    anthropic_error(st, h, obj, 400, "invalid_request_error")
    assert "messages.0.content.0" in obj["error"]["message"], obj
    gw.stop()
    gw, (key,) = gateway([fake], [("agent", {})])
    st, h, obj = http_json("POST", gw.url + "/v1/messages", BODY, headers=key)
    anthropic_error(st, h, obj, 404, "not_found_error")


@test
def the_official_sdk_through_the_translation():
    """@anthropic-ai/sdk against the gateway translating for a chat-only server: the same
    message, stream, final message and error as the simulator's own Messages API gives
    (count_tokens is not translated: the script skips it)."""
    node_path = ensure_sdk()
    sim = start_sim("--flavor", "sglang", "--output-tokens", "40", *FAST)
    fake = chat_only_backend(sim)
    gw, (key,) = gateway([fake], [("sdk", {})], "--anthropic-translate")
    runs = {}
    for name, base, api_key in (("direct", sim.url, "unused"), ("translated", gw.url, key["x-api-key"])):
        p = subprocess.run(["node", os.path.join(SRCDIR, "tests", "integration", "anthropic_client.cjs"), base,
                            "sim-model"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NODE_PATH": node_path, "ANTHROPIC_API_KEY": api_key,
                                "ANTHROPIC_SKIP_COUNT": "1"})
        assert p.returncode == 0, (name, p.stderr[-2000:])
        runs[name] = json.loads(p.stdout)
    d, g = runs["direct"], runs["translated"]
    assert g["message"]["content"] == d["message"]["content"], (g["message"], d["message"])
    assert g["stream"]["types"] == d["stream"]["types"] and g["stream"]["text"] == d["stream"]["text"], g["stream"]
    assert g["stream"]["final"]["content"] == d["stream"]["final"]["content"], g["stream"]
    assert g["error"]["status"] == d["error"]["status"] == 400 and g["error"]["isAPIError"], (g["error"], d["error"])


if __name__ == "__main__":
    run()
