"""The serving API past chat, completions and embeddings, through the gateway:
/tokenize and /detokenize against simulators of both flavors (the same bytes
as the simulator's own answer; "model" optional with one model, required with
several; an unknown model is 404; a backend that is down is retried past), and
the OpenAI Responses API against a scripted backend (usage counted from
response.completed, streamed or not; an error after the first byte ends the
stream with the Responses API's own error event)."""

import json
import socket

from harness import (RESPONSE, FakeBackend, http, http_json, metric, run, start_gateway, start_sim,
                     stateful_backend, test, wait_until)


def healthy(gw, n):
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == n, timeout=10,
               what=f"{n} healthy backends")


def models_learned(gw, n):
    """n backends' model lists fetched: a model none of them lists is then known to be served nowhere
    (while a list is unknown, its backend may serve it and the request waits)."""
    wait_until(lambda: sum(1 for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]
                           if b["models"]) == n, timeout=10, what=f"{n} backends' model lists")


def post(url, body):
    """(status, headers as a lower-cased dict, body bytes)"""
    return http("POST", url, body)


def raw_post(gw, path, body, limit=15):
    """POST on a raw socket, read until the gateway closes (a stream that
    failed is cut short on purpose, with no last chunk): (head, body with the
    chunk framing taken out)."""
    s = socket.create_connection(("127.0.0.1", gw.port))
    data = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (path.encode(), len(data), data))
    s.settimeout(limit)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    head, _, rest = got.partition(b"\r\n\r\n")
    out = b""
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, rest = out + rest[:n], rest[n + 2:]
    return head, out


@test
def tokenize_and_detokenize_pass_byte_for_byte_in_both_flavors():
    for flavor in ("sglang", "vllm"):
        sim = start_sim("--model", "m", "--flavor", flavor)
        gw = start_gateway([sim], "--health-interval-ms", "200")
        healthy(gw, 1)
        for path, body in (("/tokenize", {"prompt": "Hello, world!"}),
                           ("/tokenize", {"model": "m", "prompt": "Hello, world!"}),
                           ("/detokenize", {"tokens": [1819043144, 1998597231, 1684828783, 33]})):
            direct = post(sim.url + path, body)
            via = post(gw.url + path, body)
            assert direct[0] == via[0] == 200, (flavor, path, direct, via)
            assert via[2] == direct[2], (flavor, path, via[2], direct[2])
            assert via[1]["x-infergate-backend"] == sim.url
        text = json.loads(post(gw.url + "/detokenize", {"tokens": json.loads(
            post(gw.url + "/tokenize", {"prompt": "round trip"})[2])["tokens"]})[2])
        assert text == ({"text": "round trip"} if flavor == "sglang" else {"prompt": "round trip"}), text
        # the backend's validation error comes back in OpenAI's shape (SGLang's is flat), its message kept
        st, _, raw = post(gw.url + "/tokenize", {"prompt": 5})
        direct = json.loads(post(sim.url + "/tokenize", {"prompt": 5})[2])
        want = direct["message"] if flavor == "sglang" else direct["error"]["message"]
        assert st == 400 and json.loads(raw)["error"]["message"] == want, (raw, direct)
        gw.kill()
        sim.kill()


# The simulator's answers to the routes past chat, per flavor: (method, path, body).
NEW_ROUTES = {
    "sglang": [("POST", "/v1/embeddings", {"model": "m", "input": ["one", "two"]}),
               ("POST", "/v1/embeddings", {"model": "m", "input": "one", "encoding_format": "base64"}),
               ("POST", "/v1/rerank", {"query": "which", "documents": ["a b", "c d", "e f"], "top_n": 2}),
               ("PUT", "/v1/rerank", {"query": "which", "documents": ["a b", "c d"], "return_documents": False}),
               ("POST", "/v1/score", {"query": "is it?", "items": ["yes", "no"], "label_token_ids": [9, 7],
                                      "apply_softmax": True}),
               ("POST", "/classify", {"text": ["good", "bad"], "rid": "c"}),
               ("POST", "/generate", {"text": "Once", "rid": "r1", "sampling_params": {"max_new_tokens": 6}}),
               ("PUT", "/generate", {"text": "Once", "rid": "r2", "sampling_params": {"max_new_tokens": 6},
                                     "stream": True})],
    "vllm": [("POST", "/v1/embeddings", {"model": "m", "input": ["one", "two"]}),
             ("POST", "/v1/rerank", {"model": "m", "query": "which", "documents": ["a b", "c d", "e f"]}),
             ("POST", "/v1/score", {"model": "m", "queries": "is it?", "documents": ["yes", "no"]}),
             ("POST", "/pooling", {"model": "m", "input": "one"}),
             ("POST", "/classify", {"model": "m", "input": ["good", "bad"]})],
}


