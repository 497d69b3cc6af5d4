"""infergate-sim's prefill/decode disaggregation, driven as a gateway drives it.
SGLang (--disaggregation-mode): the same body to a prefill and a decode server
with bootstrap_host/_port/_room; the decode fetches the room's KV from the
prefill's bootstrap listener and answers the whole completion, the prefill
answers one token after the hand-over. vLLM (--kv-transfer-config, NixlConnector):
the prefill request (kv_transfer_params.do_remote_decode, max_tokens 1) answers
with the kv_transfer_params the decode request then carries. What a gateway
relies on: the decode's answer is the co-located server's, byte for byte in its
text and counts; the hand-over is counted on both sides; a transfer that never
comes is the engine's 500, on both sides; SGLang's decode refuses a body
without a room; the decode may come before the prefill."""

import json
import random
import re
import threading

from harness import http, http_json, raw_post, run, sse_events, start_sim, test, wait_until

KV = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def bootstrap_port(sim):
    """The bootstrap listener's port (the sim took a free one and logged it)."""
    m = wait_until(lambda: re.search(r"(?:bootstrap server|NIXL side channel) listening on http://[^:]+:(\d+)",
                                     sim.read_log()), what="the bootstrap listener's line")
    return int(m.group(1))


def pd_state(sim):
    return http_json("GET", sim.url + "/sim/state")[2]["pd"]


def in_thread(fn, *args):
    """fn(*args) on a thread; .join() gives its result."""
    out = {}

    def go():
        out["r"] = fn(*args)

    t = threading.Thread(target=go)
    t.start()

    class Joined:
        def join(self):
            t.join(60)
            return out["r"]
    return Joined()


def answer_text(path, obj, stream):
    """The text and the usage of an answer (a stream's chunks joined)."""
    if not stream:
        c = obj["choices"][0]
        return (c["message"]["content"] if path.endswith("chat/completions") else c["text"]), obj["usage"]
    text, usage = "", None
    for e in sse_events(obj):
        if e == "[DONE]":
            continue
        j = json.loads(e)
        assert "error" not in j, j
        if j.get("usage"):
            usage = j["usage"]
        for c in j["choices"]:
            text += (c.get("delta", {}).get("content") or "") if path.endswith("chat/completions") else c["text"]
    return text, usage


def post(sim, path, body):
    status, _, data = http("POST", sim.url + path, body)
    return status, data


def sglang_trio(*extra):
    prefill = start_sim("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0", "--seed", "7",
                        *extra)
    decode = start_sim("--disaggregation-mode", "decode", "--seed", "7", *extra)
    together = start_sim("--seed", "7", *extra)
    return prefill, decode, together


def sglang_body(prefill, base):
    return dict(base, bootstrap_host="127.0.0.1", bootstrap_port=bootstrap_port(prefill),
                bootstrap_room=random.getrandbits(63))


@test
def sglang_decode_answers_what_a_colocated_server_answers():
    prefill, decode, together = sglang_trio("--tokens-per-second", "0", "--ttft-ms", "0")
    cases = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "pd chat %d" % i}]}) for i in range(2)]
    cases += [("/v1/completions", {"prompt": "pd completion prompt number %d" % i}) for i in range(2)]
    sent = 0
    for n, (path, base) in enumerate(cases):
        stream = n % 2 == 1
        base = dict(base, stream=stream)
        if stream:
            base["stream_options"] = {"include_usage": True}
        body = sglang_body(prefill, base)
        d = in_thread(post, decode, path, body)
        ps, pdata = post(prefill, path, body)
        ds, ddata = d.join()
        cs, cdata = post(together, path, base)
        assert ps == ds == cs == 200, (ps, ds, cs, ddata[:300])
        want, want_usage = answer_text(path, cdata if stream else json.loads(cdata), stream)
        got, usage = answer_text(path, ddata if stream else json.loads(ddata), stream)
        assert got == want and len(got) > 20, (got, want)
        assert usage["prompt_tokens"] == want_usage["prompt_tokens"], (usage, want_usage)
        assert usage["completion_tokens"] == want_usage["completion_tokens"], (usage, want_usage)
        one, pusage = answer_text(path, pdata if stream else json.loads(pdata), stream)
        assert pusage["completion_tokens"] == 1 and want.startswith(one), (one, pusage)
        sent += usage["prompt_tokens"] * 131072
    p, d = pd_state(prefill), pd_state(decode)
    assert p["transfers_sent"] == 4 and d["transfers_received"] == 4, (p, d)
    assert p["bytes_sent"] == d["bytes_received"] == sent, (p, d, sent)
    assert p["rooms_held"] == 0 and p["transfers_failed"] == d["transfers_failed"] == 0, (p, d)
    m = http("GET", decode.url + "/metrics")[2].decode()
    assert 'infergate_sim_kv_transfers_received_total{model_name="sim-model"} 4' in m, m[-1500:]
    assert 'sglang:num_transfer_failed_reqs_total{model_name="sim-model"} 0' in m


