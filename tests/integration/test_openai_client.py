"""The official OpenAI client (npm package `openai`), unmodified, against the
gateway: a chat completion, a streamed chat completion, a completion and a
models list. The package is installed from the npm registry on first use
into the build tree (OPENAI_NPM_VERSION pins it; v6 runs on Node.js 20)."""

import json

from harness import (ensure_openai, http, http_json, metric, run, run_client, sse_events, start_gateway, start_sim,
                     start_sims, stateful_backend, test, wait_until)

@test
def official_openai_client_works_unmodified():
    ensure_openai()    # before any process starts: npm may take a while the first time
    sims = start_sims(3, "--model", "sim-model", "--tokens-per-second", "500", "--ttft-ms", "5")
    gw = start_gateway(sims)
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    out = run_client(gw, "sim-model")
    assert out["chat"]["object"] == "chat.completion" and out["chat"]["content"], out
    assert out["chat"]["usage"]["completion_tokens"] == 12, out
    assert out["stream"]["text"] and out["stream"]["chunks"] >= 12, out
    assert out["stream"]["usage"]["completion_tokens"] == 12, out
    assert out["completion"]["object"] == "text_completion" and out["completion"]["text"], out
    assert out["completion"]["usage"]["completion_tokens"] == 7, out
    assert out["models"] == ["sim-model"], out
    # The backend's 400 reaches the client as the SDK's BadRequestError.
    assert out["error"] == {"status": 400, "name": "BadRequestError"}, out


@test
def official_client_asks_for_an_alias_and_gets_the_served_models_answer():
    ensure_openai()    # before any process starts: npm may take a while the first time
    sim = start_sim("--model", "qwen3-27b", "--tokens-per-second", "500", "--ttft-ms", "5")
    gw = start_gateway([sim], "--model-alias", "gpt-4o-mini=qwen3-27b")
    wait_until(lambda: len(http_json("GET", gw.url + "/v1/models")[2]["data"]) == 2, timeout=10, what="models")
    out = run_client(gw, "gpt-4o-mini")
    # The simulator answers with the model name it was sent: the served one.
    assert out["chat"]["model"] == "qwen3-27b" and out["chat"]["content"], out
    assert out["chat"]["usage"]["completion_tokens"] == 12, out
    assert out["stream"]["usage"]["completion_tokens"] == 12, out
    assert out["completion"]["usage"]["completion_tokens"] == 7, out
    assert out["models"] == ["qwen3-27b", "gpt-4o-mini"], out


@test
def sglang_errors_reach_the_official_client_as_api_errors():
    # SGLang answers a too-long request with a flat 400 ({"object": "error", "message", ...}),
    # and a request that fails after its 200 with `data: {"error": {...}}`: through the gateway
    # the official client raises its own APIError with the server's message for both.
    ensure_openai()    # before any process starts: npm may take a while the first time
    sim = start_sim("--context-length", "4096", "--stream-fail-rate", "1", "--tokens-per-second", "500",
                    "--ttft-ms", "5")
    gw = start_gateway([sim])
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    # What the sim itself says, to compare messages with.
    st, _, flat = http_json("POST", sim.url + "/v1/chat/completions",
                            {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}],
                             "max_tokens": 100000})
    assert st == 400 and flat["object"] == "error", flat
    st, _, data = http("POST", sim.url + "/v1/chat/completions",
                       {"model": "sim-model", "messages": [{"role": "user", "content": "a stream that fails"}],
                        "max_tokens": 20, "stream": True})
    event = json.loads([e for e in sse_events(data) if e != "[DONE]"][-1])
    assert st == 200 and "error" in event, (st, data)
    out = run_client(gw, "sim-model", "errors")
    f = out["flat"]
    assert f and f["isAPIError"] and f["name"] == "BadRequestError" and f["status"] == 400, out
    assert flat["message"] in f["message"], (flat, f)
    s = out["stream"]
    assert s and s["isAPIError"], out
    assert event["error"]["message"] in s["message"], (event, s)
    assert out["stream_chunks"] >= 1, out   # the tokens before the failure came through


@test
def official_client_responses_streamed_or_not_follow_ups_and_embeddings():
    # Seven backends that store their responses in memory (scripted, to serve DELETE, which
    # SGLang and vLLM do not): the official client's responses.create plain and streamed,
    # five follow-ups naming the first response (each must reach the backend that holds
    # it, or that backend answers 404 and the client throws), responses.retrieve and
    # responses.delete (to the holder), and embeddings.create.
    ensure_openai()
    fbs = [stateful_backend() for _ in range(7)]
    gw = start_gateway(fbs, "--health-interval-ms", "200")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 7, timeout=10,
               what="7 healthy backends")
    out = run_client(gw, "m", "responses", "5")
    assert out["plain"]["status"] == "completed" and out["plain"]["text"] == "Hi there", out
    assert out["plain"]["usage"]["input_tokens"] == 11 and out["plain"]["usage"]["output_tokens"] == 7, out
    assert out["stream"]["types"] == ["response.created", "response.completed"], out
    assert out["stream"]["usage"]["output_tokens"] == 7, out
    holder = out["plain"]["backend"]
    assert [f["backend"] for f in out["follow"]] == [holder] * 5, out
    st = out["stored"]   # retrieve and delete reached the holder; then its own 404 reached the client
    assert st["id"] == out["plain"]["id"] and st["text"] == "Hi there" and st["backend"] == holder, out
    assert st["gone"]["status"] == 404 and "not found" in st["gone"]["message"], out
    assert out["embeddings"] == {"n": 2, "dims": 3, "usage": {"prompt_tokens": 2, "total_tokens": 2}}, out
    m = http("GET", gw.url + "/metrics")[2]
    # usage counted: 7 responses (plain, streamed, 5 follow-ups) x 11 in / 7 out, and 2 embedding tokens
    assert metric(m, 'infergate_tokens_total{kind="prompt"}') == 7 * 11 + 2, m
    assert metric(m, 'infergate_tokens_total{kind="completion"}') == 7 * 7, m


run()