def comparable(path, raw):
    """An answer's bytes, but for what differs between two calls by design:
    vLLM's "created" second, /generate's latencies and send times."""
    import re
    raw = re.sub(rb'"created":\d+', b'"created":0', raw)
    return re.sub(rb'"(e2e_latency|response_sent_to_client_ts)":[0-9.e+-]+', b'"\\1":0', raw)


@test
def every_new_route_answers_as_the_simulator_does_directly():
    # the same bytes through the gateway as straight from the server (the same X-Request-Id, which
    # vLLM makes its ids of), in both flavors; usage counted where the answer has it
    for flavor, cases in NEW_ROUTES.items():
        sim = start_sim("--model", "m", "--flavor", flavor, "--tokens-per-second", "0", "--ttft-ms", "0")
        gw = start_gateway([sim], "--health-interval-ms", "200")
        healthy(gw, 1)
        for i, (method, path, body) in enumerate(cases):
            h = {"X-Request-Id": f"req-{flavor}-{i}"}
            direct = http(method, sim.url + path, body, headers=h)
            via = http(method, gw.url + path, body, headers=h)
            assert direct[0] == via[0] == 200, (flavor, path, direct, via)
            assert comparable(path, via[2]) == comparable(path, direct[2]), (flavor, path, via[2], direct[2])
            assert via[1]["x-infergate-backend"] == sim.url, via[1]
            if body.get("stream"):
                assert via[1]["content-type"].startswith("text/event-stream") and via[2].endswith(b"data: [DONE]\n\n")
        text = http("GET", gw.url + "/metrics")[2].decode()
        ptok = metric(text, f'infergate_backend_prompt_tokens_total{{backend="{sim.url}"}}')
        ctok = metric(text, f'infergate_backend_completion_tokens_total{{backend="{sim.url}"}}')
        assert ptok > 0 and ctok == (12 if flavor == "sglang" else 0), (ptok, ctok)   # /generate: 6 + 6
        gw.kill()
        sim.kill()


@test
def the_new_routes_are_retried_past_a_dead_backend_and_404_an_unknown_model():
    for flavor, cases in NEW_ROUTES.items():
        one, two = (start_sim("--model", "m", "--flavor", flavor, "--tokens-per-second", "0") for _ in range(2))
        gw = start_gateway([one, two], "--health-interval-ms", "60000")  # no probe marks it down first
        healthy(gw, 2)
        models_learned(gw, 2)  # else "nope" waits for one's list until a probe (60 s) marks it down
        one.kill()
        for _ in range(2):
            for method, path, body in cases:
                st, hdrs, raw = http(method, gw.url + path, body)
                assert st == 200 and hdrs["x-infergate-backend"] == two.url, (flavor, path, st, hdrs, raw)
        for method, path, body in cases:
            st, _, obj = http_json(method, gw.url + path, dict(body, model="nope"))
            assert st == 404 and obj["error"]["code"] == "model_not_found", (flavor, path, obj)
        gw.kill()
        two.kill()


