"""Prefill/decode pairs end to end: the gateway in front of infergate-sim's
prefill and decode roles, in SGLang's protocol (--disaggregation-mode, a
bootstrap listener) and vLLM's (--kv-transfer-config NixlConnector, a side
channel). What a client sees is what a co-located server answers the same
request; the hand-over is counted on both servers; a decode server killed
mid-stream is continued on another, paired again; a hand-over that never
comes is cut at pd.transfer_timeout_ms. test_pd.py shows the exact bodies
with scripted servers."""

import http.client as httpc
import json
import signal
import tempfile
import threading

from harness import free_port, http, http_json, metric, run, sse_events, start_gateway, start_sim, test, wait_until

KV = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
SEED = ("--seed", "11", "--ttft-ms", "0")
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "500")


def prefill_sim(engine, *extra):
    port = free_port()
    if engine == "sglang":
        s = start_sim(*SEED, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port), *extra)
    else:
        s = start_sim(*SEED, "--flavor", "vllm", "--kv-transfer-config", KV, "--nixl-side-channel-port", str(port),
                      *extra)
    s.bootstrap = port
    return s


def decode_sim(engine, *extra):
    if engine == "sglang":
        return start_sim(*SEED, "--disaggregation-mode", "decode", *extra)
    return start_sim(*SEED, "--flavor", "vllm", "--kv-transfer-config", KV,
                     "--nixl-side-channel-port", str(free_port()), *extra)


def colocated_sim(engine, *extra):
    return start_sim(*SEED, *(("--flavor", "vllm") if engine == "vllm" else ()), *extra)


def gateway(prefills, decodes, engine, *extra):
    cfg = {"backends": [{"url": p.url, "role": "prefill", "engine": engine,
                         **({"bootstrap_port": p.bootstrap} if engine == "sglang" else {})} for p in prefills] +
                       [{"url": d.url, "role": "decode", "engine": engine} for d in decodes]}
    f = tempfile.NamedTemporaryFile("w", prefix="ig-pd-", suffix=".json", delete=False)
    json.dump(cfg, f)
    f.close()
    gw = start_gateway([], *QUICK_HEALTH, *extra, config=f.name)
    n = len(prefills) + len(decodes)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2].get("healthy_backends") == n, timeout=15,
               what=f"{n} backends up")
    return gw


def pd_state(sim):
    return http_json("GET", sim.url + "/sim/state")[2]["pd"]


def events_of(raw):
    """A stream's events, the id and time that differ between servers left out."""
    out = []
    for e in sse_events(raw):
        if e != "[DONE]":
            e = json.loads(e)
            e.pop("id", None)
            e.pop("created", None)
        out.append(e)
    return out


def text_of(events):
    return "".join((e["choices"][0].get("delta") or {}).get("content") or ""
                   for e in events if e != "[DONE]" and e.get("choices"))


@test
def a_pair_answers_what_a_colocated_server_answers_in_both_engines():
    for engine in ("sglang", "vllm"):
        pre, dec, colo = prefill_sim(engine), decode_sim(engine), colocated_sim(engine)
        gw = gateway([pre], [dec], engine)
        body = {"model": "sim-model", "messages": [{"role": "user", "content": "tell me about pairs " * 30}],
                "max_tokens": 24, "stream": True, "stream_options": {"include_usage": True}}
        st, hdrs, paired = http("POST", gw.url + "/v1/chat/completions", body)
        assert st == 200 and hdrs["x-infergate-backend"] == dec.url, (engine, st, hdrs)
        assert hdrs["x-infergate-prefill-backend"] == pre.url, (engine, hdrs)
        st, _, alone = http("POST", colo.url + "/v1/chat/completions", body)
        assert st == 200
        assert events_of(paired) == events_of(alone), (engine, paired[:400], alone[:400])
        usage = [e["usage"] for e in events_of(paired) if e != "[DONE]" and e.get("usage")]
        assert len(usage) == 1 and usage[0]["completion_tokens"] == 24, (engine, usage)
        # the gateway counted the tokens once: the decode's, not the prefill's one too
        m = http("GET", gw.url + "/metrics")[2]
        assert metric(m, 'infergate_tokens_total{kind="completion"}') == 24, engine
        # and not streamed: the same message
        body.update(stream=False)
        body.pop("stream_options")
        p = json.loads(http("POST", gw.url + "/v1/chat/completions", body)[2])
        a = json.loads(http("POST", colo.url + "/v1/chat/completions", body)[2])
        assert p["choices"] == a["choices"] and p["usage"] == a["usage"], (engine, p, a)
        # each hand-over counted on both sides
        sent, got = pd_state(pre), pd_state(dec)
        assert sent["transfers_sent"] == 2 and got["transfers_received"] == 2, (engine, sent, got)
        assert sent["bytes_sent"] == got["bytes_received"] > 0, (engine, sent, got)
        for s in (gw, pre, dec, colo):
            s.stop()


