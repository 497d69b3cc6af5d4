"""Each tenant sees only its own (issue 46): with a keys file, key B (bob) goes after what key A
(alice) made, on one gateway with real processes: her stored response (by id, and as the
previous_response_id of a follow-up), her file, her batch, her Idempotency-Key's answer, and the
spans of her trace. Every attempt fails as if the object did not exist (the same answer as for an
id never made, in OpenAI's shape), nothing of it reaches a backend, the gateway keeps serving, and
alice still gets each of her objects. With auth_status 1, the status endpoints (every key's names
and token counts) take an admin key or a key given "status": true, never a tenant's own key."""

import json
import subprocess

from harness import (Collector, FakeBackend, Dir, assert_openai_error, binary, chat_body, http, http_json, keys_file,
                     rss_kb, run, sanitized, span_attrs, start_gateway, stateful_backend, test, upload, wait_until)


def tenant_keys(d, *names, status=()):
    """A JSON keys file with a key per name; those in `status` get the status right."""
    hdrs = keys_file(d("keys.json"), *names)
    with open(d("keys.json")) as f:
        doc = json.load(f)
    for e in doc["keys"]:
        if e["name"] in status:
            e["status"] = True
    with open(d("keys.json"), "w") as f:
        json.dump(doc, f)
    return hdrs


def healthy(gw, n=1):
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == n, timeout=10,
               what=f"{n} healthy backends")


def not_found(st, obj, param, code, message):
    assert_openai_error(st, obj, 404, "invalid_request_error")
    e = obj["error"]
    assert (e["param"], e["code"], e["message"]) == (param, code, message), obj


def batch_of(file_id):
    return {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}


def backend_posts_naming(fb, needle):
    return [r for r in fb.posts() if needle.encode() in r["body"]]


