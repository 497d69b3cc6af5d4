"""Input edges as a class (issue 46), with real processes: a folded header line (obs-fold) is a
400 and nothing reaches the backend (libmicrohttpd 0.9.75 would have joined the fold onto the
header's name: "Transfer-Encodingx: chunked"); a client's numbers that the gateway computes
with are bounded (a 400 naming the field) or refused by the key's tpm, never overflowed; an
upload is kept whole or refused with a clear error (two file parts, a second purpose, a
filename that cannot be encoded), nothing half-stored; an Idempotency-Key names one route and
one body. FakeBackend records every byte the gateway sends upstream."""

import json
import os

from harness import (BOUNDARY, FakeBackend, Dir, assert_openai_error, chat_body, exchange, http, http_json, keys_file,
                     responses, rss_kb, run, sanitized, start_gateway, test, upload, wait_until)


def gateway(*extra):
    fb = FakeBackend()
    gw = start_gateway([fb], "--health-interval-ms", "200", *extra)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, timeout=10, what="healthy")
    return gw, fb


def still_serves(gw, headers=None):
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("still there?"), headers=headers)
    assert st == 200 and obj["choices"], (st, obj)


BODY = b'{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}'


def raw_post(extra):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n" + extra +
            b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))


@test
def a_folded_header_line_is_a_400_and_reaches_nothing():
    gw, fb = gateway()
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    folds = {
        "a value continued on a space": raw_post(b"X-A: v1\r\n cont\r\n"),
        "a value continued on a tab": raw_post(b"X-A: v1\r\n\tcont\r\n"),
        "a fold right after the request line": b"POST /v1/chat/completions HTTP/1.1\r\n X-A: v\r\nHost: gw\r\n"
                                               b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY),
        "a fold that would rename Transfer-Encoding": b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                                                      b"Transfer-Encoding: chunked\r\n x\r\n\r\n" + chunked,
        "a fold that would rename Content-Length": b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
                                                  b"Content-Length: %d\r\n 0\r\n\r\n%s" % (len(BODY), BODY),
        "a fold of Authorization": raw_post(b"Authorization: Bearer\r\n sk-x\r\n"),
    }
    failures = []
    for name, req in folds.items():
        data, closed = exchange(gw.port, req, wait=2, until_close=True)
        rs = responses(data)
        if not (rs and rs[0][0] == 400 and closed):
            failures.append(f"{name}: want a 400 and a close, got {[r[0] for r in rs]} closed={closed}")
            continue
        obj = json.loads(rs[0][2])
        assert_openai_error(rs[0][0], obj, 400, "invalid_request_error")
        if "folded header line (obs-fold)" not in obj["error"]["message"]:
            failures.append(f"{name}: {obj['error']['message']}")
    assert not failures, "\n".join(failures)
    assert fb.posts() == [], [r["raw"] for r in fb.posts()]
    # headers that only look odd are not folds: blanks after the colon, an empty value, a tab
    data, _ = exchange(gw.port, raw_post(b"X-A:      spaced\r\nX-B:\r\nX-C:\tv\tw\r\nX-D: \r\n"))
    rs = responses(data)
    assert rs and rs[0][0] == 200, data[:300]
    sent = fb.posts()[0]["raw"]
    assert b"X-A: spaced" in sent and b"X-C: v\tw" in sent, sent
    still_serves(gw)


@test
def a_clients_numbers_are_bounded_or_refused_by_the_tpm_never_overflowed():
    d = Dir()
    (small,) = keys_file(d("keys.json"), "small")
    with open(d("keys.json")) as f:
        doc = json.load(f)
    doc["keys"][0]["tpm"] = 5000
    with open(d("keys.json"), "w") as f:
        json.dump(doc, f)
    gw, fb = gateway("--api-keys-file", d("keys.json"))
    big = 2 ** 63 - 1
    cases = [  # (route, body, the param named)
        ("/v1/chat/completions", chat_body("x", max_tokens=big), "max_tokens"),
        ("/v1/chat/completions", chat_body("x", max_completion_tokens=2 ** 31), "max_completion_tokens"),
        ("/v1/responses", {"model": "sim-model", "input": "x", "max_output_tokens": big}, "max_output_tokens"),
        ("/v1/completions", {"model": "sim-model", "prompt": "x", "max_tokens": 5, "n": big}, "n"),
        ("/v1/completions", {"model": "sim-model", "prompt": "x", "best_of": 2 ** 40}, "best_of"),
        ("/v1/completions", {"model": "sim-model", "prompt": "x", "n": 0}, "n"),
        ("/v1/chat/completions", chat_body("x", n=2.5), "n"),
        ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": big}}, "sampling_params.max_new_tokens"),
    ]
    for route, body, param in cases:
        st, _, obj = http_json("POST", gw.url + route, body, headers=small)
        assert_openai_error(st, obj, 400, "invalid_request_error")
        assert obj["error"]["param"] == param, (route, body, obj)
    # in range, but more than the key's tpm could ever give: refused by it, waiting would not help
    for body in (chat_body("x", max_tokens=2 ** 31 - 1, n=2 ** 31 - 1), chat_body("x", max_tokens=5000, n=2)):
        st, h, obj = http_json("POST", gw.url + "/v1/chat/completions", body, headers=small)
        assert_openai_error(st, obj, 429, "tokens")
        assert "Request too large" in obj["error"]["message"] and "retry-after" not in h, (obj, h)
    assert fb.posts() == [], [r["body"] for r in fb.posts()]
    st, h, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("fits", max_tokens=100, n=2), headers=small)
    assert st == 200 and int(h["x-ratelimit-remaining-tokens"]) <= 5000 - 200, h
    assert http("GET", gw.url + "/health")[0] == 200