@test
def a_decode_server_killed_mid_stream_is_continued_on_another_paired_again():
    for engine in ("sglang", "vllm"):
        slow = ("--tokens-per-second", "20", "--output-tokens", "400")
        pre = prefill_sim(engine, *slow)
        decs = [decode_sim(engine, *slow), decode_sim(engine, *slow)]
        colo = colocated_sim(engine, *slow)
        gw = gateway([pre], decs, engine)
        body = {"model": "sim-model", "messages": [{"role": "user", "content": "die while decoding " * 20}],
                "max_tokens": 40, "stream": True, "stream_options": {"include_usage": True}}
        c = httpc.HTTPConnection("127.0.0.1", gw.port, timeout=60)
        c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, engine
        first = r.read1(65536)  # the stream is under way on its decode server
        victim = next(d for d in decs if d.url == r.getheader("X-Infergate-Backend"))
        victim.send_signal(signal.SIGKILL)
        raw = first + r.read()
        c.close()
        got = events_of(raw)
        st, _, alone = http("POST", colo.url + "/v1/chat/completions", dict(body, stream=False))
        want = json.loads(alone)
        assert got[-1] == "[DONE]" and not any("error" in e for e in got[:-1]), (engine, got[-3:])
        assert text_of(got) == want["choices"][0]["message"]["content"], (engine, text_of(got))
        usage = [e["usage"] for e in got[:-1] if e.get("usage")]
        assert [u["completion_tokens"] for u in usage] == [40], (engine, usage)
        m = http("GET", gw.url + "/metrics")[2]
        assert metric(m, 'infergate_stream_continuations_total{reason="reset"}') == 1, engine
        assert metric(m, 'infergate_pd_requests_total{outcome="paired"}') == 2, engine  # the continuation's pair
        for s in (gw, pre, colo, *decs):
            s.stop()


@test
def a_prefill_server_killed_before_the_hand_over_is_replaced_by_another():
    # a slow prefill (TTFT 3 s of computing): the first prefill server dies in it; the pair is
    # made again with the other, the decode request cut and sent again with the new room
    slow = ("--ttft-ms", "3000")
    pres = [prefill_sim("sglang", *slow), prefill_sim("sglang", *slow)]
    dec, colo = decode_sim("sglang"), colocated_sim("sglang")
    gw = gateway(pres, [dec], "sglang", "--pd-prefill-policy", "round-robin")
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "prefill then die " * 20}],
            "max_tokens": 12}
    out = {}

    def ask():
        out["r"] = http("POST", gw.url + "/v1/chat/completions", body, timeout=60)
    t = threading.Thread(target=ask)
    t.start()
    first = wait_until(lambda: next((p for p in pres if http_json("GET", p.url + "/sim/state")[2]["requests_received"]),
                                    None), timeout=10, what="the first prefill server computing")
    first.send_signal(signal.SIGKILL)
    t.join(60)
    st, hdrs, ans = out["r"]
    other = next(p for p in pres if p is not first)
    assert st == 200 and hdrs["x-infergate-prefill-backend"] == other.url, (st, hdrs, ans)
    want = json.loads(http("POST", colo.url + "/v1/chat/completions", body)[2])
    assert json.loads(ans)["choices"] == want["choices"], ans
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, 'infergate_pd_requests_total{outcome="prefill_failed"}') == 1
    assert metric(m, 'infergate_pd_requests_total{outcome="paired"}') == 2
    assert pd_state(other)["transfers_sent"] == 1 and pd_state(dec)["transfers_received"] == 1


@test
def a_hand_over_that_never_comes_is_cut_at_the_deadline():
    pre = prefill_sim("sglang", "--disaggregation-fail-transfer")
    dec = decode_sim("sglang")
    gw = gateway([pre], [dec], "sglang", "--pd-transfer-timeout-ms", "800", "--retries", "0")
    st, _, ans = http("POST", gw.url + "/v1/chat/completions",
                      {"model": "sim-model", "messages": [{"role": "user", "content": "x " * 64}], "max_tokens": 4})
    assert st == 504 and json.loads(ans)["error"]["code"] == "backend_timeout", (st, ans)
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, 'infergate_pd_requests_total{outcome="transfer_timeout"}') == 1
    be = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    assert be[pre.url]["failures"] == 1 and be[dec.url]["failures"] == 1, be
    # both servers let the request go: nothing waits there any more
    wait_until(lambda: pd_state(pre)["rooms_held"] == 0 and pd_state(dec)["decodes_asking"] == 0, timeout=10,
               what="the cut pair gone from both servers")


if __name__ == "__main__":
    run()
