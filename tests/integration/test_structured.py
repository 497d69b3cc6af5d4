"""Structured outputs and a backend that dies mid-stream: a request that
constrains its answer (response_format json_schema, SGLang's json_schema) is
never continued on a second server, whose grammar would start the document
again; the client gets either the whole document from one server or the
documented error event (docs/reliability-and-security.md), never two
documents spliced. The same request without the constraint is continued as
before, so the test sees the difference. infergate-sim answers these
requests with a JSON document of the schema (src/sim/schema.c)."""

import json
import re
import signal
import socket
import time

from harness import chat_body, http, http_json, metric, run, sse_events, start_gateway, start_sims, test, wait_until

MODEL = "sim-model"
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "500")
# Both simulators with the same seed: the same request gets the same document from either.
SEEDED = ("--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "60", "--seed", "7")
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
                         "member": {"type": "boolean"}},
          "required": ["name", "age", "tags", "member"]}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
BROKEN = "the backend failed while streaming; the response is incomplete"


def wait_healthy(gw, n, timeout=10):
    def ok():
        st, _, obj = http_json("GET", gw.url + "/health")
        return st == 200 and obj["healthy_backends"] == n
    wait_until(ok, timeout=timeout, what=f"{n} healthy backends")


def unchunk(data):
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


def one_stream(gw, body, path, kill_after, sims):
    """Streams one request on a raw socket and SIGKILLs the simulator serving it after
    kill_after seconds. Returns (served_by, events: parsed objects or "[DONE]")."""
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
    time.sleep(kill_after)
    next(x for x in sims if x.url == served_by).send_signal(signal.SIGKILL)
    s.settimeout(30)
    rest = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            rest += d
    except ConnectionResetError:
        pass
    s.close()
    return served_by, [e if e == "[DONE]" else json.loads(e) for e in sse_events(unchunk(first + rest))]


def text_of(events, chat):
    out = []
    for e in events:
        if e == "[DONE]" or "error" in e or not e.get("choices"):
            continue
        c = e["choices"][0]
        out.append(((c.get("delta") or {}).get("content") or "") if chat else (c.get("text") or ""))
    return "".join(out)


def direct(sim, body, path):
    b = dict(body, stream=False)
    st, _, obj = http_json("POST", sim.url + path, b, timeout=60)
    assert st == 200, obj
    c = obj["choices"][0]
    return c["message"]["content"] if "message" in c else c["text"]


def continuations(gw):
    _, _, text = http("GET", gw.url + "/metrics")
    return sum(metric(text, f'infergate_stream_continuations_total{{reason="{r}"}}')
               for r in ("reset", "error_event", "stall"))


def of_the_schema(doc):
    assert isinstance(doc, dict) and set(SCHEMA["required"]) <= set(doc), doc
    assert isinstance(doc["name"], str) and isinstance(doc["age"], int) and 0 <= doc["age"] <= 120, doc
    assert isinstance(doc["tags"], list) and 1 <= len(doc["tags"]) <= 3, doc
    assert isinstance(doc["member"], bool), doc


def never_spliced(body, path, chat):
    """One constrained stream whose backend is killed midway: the whole document of one
    server, or the documented error after a prefix of that document."""
    sims = start_sims(2, *SEEDED)
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_healthy(gw, 2)
    served_by, events = one_stream(gw, body, path, kill_after=0.6, sims=sims)
    survivor = next(x for x in sims if x.url != served_by)
    whole = direct(survivor, body, path)          # the same document the killed one was sending
    of_the_schema(json.loads(whole))
    got = text_of(events, chat)
    if events and events[-1] == "[DONE]":           # it finished before the kill, or was spliced
        assert got == whole, (got, whole)
        assert continuations(gw) == 0, continuations(gw)
        return
    assert events and "error" in events[-1], events[-3:]
    assert events[-1]["error"]["message"] == BROKEN, events[-1]
    assert got and got != whole and whole.startswith(got), (got, whole)  # one server's prefix, nothing after
    assert continuations(gw) == 0, continuations(gw)
    log = gw.read_log()
    assert "the request constrains its answer (structured output)" in log, log[-2000:]


@test
def a_structured_chat_stream_whose_backend_dies_is_not_continued():
    body = chat_body("a person, please", stream=True, response_format=RESPONSE_FORMAT)
    never_spliced(body, "/v1/chat/completions", chat=True)


@test
def sglangs_json_schema_on_completions_is_not_continued_either():
    body = {"model": MODEL, "prompt": "a person, please", "stream": True, "json_schema": json.dumps(SCHEMA)}
    never_spliced(body, "/v1/completions", chat=False)


@test
def the_same_stream_without_a_constraint_is_continued():
    sims = start_sims(2, *SEEDED)
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_healthy(gw, 2)
    body = chat_body("a person, please", stream=True, max_tokens=40)
    served_by, events = one_stream(gw, body, "/v1/chat/completions", kill_after=0.6, sims=sims)
    survivor = next(x for x in sims if x.url != served_by)
    assert events and events[-1] == "[DONE]", events[-3:]
    assert not any("error" in e for e in events[:-1])
    assert text_of(events, True) == direct(survivor, body, "/v1/chat/completions")
    assert continuations(gw) == 1


run()