@test
def sglang_step_profile_decode_skips_the_prefill():
    # a decode step profile: the transferred request has no prefill to run,
    # and its text is the co-located one's
    prefill, decode, together = sglang_trio("--profile", "h100-8b", "--time-scale", "20")
    base = {"messages": [{"role": "user", "content": "x" * 4000}], "max_tokens": 40, "stream": True}
    body = sglang_body(prefill, base)
    d = in_thread(post, decode, "/v1/chat/completions", body)
    assert post(prefill, "/v1/chat/completions", body)[0] == 200
    ds, ddata = d.join()
    cs, cdata = post(together, "/v1/chat/completions", base)
    assert ds == cs == 200
    got = answer_text("/v1/chat/completions", ddata, True)[0]
    assert got == answer_text("/v1/chat/completions", cdata, True)[0] and got, got
    assert pd_state(decode)["transfers_received"] == 1


@test
def sglang_decode_may_ask_before_the_prefill_has_the_request():
    prefill, decode, _ = sglang_trio("--tokens-per-second", "0")
    body = sglang_body(prefill, {"prompt": "the decode comes first"})
    d = in_thread(post, decode, "/v1/completions", body)
    wait_until(lambda: pd_state(prefill)["decodes_asking"] == 1, what="the decode asking the prefill")
    ps, _ = post(prefill, "/v1/completions", body)
    ds, ddata = d.join()
    assert ps == ds == 200, (ps, ds, ddata)
    assert json.loads(ddata)["usage"]["completion_tokens"] > 1
    assert pd_state(prefill)["transfers_sent"] == 1 and pd_state(decode)["transfers_received"] == 1


@test
def sglang_decode_that_gave_up_does_not_take_the_kv():
    # its client left while it waited at the prefill's listener: the next
    # decode of the room gets the KV
    prefill, decode, _ = sglang_trio("--tokens-per-second", "0")
    body = sglang_body(prefill, {"messages": [{"role": "user", "content": "left early"}]})
    s = raw_post(decode.port, body)
    wait_until(lambda: pd_state(prefill)["decodes_asking"] == 1, what="the first decode asking")
    s.close()
    wait_until(lambda: pd_state(prefill)["decodes_asking"] == 0, what="the first decode gone")
    d = in_thread(post, decode, "/v1/chat/completions", body)
    ps, _ = post(prefill, "/v1/chat/completions", body)
    ds, ddata = d.join()
    assert ps == ds == 200, (ps, ds, ddata)
    assert pd_state(decode)["transfers_received"] == 1 and pd_state(prefill)["transfers_sent"] == 1