def files_left(d):
    p = os.path.join(d("data"), "files")
    return sorted(os.listdir(p)) if os.path.isdir(p) else []


def raw_upload(gw, body):
    return http_json("POST", gw.url + "/v1/files", body,
                     headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})


def part(name, value, filename=None):
    disp = f'form-data; name="{name}"'.encode() + (b'; filename="' + filename + b'"' if filename is not None else b"")
    return b"--" + BOUNDARY.encode() + b"\r\nContent-Disposition: " + disp + b"\r\n\r\n" + value + b"\r\n"


@test
def an_upload_is_kept_whole_or_refused_clearly_and_nothing_is_half_stored():
    d = Dir()
    gw, fb = gateway("--data-dir", d("data"))
    end = b"--" + BOUNDARY.encode() + b"--\r\n"
    line = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'
    bad = [  # (body, param, a piece of its message)
        (part("purpose", b"batch") + part("file", line, b"one.jsonl") + part("file", line * 3, b"two.jsonl") + end,
         "file", "more than one file part"),
        (part("file", line * 2000, b"one.jsonl") + part("purpose", b"batch") + part("file", line, b"two.jsonl") + end,
         "file", "more than one file part"),
        (part("purpose", b"bat") + part("purpose", b"ch") + part("file", line, b"one.jsonl") + end,
         "purpose", "more than once"),
        (part("purpose", b"batch") + part("file", line, b"caf\xe9.jsonl") + end, "file", "not UTF-8"),
        (part("purpose", b"batch") + part("file", line, b"x" * 300 + b".jsonl") + end, "file", "longer than 255"),
    ]
    for body, param, words in bad:
        st, _, obj = raw_upload(gw, body)
        assert_openai_error(st, obj, 400, "invalid_request_error")
        assert obj["error"]["param"] == param and words in obj["error"]["message"], obj
        assert http_json("GET", gw.url + "/v1/files")[2]["data"] == []
        wait_until(lambda: files_left(d) == [], timeout=5, what="no leftover in data_dir/files")
    # a name in UTF-8 is kept as sent, and the file whole
    name = "données-①.jsonl"
    st, f = upload(gw, line * 3, filename=name)
    assert st == 200 and f["filename"] == name and f["bytes"] == len(line) * 3, f
    assert http("GET", f"{gw.url}/v1/files/{f['id']}/content")[2] == line * 3
    assert files_left(d) == sorted([f["id"], f["id"] + ".json"]), files_left(d)
    assert fb.posts() == []


@test
def an_idempotency_key_names_one_route_and_one_body():
    gw, fb = gateway()
    body = {"model": "sim-model", "prompt": "p", "messages": [{"role": "user", "content": "p"}], "max_tokens": 5}
    st, h, first = http("POST", gw.url + "/v1/chat/completions", body, headers={"Idempotency-Key": "once"})
    assert st == 200 and "idempotent-replayed" not in h, (st, h)
    # the same value and the very same bytes to another route: a conflict, not the chat's answer
    for route in ("/v1/completions", "/v1/responses", "/v1/embeddings"):
        st, h, raw = http("POST", gw.url + route, body, headers={"Idempotency-Key": "once"})
        obj = json.loads(raw)
        assert_openai_error(st, obj, 422, "invalid_request_error")
        assert obj["error"]["code"] == "idempotency_key_conflict" and obj["error"]["param"] == "Idempotency-Key", obj
        assert "another route or body" in obj["error"]["message"] and "idempotent-replayed" not in h, obj
    st, _, raw = http("POST", gw.url + "/v1/chat/completions", dict(body, max_tokens=6),
                      headers={"Idempotency-Key": "once"})
    assert st == 422 and json.loads(raw)["error"]["code"] == "idempotency_key_conflict", raw
    # its own route and body: the kept answer
    st, h, again = http("POST", gw.url + "/v1/chat/completions", body, headers={"Idempotency-Key": "once"})
    assert st == 200 and h.get("idempotent-replayed") == "true" and again == first, (st, h)
    assert [r["path"] for r in fb.posts()] == ["/v1/chat/completions"], [r["path"] for r in fb.posts()]


@test
def each_edge_five_hundred_times_and_the_memory_is_back_at_its_baseline():
    d = Dir()
    gw, fb = gateway("--data-dir", d("data"))
    still_serves(gw)
    st, _, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("x"), headers={"Idempotency-Key": "r"})
    assert st == 200
    rss0 = rss_kb(gw.pid)
    end = b"--" + BOUNDARY.encode() + b"--\r\n"
    two = part("purpose", b"batch") + part("file", b"a\n" * 500, b"a") + part("file", b"b\n", b"b") + end
    for i in range(500):
        data, _ = exchange(gw.port, raw_post(b"X-A: v\r\n w%d\r\n" % i), wait=2, until_close=True)
        assert responses(data)[0][0] == 400, data[:200]
        assert http("POST", gw.url + "/v1/chat/completions", chat_body("x", max_tokens=2 ** 63 - 1, n=i + 1))[0] == 400
        assert raw_upload(gw, two)[0] == 400
        assert http("POST", gw.url + "/v1/completions", chat_body("x"), headers={"Idempotency-Key": "r"})[0] == 422
    still_serves(gw)
    assert http_json("GET", gw.url + "/v1/files")[2]["data"] == [] and files_left(d) == []
    assert len(fb.posts()) == 3, len(fb.posts())   # the three still_serves and the first keyed request
    rss1 = rss_kb(gw.pid)
    print(f"# gateway RSS {rss0} kB before, {rss1} kB after 2,000 refusals")
    assert sanitized(gw.pid) or rss1 < rss0 + 8192, (rss0, rss1)


run()
