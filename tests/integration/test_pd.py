"""Prefill/decode pairs (src/gateway/path/try_pd.c): one request, a prefill
server and a decode server, in SGLang's protocol (both at once, bootstrap
fields) and vLLM's (prefill first, its kv_transfer_params handed to the
decode). Here the servers are scripted fakes that show the exact bodies the
gateway sends; test_pd_sim.py runs the simulator's prefill and decode roles."""

import json
import subprocess
import tempfile
import threading
import time

from harness import (FakeBackend, binary, chat_body, free_port, http, http_json, metric, run, sse_events, start_gateway,
                     test, wait_until, written_lines)


def write_config(obj):
    f = tempfile.NamedTemporaryFile("w", prefix="ig-pd-", suffix=".json", delete=False)
    json.dump(obj, f)
    f.close()
    return f.name


def refused(config):
    """Runs the gateway, which must stop at once: (exit code, stderr)."""
    cmd = [binary("infergate"), "--listen", "127.0.0.1:%d" % free_port(), "--config", write_config(config)]
    r = subprocess.run(cmd, capture_output=True, timeout=20)
    return r.returncode, r.stderr.decode()


def answer(fb, text, usage=(7, 3), extra=None):
    body = {"id": "c-" + text, "object": "chat.completion", "model": fb.model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}}
    body.update(extra or {})
    return body


def stream_bytes(text, usage=(7, 3)):
    chunks = [{"id": "s", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": w}}]}
              for w in text.split(" ")]
    chunks.append({"id": "s", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


class Rooms:
    """SGLang's hand-over between fakes: a prefill server that answers has handed its
    room's KV over; a decode server waits for its room's (as SGLang's decode polls its
    KV receiver) and gives up after `patience` seconds."""

    def __init__(self):
        self.done = set()
        self.cv = threading.Condition()

    def handed(self, room):
        with self.cv:
            self.done.add(json.dumps(room))
            self.cv.notify_all()

    def wait(self, room, patience=10.0):
        with self.cv:
            return self.cv.wait_for(lambda: json.dumps(room) in self.done, timeout=patience)


def server(text, status=200, kv_params=None, hang=False, rooms=None):
    """A fake engine: GETs as a small OpenAI server; a POST answered `text` (streamed when
    asked), with top-level kv_transfer_params when given; `hang`: never answered. With
    `rooms`, an SGLang half: a prefill's answer hands its room over, a decode waits for it."""
    def handler(fb, req, sock):
        if req["method"] != "POST":
            return FakeBackend.answer_ok(fb, req, sock)
        if hang:
            time.sleep(30)
            return False
        body = json.loads(req["body"])
        if rooms is not None and fb.role == "decode" and not rooms.wait(body.get("bootstrap_room")):
            return False
        if rooms is not None and fb.role == "prefill" and status == 200:
            rooms.handed(body.get("bootstrap_room"))
        if status != 200:
            FakeBackend.reply(sock, status, {"error": {"message": "prefill failed", "code": status}})
        elif body.get("stream"):
            data = stream_bytes(text)
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(data), data))
        else:
            FakeBackend.reply(sock, 200, answer(fb, text, extra={"kv_transfer_params": kv_params} if kv_params else None))
        return True
    return FakeBackend(handler)


def pair_gateway(prefills, decodes, engine, *extra, both=(), **top):
    for fb in prefills:
        fb.role = "prefill"
    for fb in decodes:
        fb.role = "decode"
    cfg = {"backends": [{"url": p.url, "role": "prefill", "engine": engine,
                         **({"bootstrap_port": 9000 + i} if engine == "sglang" else {})}
                        for i, p in enumerate(prefills)] +
                       [{"url": d.url, "role": "decode", "engine": engine} for d in decodes] +
                       [{"url": b.url} for b in both]}
    cfg.update(top)
    log = tempfile.NamedTemporaryFile(prefix="ig-pd-", suffix=".log", delete=False).name
    gw = start_gateway([], "--access-log", log, *extra, config=write_config(cfg))
    n = len(prefills) + len(decodes) + len(both)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2].get("healthy_backends") == n, timeout=15,
               what=f"{n} backends up")
    gw.alog = log
    return gw


def posted(fb):
    return [json.loads(r["body"]) for r in fb.posts()]


def pd_count(gw, outcome):
    return metric(http("GET", gw.url + "/metrics")[2], f'infergate_pd_requests_total{{outcome="{outcome}"}}')