@test
def the_new_routes_wait_in_the_queue_by_class():
    # one slot, held by a slow /generate: a low /v1/embeddings and then a high /v1/rerank wait;
    # when the slot frees the high one is sent first (the access log's dispatch order), and
    # both say they were queued
    import threading
    import time
    from harness import Dir
    d = Dir()
    sim = start_sim("--model", "m", "--tokens-per-second", "20", "--ttft-ms", "0")
    gw = start_gateway([sim], "--health-interval-ms", "200", "--max-inflight", "1", "--load-source", "gateway",
                       "--access-log", d("access.log"))
    healthy(gw, 1)
    done, lock = [], threading.Lock()

    def call(method, path, body, prio):
        r = http(method, gw.url + path, body, headers={"X-Infergate-Priority": prio})
        with lock:
            done.append((path, r[0], r[1].get("x-infergate-queued-ms")))
    t0 = threading.Thread(target=call, args=("POST", "/generate", {"text": "hold", "sampling_params":
                                                                     {"max_new_tokens": 30}}, "normal"))
    t0.start()
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] == 1, timeout=10,
               what="the slot taken")
    ts = [threading.Thread(target=call, args=a) for a in (
        ("POST", "/v1/embeddings", {"model": "m", "input": "later"}, "low"),
        ("POST", "/v1/rerank", {"query": "q", "documents": ["x", "y"]}, "high"))]
    for i, t in enumerate(ts):
        t.start()
        wait_until(lambda: http_json("GET", gw.url + "/health/backends")[2]["gateway"]["queue_depth"] == i + 1,
                   timeout=10, what=f"{i + 1} waiting")   # arrival order: low first
    for t in [t0] + ts:
        t.join(30)
    assert all(st == 200 for _, st, _ in done) and len(done) == 3, done
    assert all(q for p, _, q in done if p != "/generate") and next(q for p, _, q in done if p == "/generate") is None
    def proxied():   # the gateway's own answers (/health/backends) are logged too, without "dispatch"
        return [e for e in map(json.loads, open(d("access.log")).read().splitlines()) if "dispatch" in e]
    wait_until(lambda: len(proxied()) == 3, timeout=10, what="3 proxied requests logged")
    sent = {e["path"]: e["dispatch"] for e in proxied()}
    assert sent["/generate"] < sent["/v1/rerank"] < sent["/v1/embeddings"], sent   # high before low


@test
def without_a_model_several_models_need_one_and_unknown_ones_are_404():
    a, b = start_sim("--model", "a"), start_sim("--model", "b")
    gw = start_gateway([a, b], "--health-interval-ms", "200")
    healthy(gw, 2)
    # a backend is up before its model list is read (a moment later): until both lists are in,
    # the one known model is the only one and a request without a model goes to it
    wait_until(lambda: sorted(m["id"] for m in http_json("GET", gw.url + "/v1/models")[2]["data"]) == ["a", "b"],
               timeout=10, what="both model lists read")
    st, _, obj = http_json("POST", gw.url + "/tokenize", {"prompt": "x"})
    assert st == 400 and obj["error"]["param"] == "model", obj
    msg = obj["error"]["message"]
    assert obj["error"]["code"] == "missing_required_parameter" and "'a'" in msg and "'b'" in msg, obj
    st, hdrs, raw = post(gw.url + "/tokenize", {"model": "b", "prompt": "x"})
    assert st == 200 and hdrs["x-infergate-backend"] == b.url, (st, hdrs, raw)
    st, _, obj = http_json("POST", gw.url + "/detokenize", {"model": "c", "tokens": [1]})
    assert st == 404 and obj["error"]["code"] == "model_not_found", obj
    # the gateway's own checks: the body must be JSON, "model" a string
    st, _, obj = http_json("POST", gw.url + "/tokenize", b"{not json")
    assert st == 400 and obj["error"]["code"] == "invalid_json", obj
    st, _, obj = http_json("POST", gw.url + "/tokenize", {"model": 7, "prompt": "x"})
    assert st == 400 and obj["error"]["param"] == "model", obj
    st, _, obj = http_json("GET", gw.url + "/tokenize")
    assert st == 405, obj


@test
def a_backend_that_is_down_is_retried_past():
    one, two = start_sim("--model", "m"), start_sim("--model", "m")
    gw = start_gateway([one, two], "--health-interval-ms", "60000")  # no probe marks it down first
    healthy(gw, 2)
    one.kill()
    for _ in range(8):
        st, hdrs, raw = post(gw.url + "/tokenize", {"prompt": "still served"})
        assert st == 200 and hdrs["x-infergate-backend"] == two.url, (st, hdrs, raw)