@test
def another_keys_responses_files_batches_and_idempotent_answers_are_not_found():
    d = Dir()
    alice, bob = tenant_keys(d, "alice", "bob")
    fb = stateful_backend()
    gw = start_gateway([fb], "--api-keys-file", d("keys.json"), "--data-dir", d("data"),
                       "--health-interval-ms", "200")
    healthy(gw)

    # alice's objects: a stored response, a file, a batch of it, an idempotent answer
    st, _, resp = http_json("POST", gw.url + "/v1/responses", {"model": "m", "input": "secret plan"}, headers=alice)
    assert st == 200, resp
    rid = resp["id"]
    corpus = b"".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                  "body": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}})
                      .encode() + b"\n" for i in range(3))
    st, f = upload(gw, corpus, headers=alice)
    assert st == 200, f
    st, _, batch = http_json("POST", gw.url + "/v1/batches", batch_of(f["id"]), headers=alice)
    assert st == 200, batch
    idem_body = chat_body("alice's question", model="m", max_tokens=5)
    st, h, first = http("POST", gw.url + "/v1/chat/completions", idem_body, headers={**alice, "Idempotency-Key": "k-1"})
    assert st == 200 and "idempotent-replayed" not in h, (st, h)
    rss0 = rss_kb(gw.pid)

    # bob: her stored response, by id and as the conversation to continue, answers as one never made
    st, _, obj = http_json("GET", f"{gw.url}/v1/responses/{rid}", headers=bob)
    not_found(st, obj, "response_id", "response_not_found", f"Response with id '{rid}' not found.")
    st, _, never = http_json("GET", f"{gw.url}/v1/responses/resp_never_made", headers=bob)
    not_found(st, never, "response_id", "response_not_found", "Response with id 'resp_never_made' not found.")
    st, _, obj = http_json("DELETE", f"{gw.url}/v1/responses/{rid}", headers=bob)
    assert st == 404 and obj["error"]["code"] == "response_not_found", obj
    for stream in (False, True):
        st, _, obj = http_json("POST", gw.url + "/v1/responses", {"model": "m", "input": "go on", "stream": stream,
                                                                   "previous_response_id": rid}, headers=bob)
        not_found(st, obj, "previous_response_id", "previous_response_not_found",
                  f"Previous response with id '{rid}' not found.")
    st, _, obj = http_json("POST", gw.url + "/v1/responses", {"model": "m", "input": "go on",
                                                               "previous_response_id": "resp_never_made"}, headers=bob)
    not_found(st, obj, "previous_response_id", "previous_response_not_found",
              "Previous response with id 'resp_never_made' not found.")
    assert backend_posts_naming(fb, rid) == [], "bob's follow-up reached a backend"

    # her file: not listed, not readable, not deletable, not usable for a batch
    for method, path in (("GET", f"/v1/files/{f['id']}"), ("GET", f"/v1/files/{f['id']}/content"),
                         ("DELETE", f"/v1/files/{f['id']}")):
        st, _, obj = http_json(method, gw.url + path, headers=bob)
        assert_openai_error(st, obj, 404)
        assert obj["error"]["message"] == f"No such File object: {f['id']}", obj
    assert http_json("GET", gw.url + "/v1/files", headers=bob)[2]["data"] == []
    st, _, obj = http_json("POST", gw.url + "/v1/batches", batch_of(f["id"]), headers=bob)
    assert_openai_error(st, obj, 404)
    # her batch: not listed, not readable, not cancellable
    for method, path in (("GET", f"/v1/batches/{batch['id']}"), ("POST", f"/v1/batches/{batch['id']}/cancel")):
        st, _, obj = http_json(method, gw.url + path, headers=bob)
        assert_openai_error(st, obj, 404)
    assert http_json("GET", gw.url + "/v1/batches", headers=bob)[2]["data"] == []

    # her Idempotency-Key's value, sent by bob with her very body: bob's own request, run for him
    st, h, mine = http("POST", gw.url + "/v1/chat/completions", idem_body, headers={**bob, "Idempotency-Key": "k-1"})
    assert st == 200 and "idempotent-replayed" not in h, (st, h)
    sent = [r for r in fb.posts() if r["body"] == json.dumps(idem_body).encode()]
    assert len(sent) == 2, sent   # alice's, then bob's own (her batch's lines may run meanwhile)

    # again and again: the same answers, and the memory back where it was
    for i in range(300):
        assert http("POST", gw.url + "/v1/responses", {"model": "m", "input": f"{i}", "previous_response_id": rid},
                    headers=bob)[0] == 404
        for path in (f"/v1/responses/{rid}", f"/v1/files/{f['id']}/content", f"/v1/batches/{batch['id']}"):
            assert http("GET", gw.url + path, headers=bob)[0] == 404, path
    rss1 = rss_kb(gw.pid)
    print(f"# gateway RSS {rss0} kB before, {rss1} kB after 1,200 of bob's tries")
    assert sanitized(gw.pid) or rss1 < rss0 + 8192, (rss0, rss1)

    # the gateway serves on, and alice still has everything
    assert http("GET", gw.url + "/health")[0] == 200
    st, _, obj = http_json("GET", f"{gw.url}/v1/responses/{rid}", headers=alice)
    assert st == 200 and obj["id"] == rid, obj
    st, _, obj = http_json("POST", gw.url + "/v1/responses", {"model": "m", "input": "go on",
                                                               "previous_response_id": rid}, headers=alice)
    assert st == 200 and obj["id"] != rid, obj
    assert len(backend_posts_naming(fb, rid)) == 1   # alice's follow-up, and only hers
    st, _, raw = http("GET", f"{gw.url}/v1/files/{f['id']}/content", headers=alice)
    assert st == 200 and raw == corpus
    st, _, obj = http_json("GET", f"{gw.url}/v1/batches/{batch['id']}", headers=alice)
    assert st == 200 and obj["id"] == batch["id"], obj
    st, h, again = http("POST", gw.url + "/v1/chat/completions", idem_body, headers={**alice, "Idempotency-Key": "k-1"})
    assert st == 200 and h.get("idempotent-replayed") == "true" and again == first, (st, h)