@test
def sglang_transfer_that_never_comes_is_a_500_on_both_sides():
    prefill = start_sim("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0",
                        "--disaggregation-fail-transfer", "--disaggregation-transfer-timeout-ms", "400")
    decode = start_sim("--disaggregation-mode", "decode", "--disaggregation-transfer-timeout-ms", "400")
    body = sglang_body(prefill, {"messages": [{"role": "user", "content": "lost"}]})
    room = body["bootstrap_room"]
    d = in_thread(http_json, "POST", decode.url + "/v1/chat/completions", body)
    ps, _, pobj = http_json("POST", prefill.url + "/v1/chat/completions", body)
    ds, _, dobj = d.join()
    assert ps == ds == 500, (ps, pobj, ds, dobj)
    for obj, side in ((pobj, "Prefill bootstrap failed"), (dobj, "Decode transfer failed")):
        assert obj["object"] == "error" and obj["type"] == "500" and obj["code"] == 500, obj
        assert obj["message"].startswith(side) and f"bootstrap_room={room}" in obj["message"], obj
    assert pd_state(prefill)["transfers_failed"] == 1 and pd_state(decode)["transfers_failed"] == 1
    assert pd_state(prefill)["rooms_held"] == 0
    assert 'sglang:num_bootstrap_failed_reqs_total{model_name="sim-model"} 1' in http("GET", prefill.url + "/metrics")[2].decode()
    assert 'sglang:num_transfer_failed_reqs_total{model_name="sim-model"} 1' in http("GET", decode.url + "/metrics")[2].decode()
    # streamed: 200, then the error event and [DONE]
    body = sglang_body(prefill, {"prompt": "lost too", "stream": True})
    s, data = post(decode, "/v1/completions", body)
    events = sse_events(data)
    assert s == 200 and events[-1] == "[DONE]", (s, data)
    assert json.loads(events[-2])["error"]["message"].startswith("Decode transfer failed"), events


@test
def sglang_decode_server_refuses_a_body_without_a_room():
    decode = start_sim("--disaggregation-mode", "decode")
    s, _, obj = http_json("POST", decode.url + "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "no room"}]})
    assert s == 400 and obj["object"] == "error" and obj["type"] == "BadRequestError", (s, obj)
    assert obj["message"].startswith("Invalid request: Disaggregated request received without boostrap room id."), obj
    # a batch's room lists: one item is one request; more are refused as more prompts are
    s, _, obj = http_json("POST", decode.url + "/v1/completions",
                          {"prompt": "x", "bootstrap_host": ["127.0.0.1"] * 2, "bootstrap_port": [1, 1],
                           "bootstrap_room": [1, 2]})
    assert s == 400, (s, obj)


@test
def sglang_batch_of_one_takes_its_lists():
    # sgl-router sends lists for a prompt list (pd_router.rs inject_bootstrap_into_value),
    # one item for a list of one prompt
    prefill, decode, together = sglang_trio("--tokens-per-second", "0")
    port, room = bootstrap_port(prefill), random.getrandbits(63)
    body = {"prompt": ["one prompt in a list"], "bootstrap_host": ["127.0.0.1"], "bootstrap_port": [port],
            "bootstrap_room": [room]}
    d = in_thread(post, decode, "/v1/completions", body)
    assert post(prefill, "/v1/completions", body)[0] == 200
    ds, ddata = d.join()
    cs, cdata = post(together, "/v1/completions", {"prompt": ["one prompt in a list"]})
    assert ds == cs == 200, (ds, ddata)
    assert json.loads(ddata)["choices"][0]["text"] == json.loads(cdata)["choices"][0]["text"]


def vllm_pair(*extra):
    a = start_sim("--flavor", "vllm", "--kv-transfer-config", KV, "--nixl-side-channel-port", "0", "--seed", "5",
                  "--tokens-per-second", "0", *extra)
    b = start_sim("--flavor", "vllm", "--kv-transfer-config", KV, "--nixl-side-channel-port", "0", "--seed", "5",
                  "--tokens-per-second", "0")
    bootstrap_port(a)
    bootstrap_port(b)
    return a, b


def vllm_prefill_body(base):
    return dict(base, stream=False, max_tokens=1, kv_transfer_params={
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None})


@test
def vllm_prefill_gives_params_the_decode_reads_blocks_with():
    prefill, decode = vllm_pair()
    for path, base in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "nixl chat"}]}),
                       ("/v1/completions", {"prompt": "nixl completion", "stream": True})):
        s, _, p = http_json("POST", prefill.url + path, vllm_prefill_body(base))
        assert s == 200 and p["usage"]["completion_tokens"] == 1, (s, p)
        k = p["kv_transfer_params"]
        assert list(k) == ["do_remote_prefill", "do_remote_decode", "remote_block_ids", "remote_engine_id",
                           "remote_request_id", "remote_host", "remote_port", "tp_size"], k
        assert k["do_remote_prefill"] is True and k["do_remote_decode"] is False and k["tp_size"] == 1, k
        assert k["remote_host"] == "127.0.0.1" and k["remote_port"] == bootstrap_port(prefill), k
        assert len(k["remote_block_ids"]) == (p["usage"]["prompt_tokens"] + 15) // 16, k
        stream = base.get("stream", False)
        ds, ddata = post(decode, path, dict(base, kv_transfer_params=k))
        # the same server without params: served whole (vLLM's kv_both)
        cs, cdata = post(decode, path, base)
        assert ds == cs == 200, (ds, ddata[:300])
        got = answer_text(path, ddata if stream else json.loads(ddata), stream)[0]
        want = answer_text(path, cdata if stream else json.loads(cdata), stream)[0]
        assert got == want and got, (got, want)
    assert pd_state(prefill)["transfers_sent"] == 2 and pd_state(decode)["transfers_received"] == 2
    assert pd_state(prefill)["rooms_held"] == 0