def responses_backend(fail_midway=False):
    """A backend answering POST /v1/responses in OpenAI's shapes (streamed:
    typed events, usage in response.completed)."""
    def handler(fb, req, sock):
        if req["method"] == "GET":
            return FakeBackend.answer_ok(fb, req, sock)
        body = json.loads(req["body"])
        if not body.get("stream"):
            FakeBackend.reply(sock, 200, RESPONSE)
            return True
        events = [("response.created", {"type": "response.created", "sequence_number": 0,
                                        "response": dict(RESPONSE, status="in_progress", usage=None)}),
                  ("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 1,
                                                  "item_id": "msg_1", "output_index": 0, "content_index": 0,
                                                  "delta": "Hi"})]
        if not fail_midway:
            events.append(("response.completed", {"type": "response.completed", "sequence_number": 2,
                                                  "response": RESPONSE}))
        data = b"".join(b"event: %s\ndata: %s\n\n" % (e.encode(), json.dumps(d).encode()) for e, d in events)
        if fail_midway:  # a torn event, then the connection closes
            sock.sendall(b"HTTP/1.1 200 X\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(data) + 500, data + b"event: response.output_text.delta\ndata: {\"ty"))
            return False
        FakeBackend.reply(sock, 200, data, "text/event-stream")
        return True
    return FakeBackend(handler, model="m")


@test
def responses_usage_is_counted_streamed_or_not():
    fb = responses_backend()
    gw = start_gateway([fb], "--health-interval-ms", "200")
    healthy(gw, 1)
    st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": "Hello"})
    assert st == 200 and json.loads(raw) == RESPONSE, raw
    st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": "Hello", "stream": True})
    assert st == 200 and hdrs["content-type"].startswith("text/event-stream"), hdrs
    assert raw.count(b"event: ") == 3 and b"response.completed" in raw, raw
    # nothing spliced into a Responses body: no stream_options
    sent = [json.loads(r["body"]) for r in fb.posts()]
    assert all("stream_options" not in b for b in sent), sent
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, 'infergate_tokens_total{kind="prompt"}') == 22, m
    assert metric(m, 'infergate_tokens_total{kind="completion"}') == 14, m
    assert metric(m, 'infergate_request_duration_seconds_count{route="/v1/responses"}') == 2


@test
def a_responses_stream_that_breaks_ends_with_its_own_error_event():
    fb = responses_backend(fail_midway=True)
    gw = start_gateway([fb], "--health-interval-ms", "200")
    healthy(gw, 1)
    head, raw = raw_post(gw, "/v1/responses", {"model": "m", "input": "Hello", "stream": True})
    assert head.startswith(b"HTTP/1.1 200"), head
    events = [e for e in raw.decode().split("\n\n") if e]
    # the two whole events, not the torn one, then the error event of the Responses API
    assert [e.split("\n")[0] for e in events] == ["event: response.created", "event: response.output_text.delta",
                                                  "event: error"], events
    err = json.loads(events[-1].split("\n", 1)[1][len("data: "):])
    assert err["type"] == "error" and err["code"] == "backend_error" and err["message"], err
    assert err["sequence_number"] == 2 and err["param"] is None, err