@test
def sglang_pairs_send_both_halves_the_bootstrap_fields_and_answer_from_the_decode():
    rooms = Rooms()
    pre, dec = server("P", rooms=rooms), server("decoded by the decode server", rooms=rooms)
    gw = pair_gateway([pre], [dec], "sglang")
    body = chat_body("a long prompt " * 20, max_tokens=30, temperature=0)
    st, hdrs, ans = http("POST", gw.url + "/v1/chat/completions", body)
    assert st == 200, ans
    assert json.loads(ans)["choices"][0]["message"]["content"] == "decoded by the decode server"
    assert hdrs["x-infergate-backend"] == dec.url and hdrs["x-infergate-prefill-backend"] == pre.url, hdrs
    (p,), (d,) = posted(pre), posted(dec)
    assert p == d, (p, d)  # one body for both halves
    assert p["bootstrap_host"] == "127.0.0.1" and p["bootstrap_port"] == 9000, p
    assert isinstance(p["bootstrap_room"], int) and 0 <= p["bootstrap_room"] < 2 ** 63, p
    assert {k: v for k, v in p.items() if not k.startswith("bootstrap_")} == body, p
    # usage once: the decode's 3 output tokens, not the prefill's too
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, 'infergate_tokens_total{kind="completion"}') == 3, m
    assert pd_count(gw, "paired") == 1
    line = wait_until(lambda: [o for o in written_lines(gw.alog) if o.get("path") == "/v1/chat/completions"],
                      timeout=10, what="the access log line")[0]
    assert line["backend"] == dec.url and line["prefill_backend"] == pre.url and line["completion_tokens"] == 3, line
    # two requests, two rooms
    http("POST", gw.url + "/v1/chat/completions", body)
    rooms = [x["bootstrap_room"] for x in posted(dec)]
    assert len(rooms) == 2 and rooms[0] != rooms[1], rooms
    roles = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    assert roles[pre.url]["role"] == "prefill" and roles[pre.url]["bootstrap_port"] == 9000, roles[pre.url]
    assert roles[dec.url]["role"] == "decode" and roles[dec.url]["engine"] == "sglang", roles[dec.url]


@test
def sglang_batches_get_a_room_per_request():
    rooms = Rooms()
    pre, dec = server("P", rooms=rooms), server("D", rooms=rooms)
    gw = pair_gateway([pre], [dec], "sglang")
    st, _, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("x " * 50, n=3))
    assert st == 200, ans
    st, _, ans = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": ["a", "b"], "max_tokens": 2})
    assert st == 200, ans
    chat, comp = posted(dec)
    assert chat["bootstrap_host"] == ["127.0.0.1"] * 3 and chat["bootstrap_port"] == [9000] * 3, chat
    assert len(set(chat["bootstrap_room"])) == 3, chat
    assert len(comp["bootstrap_room"]) == 2 and comp["bootstrap_port"] == [9000, 9000], comp
    assert posted(pre) == [chat, comp]


@test
def vllm_pairs_prefill_first_and_hand_its_kv_transfer_params_to_the_decode():
    params = {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [1, 2, 3],
              "remote_engine_id": "engine-7", "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1}
    pre, dec = server("P", kv_params=params), server("streamed from the decode")
    gw = pair_gateway([pre], [dec], "vllm")
    body = chat_body("a long prompt " * 20, max_tokens=30, stream=True, min_tokens=2,
                     stream_options={"include_usage": True})
    st, hdrs, raw = http("POST", gw.url + "/v1/chat/completions", body)
    assert st == 200 and hdrs["x-infergate-prefill-backend"] == pre.url, (st, hdrs)
    assert raw == stream_bytes("streamed from the decode"), raw  # the decode's stream, byte for byte
    (p,), (d,) = posted(pre), posted(dec)
    assert p["kv_transfer_params"] == {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                                       "remote_block_ids": None, "remote_host": None, "remote_port": None}, p
    assert p["stream"] is False and p["max_tokens"] == 1 and "stream_options" not in p and "min_tokens" not in p, p
    assert d["kv_transfer_params"] == params, d
    assert {k: v for k, v in d.items() if k != "kv_transfer_params"} == body, d
    # the prefill was answered before the decode was sent
    assert pre.requests.index(pre.posts()[0]) >= 0 and len(dec.posts()) == 1
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, 'infergate_tokens_total{kind="completion"}') == 3, m


@test
def a_vllm_prefill_with_no_kv_transfer_params_leaves_the_decode_to_prefill_itself():
    pre, dec = server("P"), server("D")
    gw = pair_gateway([pre], [dec], "vllm")
    body = chat_body("hello " * 30)
    st, _, ans = http("POST", gw.url + "/v1/chat/completions", body)
    assert st == 200 and json.loads(ans)["choices"][0]["message"]["content"] == "D", ans
    assert posted(dec) == [body]
    assert pd_count(gw, "no_params") == 1