@test
def spans_go_to_the_operators_collector_only_each_named_by_its_key():
    # Decided: a client's traceparent is continued (W3C's parent-based sampling: a client's own
    # trace goes on into the engine), so a trace id is a correlation id, not a capability: it
    # reads nothing. What a key sees of tracing is its own request's traceparent (its own span);
    # spans go to the operator's collector only, each server span naming its key. bob naming
    # alice's trace id (he would have to learn it) adds a span named bob, and gets nothing of hers.
    d = Dir()
    alice, bob = tenant_keys(d, "alice", "bob")
    col = Collector()
    fb = FakeBackend()
    gw = start_gateway([fb], "--api-keys-file", d("keys.json"), "--tracing-endpoint", col.url + "/v1/traces",
                       "--tracing-schedule-delay-ms", "100", "--health-interval-ms", "200")
    healthy(gw)
    st, h, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("a", max_tokens=5), headers=alice)
    assert st == 200, st
    trace = h["traceparent"].split("-")[1]
    tp = f"00-{trace}-{'ab' * 8}-01"
    st, hb, body = http("POST", gw.url + "/v1/chat/completions", chat_body("b", max_tokens=5),
                        headers={**bob, "traceparent": tp})
    assert st == 200 and hb["traceparent"].split("-")[1] == trace, hb
    assert hb["traceparent"].split("-")[2] not in h["traceparent"], (h, hb)   # his own span, not hers
    assert b"alice" not in body and all("alice" not in v for v in hb.values()), hb
    servers = wait_until(lambda: [s for s in col.spans() if s["kind"] == 2] if len(
        [s for s in col.spans() if s["kind"] == 2]) == 2 else None, timeout=10, what="two server spans")
    keys = sorted((span_attrs(s).get("infergate.key"), s["traceId"]) for s in servers)
    assert keys == [("alice", trace), ("bob", trace)], keys
    # no endpoint a tenant can reach shows a span or another's trace
    for path in ("/metrics", "/health/backends", "/v1/models"):
        st, _, raw = http("GET", gw.url + path, headers=bob)
        assert trace.encode() not in raw, path


@test
def status_endpoints_take_admin_keys_and_keys_with_the_status_right():
    d = Dir()
    alice, ops = tenant_keys(d, "alice", "ops", status=("ops",))
    (admin,) = keys_file(d("admin.json"), "root")
    fb = FakeBackend()
    gw = start_gateway([fb], "--api-keys-file", d("keys.json"), "--admin-keys-file", d("admin.json"),
                       "--auth-status", "1", "--health-interval-ms", "200")
    healthy(gw)
    assert http("POST", gw.url + "/v1/chat/completions", chat_body("x", max_tokens=5), headers=alice)[0] == 200
    for path in ("/metrics", "/status", "/status/history", "/health/backends", "/health/capacity"):
        st, _, raw = http("GET", gw.url + path)
        assert st == 401, (path, st)
        st, _, obj = http_json("GET", gw.url + path, headers=alice)
        assert_openai_error(st, obj, 403, "permission_error")
        assert obj["error"]["code"] == "insufficient_permissions" and "status" in obj["error"]["message"], obj
        for who in (admin, ops):
            st, _, raw = http("GET", gw.url + path, headers=who)
            assert st == 200, (path, who, st)
    text = http("GET", gw.url + "/metrics", headers=ops)[2].decode()
    assert 'key="alice"' in text, "the status right reads every key's counts"
    assert http("GET", gw.url + "/health")[0] == 200                       # load balancers need no key
    assert http("GET", gw.url + "/v1/models", headers=alice)[0] == 200     # the API is the tenant's


@test
def a_status_right_is_checked_at_start_and_someone_must_have_it():
    d = Dir()
    keys_file(d("keys.json"), "alice")

    def start(*extra):
        return subprocess.run([binary("infergate"), "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:9",
                               "--check-config", *extra], capture_output=True, text=True, timeout=20)
    r = start("--api-keys-file", d("keys.json"), "--auth-status", "1")
    assert r.returncode == 2 and "auth_status: 1, but no key may read" in r.stderr, r.stderr
    with open(d("keys.json")) as f:
        doc = json.load(f)
    doc["keys"][0]["status"] = "yes"
    with open(d("bad.json"), "w") as f:
        json.dump(doc, f)
    r = start("--api-keys-file", d("bad.json"))
    assert r.returncode == 2 and "keys[0] 'alice': status: must be true or false" in r.stderr, r.stderr
    doc["keys"][0]["status"] = True
    with open(d("admin.json"), "w") as f:
        json.dump(doc, f)
    r = start("--admin-keys-file", d("admin.json"))
    assert r.returncode == 2 and "status: admin keys take only name, sha256 and disabled" in r.stderr, r.stderr
    with open(d("ok.json"), "w") as f:
        json.dump(doc, f)
    r = start("--api-keys-file", d("ok.json"), "--auth-status", "1")
    assert r.returncode == 0, r.stderr


run()