@test
def a_follow_up_reaches_the_backend_that_stored_its_previous_response():
    fbs = [stateful_backend() for _ in range(7)]
    gw = start_gateway(fbs, "--health-interval-ms", "200")
    healthy(gw, 7)
    for stream in (False, True):
        st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": "first", "stream": stream})
        assert st == 200, raw
        holder = hdrs["x-infergate-backend"]
        if stream:   # the id comes in the response.created event
            rid = json.loads(raw.split(b"data: ", 1)[1].split(b"\n", 1)[0])["response"]["id"]
        else:
            rid = json.loads(raw)["id"]
        for i in range(14):   # seven backends, least-loaded routing: without the pin, most would 404
            st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": f"more {i}",
                                                            "previous_response_id": rid})
            assert st == 200 and hdrs["x-infergate-backend"] == holder, (i, st, raw)
    # store: false is not remembered; an id the gateway never saw is routed like any request
    st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": "x", "previous_response_id": "resp_nope"})
    assert st == 404, raw
    st, _, obj = http_json("POST", gw.url + "/v1/responses", {"model": "m", "input": "x", "previous_response_id": 5})
    assert st == 400 and obj["error"]["param"] == "previous_response_id", obj
    # the holder goes: its responses went with it
    holder_fb = next(fb for fb in fbs if fb.url == holder)
    holder_fb.stop()
    wait_until(lambda: {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
               [holder]["state"] != "up", timeout=10, what="the holder down")
    st, _, obj = http_json("POST", gw.url + "/v1/responses", {"model": "m", "input": "x",
                                                               "previous_response_id": rid})
    assert st == 404 and obj["error"]["code"] == "previous_response_not_found", obj
    assert obj["error"]["param"] == "previous_response_id" and rid in obj["error"]["message"], obj


@test
def a_stored_responses_own_routes_reach_its_holder():
    # GET and DELETE /v1/responses/{id}, its cancel and its input items go to the one of
    # seven backends that stored it, path and query as sent; an id the gateway never saw
    # stored is its 404; with keys on, another key's id is not found either
    from harness import Dir, keys_file
    d = Dir()
    alice, bob = keys_file(d("keys.json"), "alice", "bob")
    fbs = [stateful_backend() for _ in range(7)]
    gw = start_gateway(fbs, "--health-interval-ms", "200", "--api-keys-file", d("keys.json"))
    healthy(gw, 7)
    made = []
    for i in range(5):
        st, hdrs, raw = http("POST", gw.url + "/v1/responses", {"model": "m", "input": f"q{i}"}, headers=alice)
        assert st == 200, raw
        made.append((json.loads(raw)["id"], hdrs["x-infergate-backend"]))
    assert len({h for _, h in made}) > 1, made   # spread: the pins below matter
    for rid, holder in made:
        fb = next(fb for fb in fbs if fb.url == holder)
        st, hdrs, raw = http("GET", f"{gw.url}/v1/responses/{rid}?include=reasoning.encrypted_content",
                             headers=alice)
        assert st == 200 and hdrs["x-infergate-backend"] == holder and json.loads(raw)["id"] == rid, raw
        assert fb.paths[-1] == ("GET", f"/v1/responses/{rid}?include=reasoning.encrypted_content"), fb.paths
        st, hdrs, raw = http("GET", f"{gw.url}/v1/responses/{rid}/input_items", headers=alice)
        assert st == 200 and json.loads(raw)["object"] == "list" and hdrs["x-infergate-backend"] == holder, raw
        st, _, obj = http_json("POST", f"{gw.url}/v1/responses/{rid}/cancel", headers=alice)
        assert st == 400 and obj["error"]["message"] == "Cannot cancel a synchronous response.", obj
        # another key: as if it did not exist
        st, _, obj = http_json("GET", f"{gw.url}/v1/responses/{rid}", headers=bob)
        assert st == 404 and obj["error"]["code"] == "response_not_found", obj
        st, hdrs, obj = http_json("DELETE", f"{gw.url}/v1/responses/{rid}", headers=alice)
        assert st == 200 and obj == {"id": rid, "object": "response", "deleted": True}, obj
        st, _, obj = http_json("GET", f"{gw.url}/v1/responses/{rid}", headers=alice)   # the holder's own 404
        assert st == 404 and obj["error"]["message"] == f"Response with id '{rid}' not found.", obj
        assert [m for m, _ in fb.paths][-5:] == ["GET", "GET", "POST", "DELETE", "GET"], fb.paths
    # a follow-up by another key is not pinned to alice's response
    st, _, obj = http_json("POST", gw.url + "/v1/responses", {"model": "m", "input": "x",
                                                               "previous_response_id": made[0][0]}, headers=bob)
    assert st == 404, obj
    st, _, obj = http_json("GET", gw.url + "/v1/responses/resp_never_seen", headers=alice)
    assert st == 404 and obj["error"]["param"] == "response_id" and "resp_never_seen" in obj["error"]["message"], obj
    st, _, obj = http_json("PUT", gw.url + "/v1/responses/resp_x", headers=alice)
    assert st == 405 and obj["error"]["message"] == "this endpoint takes GET, DELETE", obj
    assert sum(len(fb.paths) for fb in fbs) == 25, [fb.paths for fb in fbs]   # nothing else reached a backend
    text = http("GET", gw.url + "/metrics")[2].decode()
    assert 'infergate_requests_total{route="/v1/responses/{id}",code="200"' in text, text
    assert 'infergate_requests_total{route="/v1/responses/{id}/cancel",code="400"' in text, text


@test
def a_follow_up_waiting_for_its_full_backend_does_not_hold_the_queue_behind_it():
    # one slot per backend. The holder of a stored response is busy with a long follow-up
    # (P1), the other with a shorter request (B1); a second follow-up (P2) waits for the
    # holder, and an unpinned request (U) waits behind it. When the other backend frees, U
    # goes there at once: it ends before P1 does, not after P2
    import threading
    sims = [start_sim("--model", "m", "--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "60")
            for _ in range(2)]
    gw = start_gateway(sims, "--health-interval-ms", "200", "--max-inflight", "1", "--load-source", "gateway")
    healthy(gw, 2)
    st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": "first", "max_output_tokens": 2})
    assert st == 200, raw
    rid, holder = json.loads(raw)["id"], hdrs["x-infergate-backend"]
    other = next(s.url for s in sims if s.url != holder)
    done, lock = [], threading.Lock()

    def call(name, path, body):
        r = post(gw.url + path, body)
        with lock:
            done.append((name, r[0], r[1].get("x-infergate-backend")))
    calls = [("P1", "/v1/responses", {"model": "m", "input": "long", "previous_response_id": rid}),
             ("B1", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "b"}],
                                             "max_tokens": 20}),
             ("P2", "/v1/responses", {"model": "m", "input": "next", "previous_response_id": rid,
                                      "max_output_tokens": 4}),
             ("U", "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "u"}],
                                            "max_tokens": 4})]
    threads = []
    for i, c in enumerate(calls):
        threads.append(threading.Thread(target=call, args=c))
        threads[-1].start()
        want = min(i + 1, 2)
        wait_until(lambda: sum(http_json("GET", s.url + "/sim/state")[2]["num_running_reqs"] for s in sims) == want
                   and http_json("GET", gw.url + "/health/backends")[2]["gateway"]["queue_depth"] == max(0, i - 1),
                   timeout=10, what=f"{c[0]} placed")
    for t in threads:
        t.join(30)
    order = [n for n, _, _ in done]
    where = {n: b for n, _, b in done}
    assert all(st == 200 for _, st, _ in done), done
    assert where["P1"] == where["P2"] == holder and where["B1"] == where["U"] == other, (where, holder)
    assert order.index("U") < order.index("P1") < order.index("P2"), order