@test
def a_failed_prefill_makes_the_pair_again_with_another_prefill_server():
    for engine in ("sglang", "vllm"):
        params = {"do_remote_prefill": True, "remote_block_ids": [4], "remote_engine_id": "e", "remote_host": "h",
                  "remote_port": 1}
        rooms = Rooms() if engine == "sglang" else None
        bad, good = server("X", status=500, rooms=rooms), server("P", kv_params=params, rooms=rooms)
        dec = server("decoded", rooms=rooms)
        gw = pair_gateway([bad, good], [dec], engine, "--pd-prefill-policy", "round-robin")
        for i in range(4):
            st, hdrs, ans = http("POST", gw.url + "/v1/chat/completions", chat_body(f"prompt {i} " * 30))
            assert st == 200 and json.loads(ans)["choices"][0]["message"]["content"] == "decoded", (engine, ans)
            assert hdrs["x-infergate-prefill-backend"] == good.url, (engine, hdrs)
        failed = len(bad.posts())
        assert failed >= 1, engine
        assert pd_count(gw, "prefill_failed") == failed, engine
        assert pd_count(gw, "paired") == 4 + failed, engine
        decs = posted(dec)
        if engine == "sglang":  # each failed pair's decode request was cut and sent again, new room (a
            # request cut as it arrived may not have been read whole by the fake: not counted)
            assert 4 < len(decs) <= 4 + failed, (engine, len(decs), failed)
            assert len({d["bootstrap_room"] for d in decs}) == len(decs), engine
        else:  # vLLM's decode waits for the prefill: sent once per request, with the good one's params
            assert len(decs) == 4 and all(d["kv_transfer_params"] == params for d in decs), engine
        gw.stop()


@test
def a_request_the_vllm_prefill_refuses_is_answered_that_not_paired_again():
    pre, dec = server("X", status=400), server("D")
    gw = pair_gateway([pre], [dec], "vllm")
    st, _, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("too long " * 30))
    assert st == 400, (st, ans)
    assert json.loads(ans)["error"]["message"] == "prefill failed", ans  # the server's own message
    assert dec.posts() == [] and len(pre.posts()) == 1
    assert pd_count(gw, "prefill_failed") == 0
    be = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    assert be[dec.url]["inflight"] == 0 and be[pre.url]["failures"] == 0, be


@test
def a_hand_over_that_never_completes_is_cut_and_counted_for_both():
    pre, dec = server("P", hang=True), server("D", hang=True)
    gw = pair_gateway([pre], [dec], "sglang", "--pd-transfer-timeout-ms", "600", "--retries", "0")
    st, _, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("long " * 40))
    assert st == 504, (st, ans)
    err = json.loads(ans)["error"]
    assert err["code"] == "backend_timeout", err
    assert pd_count(gw, "transfer_timeout") == 1
    be = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    assert be[pre.url]["failures"] == 1 and be[dec.url]["failures"] == 1, be
    assert be[pre.url]["inflight"] == 0 and be[dec.url]["inflight"] == 0, be


@test
def a_retry_that_finds_every_prefill_server_failed_is_a_502_not_a_crash():
    # bench/pd.py found it: the pair cut at its deadline, the request retried on the other
    # decode server, and no prefill server left that had not failed it
    pre, decs = server("P", hang=True), [server("D", hang=True), server("D", hang=True)]
    gw = pair_gateway([pre], decs, "sglang", "--pd-transfer-timeout-ms", "600", "--retries", "1")
    st, _, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("long " * 40))
    assert st == 502, (st, ans)
    err = json.loads(ans)["error"]
    assert err["code"] == "prefill_failed" and "every prefill server of the model 'sim-model' failed" in err["message"], err
    assert pd_count(gw, "transfer_timeout") == 1 and pd_count(gw, "paired") == 1
    assert http("GET", gw.url + "/health")[0] == 200  # and the gateway lives on
    be = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    assert all(be[d.url]["inflight"] == 0 for d in decs) and be[pre.url]["inflight"] == 0, be


@test
def with_no_prefill_server_up_an_sglang_decode_is_a_503_and_a_vllm_decode_prefills_alone():
    for engine, want in (("sglang", 503), ("vllm", 200)):
        pre, dec = server("P"), server("D")
        gw = pair_gateway([pre], [dec], engine)
        pre.stop()
        wait_until(lambda: http_json("GET", gw.url + "/health")[2].get("healthy_backends") == 1, timeout=20,
                   what="the prefill server down")
        st, _, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("p " * 30))
        assert st == want, (engine, st, ans)
        if st == 503:
            assert "no prefill server is up" in json.loads(ans)["error"]["message"], ans
            assert dec.posts() == []  # the decode was never sent a request it could not serve
        else:
            assert pd_count(gw, "alone") == 1
        gw.stop()


