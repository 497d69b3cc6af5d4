"""infergate-sim's Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens), as
SGLang's and vLLM's Anthropic handlers serve it: the official Anthropic Node client against each
flavor, the stream's events and their order, the text equal to the chat route's for the same
conversation, token counts equal to the chat route's prompt tokens (with --tokenizer: after the
chat template), a tool-use conversation handed on as the chat route's tool messages, and the
errors in each server's shape. The SDK (ANTHROPIC_NPM_VERSION pins it) is installed from the npm
registry on first use into the build tree."""

import json
import os
import subprocess

from harness import BUILDDIR, SRCDIR, ensure_npm, http, http_json, run, start_sim, test

ANTHROPIC_NPM_VERSION = os.environ.get("ANTHROPIC_NPM_VERSION", "1.17.0")
TOK = os.path.join(SRCDIR, "tests", "fixtures", "prompt", "tokenizer.json")
FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")
FLAVORS = ("sglang", "vllm")


def ensure_sdk():
    return ensure_npm(os.path.join(BUILDDIR, "tests", "node-deps-anthropic"),
                      [f"@anthropic-ai/sdk@{ANTHROPIC_NPM_VERSION}"], timeout=300)


def chat_text(sim, messages, **kw):
    """The chat route's answer for the same conversation: (text, usage, finish_reason)."""
    st, _, obj = http_json("POST", sim.url + "/v1/chat/completions",
                           dict({"model": "sim-model", "messages": messages}, **kw))
    assert st == 200, (st, obj)
    return obj["choices"][0]["message"]["content"], obj["usage"], obj["choices"][0]["finish_reason"]


def events(data):
    """An Anthropic SSE body as [(event name, data object)]; each event's data names its own
    type, as Anthropic's events do."""
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = block.split("\n")
        assert lines[0].startswith("event: ") and lines[1].startswith("data: ") and len(lines) == 2, block
        name, obj = lines[0][7:], json.loads(lines[1][6:])
        assert obj["type"] == name, block
        out.append((name, obj))
    return out


def messages(sim, body, headers=None):
    return http("POST", sim.url + "/v1/messages", body, headers)