@test
def the_route_table_is_the_configurations():
    # two built-in routes and one of SGLang's that is not built in (/encode: POST or PUT, no
    # model, token counts in meta_info): the table says what is forwarded and how
    import subprocess
    from harness import Dir, binary
    native = {"embedding": [0.5, -0.25], "meta_info": {"id": "x", "prompt_tokens": 3, "completion_tokens": 0}}

    def handler(fb, req, sock):
        if req["method"] == "GET":
            return FakeBackend.answer_ok(fb, req, sock)
        FakeBackend.reply(sock, 200, json.dumps(native, indent=1).encode())
        return True
    fb = FakeBackend(handler, model="m")
    d = Dir()
    table = ["/v1/chat/completions", "/tokenize",
             {"path": "/encode", "methods": ["POST", "PUT"], "model": "optional", "stream": False,
              "usage": "meta_info"}]
    with open(d("gw.json"), "w") as f:
        json.dump({"routes": table}, f)
    gw = start_gateway([fb], "--health-interval-ms", "200", config=d("gw.json"))
    healthy(gw, 1)
    body = b'{"text": "hello there", "stream": true}'
    st, hdrs, raw = http("PUT", gw.url + "/encode", body, headers={"Content-Type": "application/json"})
    assert st == 200 and raw == json.dumps(native, indent=1).encode(), raw   # one body, as it came
    sent = [r for r in fb.requests if r["path"] == "/encode"]
    assert [r["method"] for r in sent] == ["PUT"] and sent[0]["body"] == body, sent
    text = http("GET", gw.url + "/metrics")[2].decode()
    assert f'infergate_backend_prompt_tokens_total{{backend="{fb.url}"}} 3' in text, text
    st, hdrs, obj = http_json("GET", gw.url + "/encode")
    assert st == 405 and hdrs["allow"] == "POST, PUT", (hdrs, obj)
    st, _, obj = http_json("POST", gw.url + "/v1/completions", {"model": "m", "prompt": "x"})
    assert st == 404 and "/v1/chat/completions, /tokenize, /encode," in obj["error"]["message"], obj
    # --check-config prints the table whole; given back, it is the same table
    out = subprocess.run([binary("infergate"), "--config", d("gw.json"), "--backend", fb.url, "--check-config"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)["routes"]
    assert [r["path"] for r in printed] == ["/v1/chat/completions", "/tokenize", "/encode"], printed
    assert printed[2] == {"path": "/encode", "methods": ["POST", "PUT"], "model": "optional", "stream": False,
                          "usage": "meta_info", "stream_options": False, "output": False, "responses": False,
                          "anthropic": False}
    assert printed[1]["model"] == "optional" and printed[0]["stream_options"] is True, printed
    with open(d("again.json"), "w") as f:
        json.dump({"routes": printed, "backends": [fb.url]}, f)
    again = subprocess.run([binary("infergate"), "--config", d("again.json"), "--check-config"],
                           capture_output=True, text=True, timeout=10)
    assert again.returncode == 0 and json.loads(again.stdout)["routes"] == printed, again.stderr
    # every mistake named, exit 2, nothing started
    with open(d("bad.json"), "w") as f:
        json.dump({"backends": [fb.url], "routes": [
            {"path": "encode"}, {"path": "/metrics"}, "/v1/nope", {"path": "/x", "methods": ["GET"]},
            {"path": "/y", "usage": "tokens"}, {"path": "/z", "bogus": 1}, "/tokenize", "/tokenize",
            {"path": "/w", "stream": False, "stream_options": True}]}, f)
    bad = subprocess.run([binary("infergate"), "--config", d("bad.json"), "--check-config"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2, bad
    for want in ("routes[0]: 'encode' must start with '/'", "routes[1]: '/metrics' is one of the gateway's own",
                 "routes[2]: '/v1/nope' is not a built-in route", "routes[3].methods[0]: 'GET' is not POST or PUT",
                 "routes[4].usage: must be", "routes[5]: unknown key 'bogus'", "routes[7]: '/tokenize' is listed twice",
                 "routes[8].stream_options: true needs \"stream\": true"):
        assert want in bad.stderr, (want, bad.stderr)


@test
def responses_with_simulators_stored_streamed_and_followed_up():
    # seven simulators, which keep the responses they stored and 404 a follow-up naming
    # one they do not hold: every follow-up must reach the one that answered first
    sims = [start_sim("--model", "m", "--tokens-per-second", "0", "--ttft-ms", "0") for _ in range(7)]
    gw = start_gateway(sims, "--health-interval-ms", "200")
    healthy(gw, 7)
    st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": "Hello", "max_output_tokens": 6})
    first = json.loads(raw)
    assert st == 200 and first["object"] == "response" and first["status"] == "incomplete", first
    assert first["usage"]["output_tokens"] == 6 and first["output"][0]["content"][0]["text"], first
    holder, rid = hdrs["x-infergate-backend"], first["id"]
    for i in range(10):
        st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": f"and {i}", "previous_response_id": rid,
                                                        "stream": i % 2 == 1})
        assert st == 200 and hdrs["x-infergate-backend"] == holder, (i, st, raw[:300])
    # a streamed one: typed events in order, the text of the deltas is the completed text
    st, hdrs, raw = post(gw.url + "/v1/responses", {"model": "m", "input": "stream it", "stream": True})
    events = [e for e in raw.decode().split("\n\n") if e]
    types = [e.split("\n")[0][len("event: "):] for e in events]
    datas = [json.loads(e.split("\n")[1][len("data: "):]) for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"] and types[-1] == "response.completed", types
    assert [d["sequence_number"] for d in datas] == list(range(len(datas))), datas
    text = "".join(d["delta"] for d in datas if d["type"] == "response.output_text.delta")
    assert datas[-1]["response"]["output"][0]["content"][0]["text"] == text and text, datas[-1]
    # usage counted from the answers: 12 responses, their input and output tokens
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, 'infergate_tokens_total{kind="completion"}') >= 12, m
    assert metric(m, 'infergate_request_duration_seconds_count{route="/v1/responses"}') == 12, m


run()