@test
def with_no_decode_server_up_the_answer_says_so():
    pre, dec = server("P"), server("D")
    gw = pair_gateway([pre], [dec], "sglang")
    dec.stop()
    wait_until(lambda: http_json("GET", gw.url + "/health")[2].get("healthy_backends") == 1, timeout=20,
               what="the decode server down")
    st, _, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("p " * 30))
    assert st == 503, (st, ans)
    msg = json.loads(ans)["error"]["message"]
    assert msg == "no decode server of the model 'sim-model' is up (1 decode or co-located server(s), 0 up; " \
                  "1 prefill server(s))", msg
    assert pre.posts() == []  # a prefill server is never given a request of its own


@test
def short_prompts_go_to_a_server_that_prefills_alone():
    pre, dec, colo = server("P"), server("paired"), server("alone")
    gw = pair_gateway([pre], [dec], "sglang", "--pd-min-prompt-tokens", "100", both=[colo])
    st, hdrs, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("short"))
    assert st == 200 and hdrs["x-infergate-backend"] == colo.url and "x-infergate-prefill-backend" not in hdrs, hdrs
    st, hdrs, ans = http("POST", gw.url + "/v1/chat/completions", chat_body("a long prompt " * 100))
    assert st == 200 and hdrs["x-infergate-prefill-backend"] == pre.url, hdrs
    assert pd_count(gw, "alone") == 1 and pd_count(gw, "paired") == 1
    assert "bootstrap_room" not in posted(colo)[0]


@test
def a_prompt_whose_prefix_the_vllm_decode_holds_skips_the_prefill():
    params = {"do_remote_prefill": True, "remote_block_ids": [1], "remote_engine_id": "e", "remote_host": "h",
              "remote_port": 1}
    pre, dec = server("P", kv_params=params), server("D")
    gw = pair_gateway([pre], [dec], "vllm", "--pd-decode-policy", "cache-aware", "--pd-min-prompt-tokens", "64")
    history = "an agent's long conversation so far, turn after turn. " * 40
    st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", chat_body(history))
    assert st == 200 and hdrs["x-infergate-prefill-backend"] == pre.url, hdrs
    # the next turn resends it all: the decode server was sent the prefix, what is left is short
    st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", chat_body(history + "And one more question?"))
    assert st == 200 and "x-infergate-prefill-backend" not in hdrs, hdrs
    assert pd_count(gw, "paired") == 1 and pd_count(gw, "alone") == 1
    assert len(pre.posts()) == 1 and "kv_transfer_params" not in posted(dec)[1]
    be = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    assert be[pre.url]["pairs"] == 1 and be[dec.url]["pairs"] == 1, be


@test
def pair_configuration_mistakes_stop_the_gateway_at_start():
    u1, u2 = "http://127.0.0.1:9", "http://127.0.0.1:10"
    cases = [
        ({"backends": [{"url": u1, "role": "prefill"}, {"url": u2, "role": "decode", "engine": "sglang"}]},
         'backends[0].role: "prefill" needs'),
        ({"backends": [{"url": u1, "role": "prefill", "engine": "sglang"}]},
         'role "prefill" with no decode server of engine sglang'),
        ({"backends": [{"url": u1, "role": "prefill", "engine": "sglang"}, {"url": u2, "role": "decode", "engine": "vllm"}]},
         "speak one engine's protocol"),
        ({"backends": [{"url": u1, "role": "decode", "engine": "sglang", "bootstrap_port": 8998}]},
         "bootstrap_port: 8998 is for an SGLang prefill server"),
        ({"backends": [{"url": u1, "role": "middle"}]}, 'role: "middle" is not "both", "prefill" or "decode"'),
        ({"backends": [{"url": u1}], "pd": {"decode_policy": "fastest"}}, "pd.decode_policy"),
    ]
    for cfg, why in cases:
        rc, err = refused(cfg)
        assert rc == 2 and why in err, (cfg, rc, err)
    # halves that serve different models do not make a pair
    rc, err = refused({"backends": [{"url": u1, "role": "prefill", "engine": "vllm", "models": ["a"]},
                                    {"url": u2, "role": "decode", "engine": "vllm", "models": ["b"]}]})
    assert rc == 2 and "no decode server of engine vllm" in err, err


if __name__ == "__main__":
    run()