@test
def official_anthropic_client_gets_the_chat_routes_text_from_each_flavor():
    node_path = ensure_sdk()  # before any process starts: npm may take a while the first time
    for flavor in FLAVORS:
        sim = start_sim("--flavor", flavor, "--output-tokens", "40", *FAST)
        p = subprocess.run(["node", os.path.join(SRCDIR, "tests", "integration", "anthropic_client.cjs"), sim.url,
                            "sim-model"], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NODE_PATH": node_path})
        assert p.returncode == 0, p.stderr[-3000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
        text, usage, finish = chat_text(sim, [{"role": "system", "content": "You are terse."},
                                              {"role": "user", "content": "Tell me about the sea."}], max_tokens=12)
        m = out["message"]
        assert m["content"] == [{"type": "text", "text": text}], (flavor, m, text)
        assert finish == "length" and m["stop_reason"] == "max_tokens", (flavor, m)
        assert m["usage"]["input_tokens"] == usage["prompt_tokens"], (flavor, m, usage)
        assert m["usage"]["output_tokens"] == 12, (flavor, m)
        # SGLang's ids are its own msg_<uuid hex>; vLLM keeps the chat completion's
        assert m["id"].startswith("msg_" if flavor == "sglang" else "chatcmpl-"), (flavor, m["id"])
        s = out["stream"]
        assert s["text"] == text and s["final"]["content"] == m["content"], (flavor, s, text)
        assert s["types"][:2] == ["message_start", "content_block_start"], (flavor, s["types"])
        assert s["types"][-3:] == ["content_block_stop", "message_delta", "message_stop"], (flavor, s["types"])
        assert s["types"][2:-3] == ["content_block_delta"] * 12, (flavor, s["types"])
        assert s["final"]["stop_reason"] == "max_tokens" and s["final"]["usage"]["output_tokens"] == 12, (flavor, s)
        assert out["count"]["input_tokens"] == usage["prompt_tokens"], (flavor, out["count"], usage)
        # max_tokens 0: the request model's refusal, an APIError of the SDK's with the server's body
        e = out["error"]
        assert e["status"] == 400 and e["name"] == "BadRequestError" and e["isAPIError"], (flavor, e)
        body = e["body"]["error"] if flavor == "vllm" else e["body"]
        assert body["message"] == "max_tokens: Input should be greater than or equal to 1", (flavor, e)


@test
def a_stream_is_anthropics_events_in_order_with_the_chat_routes_text():
    for flavor in FLAVORS:
        sim = start_sim("--flavor", flavor, *FAST)
        conv = {"model": "sim-model", "system": [{"type": "text", "text": "Be kind."},
                                                 {"type": "text", "text": "Be brief."}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": "What is a kernel?"}]}]}
        st, hdrs, data = messages(sim, dict(conv, max_tokens=4000, stream=True))
        assert st == 200 and hdrs["content-type"].startswith("text/event-stream"), (st, hdrs)
        ev = events(data)
        names = [n for n, _ in ev]
        assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
        assert names[1] == "content_block_start" and names[-3] == "content_block_stop", names
        assert set(names[2:-3]) == {"content_block_delta"}, names
        assert all(o["index"] == 0 for n, o in ev if n.startswith("content_block")), ev
        streamed = "".join(o["delta"]["text"] for n, o in ev if n == "content_block_delta")
        # the system blocks joined with a newline, as the chat route's system message
        text, usage, finish = chat_text(sim, [{"role": "system", "content": "Be kind.\nBe brief."},
                                              {"role": "user", "content": "What is a kernel?"}], max_tokens=4000)
        assert streamed == text and finish == "stop", (flavor, streamed, text)
        delta = ev[-2][1]
        assert delta["delta"] == {"stop_reason": "end_turn"}, (flavor, delta)
        assert delta["usage"]["output_tokens"] == usage["completion_tokens"], (flavor, delta, usage)
        assert delta["usage"]["input_tokens"] == usage["prompt_tokens"], (flavor, delta, usage)
        start = ev[0][1]["message"]
        assert start["content"] == [] and start["model"] == "sim-model", (flavor, start)
        if flavor == "vllm":  # exclude_unset: no type nor role; the prompt counted from the first chunk
            assert "role" not in start and start["usage"]["input_tokens"] == usage["prompt_tokens"], start
        else:  # exclude_none: no stop_reason; no usage before the last chunk
            assert start["role"] == "assistant" and "stop_reason" not in start, start
            assert start["usage"] == {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 0}, start
        # the whole answer is the same text
        st, _, data = messages(sim, dict(conv, max_tokens=4000))
        m = json.loads(data)
        assert st == 200 and m["content"] == [{"type": "text", "text": text}], (flavor, m)
        assert m["stop_reason"] == "end_turn" and "stop_sequence" not in m, (flavor, m)


@test
def a_tool_use_conversation_is_the_chat_routes_tool_messages():
    # The simulator's chat path writes no tool calls: what is checked is that the tools, the
    # assistant's tool_use and the user's tool_result reach it as the chat route's tool_calls
    # and tool messages, so the answer is the one the chat route gives that conversation.
    for flavor in FLAVORS:
        sim = start_sim("--flavor", flavor, *FAST)
        tools = [{"name": "get_weather", "description": "The weather of a city",
                  "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
        conv = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "18C"}]},
                    {"type": "text", "text": "And tomorrow?"}]}]
        st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 30, "tools": tools,
                                     "tool_choice": {"type": "auto"}, "messages": conv})
        m = json.loads(data)
        assert st == 200, (flavor, st, m)
        openai = [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "Let me look.", "tool_calls": [
                      {"id": "toolu_01", "type": "function",
                       "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                  {"role": "tool", "tool_call_id": "toolu_01", "content": "18C"},
                  {"role": "user", "content": "And tomorrow?"}]
        text, usage, _ = chat_text(sim, openai, max_tokens=30)
        assert m["content"] == [{"type": "text", "text": text}], (flavor, m, text)
        assert m["usage"]["input_tokens"] == usage["prompt_tokens"], (flavor, m, usage)
        # a different tool result is a different prompt, hence another answer
        conv[2]["content"][0]["content"] = "25C"
        st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 30, "tools": tools, "messages": conv})
        assert st == 200 and json.loads(data)["content"] != m["content"], (flavor, data)