@test
def vllm_blocks_never_readable_fail_the_decode_or_recompute():
    prefill, decode = vllm_pair("--disaggregation-fail-transfer")
    base = {"messages": [{"role": "user", "content": "unreadable"}]}
    k = http_json("POST", prefill.url + "/v1/chat/completions", vllm_prefill_body(base))[2]["kv_transfer_params"]
    s, _, obj = http_json("POST", decode.url + "/v1/chat/completions", dict(base, kv_transfer_params=k))
    assert s == 500 and obj == {"error": {"message": "Internal server error", "type": "InternalServerError",
                                          "param": None, "code": 500}}, (s, obj)
    assert pd_state(decode)["transfers_failed"] == 1
    m = http("GET", decode.url + "/metrics")[2].decode()
    assert 'vllm:nixl_num_failed_transfers_total{model_name="sim-model"} 1' in m
    # kv_load_failure_policy "recompute": the decode computes the prompt itself
    again = start_sim("--flavor", "vllm", "--seed", "5", "--kv-transfer-config",
                      '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute"}')
    s, _, obj = http_json("POST", again.url + "/v1/chat/completions", dict(base, kv_transfer_params=k))
    assert s == 200 and obj["usage"]["completion_tokens"] > 1, (s, obj)


@test
def vllm_blocks_no_decode_read_are_freed_after_the_abort_timeout():
    prefill, decode = vllm_pair("--nixl-abort-request-timeout-s", "0.3")
    base = {"prompt": "nobody reads these blocks"}
    k = http_json("POST", prefill.url + "/v1/completions", vllm_prefill_body(base))[2]["kv_transfer_params"]
    wait_until(lambda: pd_state(prefill)["rooms_held"] == 0, what="the blocks freed")
    m = http("GET", prefill.url + "/metrics")[2].decode()
    assert 'vllm:nixl_num_kv_expired_reqs_total{model_name="sim-model"} 1' in m
    s, _, obj = http_json("POST", decode.url + "/v1/completions", dict(base, kv_transfer_params=k))
    assert s == 500 and obj["error"]["type"] == "InternalServerError", (s, obj)


@test
def bad_pd_flags_exit_2():
    import subprocess
    from harness import binary
    for args, want in ((["--flavor", "vllm", "--disaggregation-mode", "prefill"], "--disaggregation-mode"),
                       (["--kv-transfer-config", KV], "--kv-transfer-config: needs --flavor vllm"),
                       (["--flavor", "vllm", "--kv-transfer-config", '{"kv_connector":"NixlConnector"}'],
                        "Please specify kv_role"),
                       (["--flavor", "vllm", "--kv-transfer-config", '{"kv_connector":"NixlConnector",'
                         '"kv_role":"kv_both","nope":1}'], "unknown field 'nope'"),
                       (["--disaggregation-fail-transfer"], "--disaggregation-fail-transfer")):
        p = subprocess.run([binary("infergate-sim"), *args], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and want in p.stderr, (args, p.returncode, p.stderr)


run()