@test
def count_tokens_counts_the_chat_templates_tokens():
    for flavor in FLAVORS:
        sim = start_sim("--flavor", flavor, "--tokenizer", TOK, *FAST)
        req = {"model": "sim-model", "system": "You answer in French.",
               "messages": [{"role": "user", "content": "How are you today, my friend?"},
                            {"role": "assistant", "content": "Bien."},
                            {"role": "user", "content": "And tomorrow?"}]}
        st, _, count = http_json("POST", sim.url + "/v1/messages/count_tokens", req)
        assert st == 200, (flavor, st, count)
        n = count["input_tokens"]
        want = {"input_tokens": n} if flavor == "sglang" else \
            {"input_tokens": n, "context_management": {"original_input_tokens": n}}
        assert count == want, (flavor, count)
        _, usage, _ = chat_text(sim, [{"role": "system", "content": "You answer in French."}] + req["messages"],
                                max_tokens=5)
        assert n == usage["prompt_tokens"], (flavor, n, usage)
        st, _, data = messages(sim, dict(req, max_tokens=5))
        assert st == 200 and json.loads(data)["usage"]["input_tokens"] == n, (flavor, data)
        # the rendered template has more tokens than the words alone
        st, _, bare = http_json("POST", sim.url + "/tokenize", {"prompt": "How are you today, my friend?"})
        assert n > bare["count"], (flavor, n, bare)


@test
def errors_come_in_each_servers_shape():
    long_prompt = "word " * 200
    # vLLM: the chat path's errors in Anthropic's shape with their own types and statuses
    sim = start_sim("--flavor", "vllm", "--context-length", "64", *FAST)
    st, _, data = messages(sim, {"model": "other", "max_tokens": 5,
                                 "messages": [{"role": "user", "content": "hi"}]})
    assert st == 404 and json.loads(data) == {"type": "error", "error": {
        "type": "NotFoundError", "message": "The model `other` does not exist."}}, (st, data)
    for stream in (False, True):
        st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 5, "stream": stream,
                                     "messages": [{"role": "user", "content": long_prompt}]})
        e = json.loads(data)
        assert st == 400 and e["type"] == "error" and e["error"]["type"] == "BadRequestError", (st, data)
        assert "maximum context length is 64 tokens" in e["error"]["message"], e
    # a body the request model refuses: the framework's validation answer, OpenAI-shaped
    st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 5, "frequency_penalty": 1,
                                 "messages": [{"role": "user", "content": "hi"}]})
    assert st == 400 and json.loads(data) == {"error": {
        "message": "frequency_penalty: Extra inputs are not permitted", "type": "Bad Request", "param": None,
        "code": 400}}, (st, data)
    st, _, _ = http_json("POST", sim.url + "/sim/fault", {"mode": "down"})
    st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 5,
                                 "messages": [{"role": "user", "content": "hi"}]})
    assert st == 503 and json.loads(data)["error"]["type"] == "ServiceUnavailableError", (st, data)

    # SGLang: a failure of the chat path is 500 internal_error, or a stream of its error event
    sim = start_sim("--flavor", "sglang", "--context-length", "64", *FAST)
    st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 5,
                                 "messages": [{"role": "user", "content": long_prompt}]})
    assert st == 500 and json.loads(data) == {"type": "error", "error": {
        "type": "internal_error", "message": "Internal processing error"}}, (st, data)
    st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 5, "stream": True,
                                 "messages": [{"role": "user", "content": long_prompt}]})
    ev = events(data)
    assert st == 200 and [n for n, _ in ev] == ["error", "message_delta", "message_stop"], (st, data)
    assert ev[0][1]["error"] == {"type": "api_error", "message": "Stream processing error"}, ev
    st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 5,
                                 "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]})
    assert st == 400 and json.loads(data)["type"] == "Bad Request", (st, data)
    assert json.loads(data)["message"].startswith("messages.0.content.0.type: 'document' blocks"), data


@test
def a_stream_that_fails_midway_ends_as_each_server_ends_it():
    for flavor in FLAVORS:
        sim = start_sim("--flavor", flavor, "--stream-fail-rate", "1", "--output-tokens", "40", *FAST)
        st, _, data = messages(sim, {"model": "sim-model", "max_tokens": 20, "stream": True,
                                     "messages": [{"role": "user", "content": "a stream that fails"}]})
        assert st == 200, (flavor, st)
        names = [n for n, _ in events(data)]
        assert names[:2] == ["message_start", "content_block_start"], (flavor, names)
        assert names.count("content_block_delta") == 10, (flavor, names)  # half the answer, then the error
        if flavor == "vllm":  # the converter's except: one error event, and the stream ends
            assert names[-1] == "error" and "message_stop" not in names, names
        else:  # an error event it goes on past, then [DONE] closes the message
            assert names[-4:] == ["error", "content_block_stop", "message_delta", "message_stop"], names


run()
