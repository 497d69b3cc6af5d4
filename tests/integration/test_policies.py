"""Routing policies that look past request counts, with real processes:
least-tokens (the soonest expected finish: outstanding tokens over each
backend's measured speed) and cache-aware (a conversation's turns go where
its prefix was sent, unless that backend is overloaded). What a user sees:
which backend served each request (X-Infergate-Backend), the cached tokens
the simulators report, and /health/backends."""

import collections
import json
import threading

from harness import chat_body, http, http_json, parallel, run, start_gateway, start_sim, test, wait_until


def healthy(gw, n):
    wait_until(lambda: http_json("GET", gw.url + "/health")[2].get("healthy_backends") == n, timeout=15,
               what=f"{n} healthy backends")


def send(gw, n, prefix, max_tokens=24, workers=12):
    def one(i):
        st, h, _ = http("POST", gw.url + "/v1/chat/completions",
                        chat_body(f"{prefix} {i}", max_tokens=max_tokens))
        assert st == 200, st
        return h["x-infergate-backend"]
    return collections.Counter(parallel(one, range(n), workers=workers))


@test
def least_tokens_moves_work_away_from_a_backend_that_slowed_down():
    sims = [start_sim("--tokens-per-second", "400", "--ttft-ms", "5", "--output-tokens", "24") for _ in range(3)]
    gw = start_gateway(sims, "--policy", "least-tokens", "--load-source", "gateway")
    healthy(gw, 3)
    warm = send(gw, 90, "warm")
    assert set(warm) == {s.url for s in sims} and min(warm.values()) >= 15, warm
    backends = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    for s in sims:   # every backend measured: about 400 tokens/s per request
        assert 200 < backends[s.url]["speed_tokens_per_s"] < 800, backends[s.url]
        assert backends[s.url]["outstanding_tokens"] == 0, backends[s.url]
    # One server becomes ten times slower (TTFT x10, 40 tokens/s).
    slow = sims[2]
    assert http_json("POST", slow.url + "/sim/fault", {"mode": "slow"})[0] == 200
    after = send(gw, 240, "after")
    backends = {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    print(f"# after the slowdown: {dict((u[-5:], n) for u, n in after.items())}; measured speeds "
          f"{[round(backends[s.url]['speed_tokens_per_s']) for s in sims]} tokens/s")
    assert backends[slow.url]["speed_tokens_per_s"] < 200, backends[slow.url]
    # It finishes a request in about ten times as long: it gets a small share.
    assert after[slow.url] <= 0.12 * 240, after
    assert sum(after.values()) == 240



SYSTEM = "You are a careful assistant for a river survey team. " * 24   # about 1,300 bytes


def turn(gw, history, question, **kw):
    """One turn of a conversation: its history and a new question; returns
    (backend, cached tokens, answer)."""
    msgs = [{"role": "system", "content": SYSTEM}] + history + [{"role": "user", "content": question}]
    st, h, obj = http_json("POST", gw.url + "/v1/chat/completions", {"model": "sim-model", "messages": msgs, **kw})
    assert st == 200, (st, obj)
    answer = obj["choices"][0]["message"]["content"]
    return h["x-infergate-backend"], obj["usage"]["prompt_tokens_details"]["cached_tokens"], answer


def backends_json(gw):
    return {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}


@test
def cache_aware_keeps_a_conversation_on_its_backend_until_it_is_overloaded():
    sims = [start_sim("--profile", "h100-8b") for _ in range(3)]   # real time: a step is about 6 ms
    # the mode of SGLang's router, its guard set tighter than its default (32 beyond the least
    # loaded), so 24 requests cross it
    gw = start_gateway(sims, "--policy", "cache-aware", "--cache-mode", "threshold", "--load-source", "gateway",
                       "--health-interval-ms", "200", "--cache-balance-abs", "8")
    healthy(gw, 3)
    # Three conversations of six turns each, turns taken one after another.
    where = collections.defaultdict(list)
    cached = []
    for conv in range(3):
        history = []
        for t in range(6):
            q = f"conversation {conv}, question {t}: how deep is the river here?"
            b, c, answer = turn(gw, history, q, max_tokens=12)
            where[conv].append(b)
            cached.append((t, c))
            history += [{"role": "user", "content": q}, {"role": "assistant", "content": answer}]
    for conv, bs in where.items():   # every turn where the first went
        assert len(set(bs)) == 1, (conv, bs)
    # After the first turn the simulator finds the previous prompt cached.
    assert all(c > 0 for t, c in cached if t > 0), cached
    recorded = backends_json(gw)
    assert sum(b["cache_blocks"] for b in recorded.values()) > 0, recorded
    # One conversation's turns pile up on its backend (long answers, all at
    # once): past the load guard (8 more in flight than the least loaded,
    # and 1.5 times as many) they go to the others.
    home = where[0][0]
    results = []
    def long_turn(i):
        # no max_tokens: the simulator answers this prompt with about 100-250 tokens
        results.append(turn(gw, [], "conversation 0, question 0: how deep is the river here?")[0])
    # the same first turn as conversation 0: its prefix is recorded on `home`
    ths = [threading.Thread(target=long_turn, args=(i,)) for i in range(24)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    spread = collections.Counter(results)
    print(f"# 24 concurrent turns of one conversation: {dict((u[-5:], n) for u, n in spread.items())}")
    assert spread[home] >= 9 and len(spread) >= 2 and spread[home] < 24, spread
    # A backend that dies loses its record (its cache is gone with it).
    victim = sims[1]
    victim_url = victim.url
    victim.kill()
    wait_until(lambda: backends_json(gw)[victim_url]["state"] == "down", timeout=15, what="the backend down")
    assert backends_json(gw)[victim_url]["cache_blocks"] == 0


@test
def cache_aware_cost_sends_a_long_history_home_past_a_busier_count():
    # the default mode: the least work waiting, in tokens (prefill weighted 16, KV held)
    sims = [start_sim("--profile", "h100-8b") for _ in range(2)]   # real time: a step is about 6 ms
    gw = start_gateway(sims, "--policy", "cache-aware", "--health-interval-ms", "200")
    healthy(gw, 2)
    # a conversation with a long history (about 4,000 tokens) goes where its first turn went
    history = [{"role": "user", "content": " ".join(f"fact {i} about the river" for i in range(700))},
               {"role": "assistant", "content": "noted"}]
    home, _, _ = turn(gw, history, "question 1", max_tokens=4)
    b, cached, _ = turn(gw, history, "question 2", max_tokens=4)
    assert b == home and cached > 3000, (b, home, cached)
    # a long answer of the same conversation runs on its home (one request in flight there,
    # none on the other backend) ...
    done = []

    def long_answer():
        msgs = [{"role": "system", "content": SYSTEM}] + history + [{"role": "user", "content": "question 3"}]
        st, h, _ = http("POST", gw.url + "/v1/chat/completions",
                        {"model": "sim-model", "messages": msgs, "max_tokens": 1500, "ignore_eos": True,
                         "stream": True}, timeout=60)
        assert st == 200, st
        done.append(h["x-infergate-backend"])
    th = threading.Thread(target=long_answer)
    th.start()
    wait_until(lambda: backends_json(gw)[home]["kv_tokens"] > 0 and backends_json(gw)[home]["prefill_tokens"] == 0,
               what="the long answer prefilled and streaming")
    now = backends_json(gw)  # one reading: the streaming answer's KV grows a token an event
    assert sum(b["kv_tokens"] for b in now.values()) == now[home]["kv_tokens"], now
    # ... and the next turn still goes home: 4,000 tokens to prefill elsewhere outweigh the KV
    # of one request (least-loaded would send it to the idle backend)
    b, cached, _ = turn(gw, history, "question 4", max_tokens=4)
    assert b == home and cached > 3000, (b, home, cached)
    assert th.is_alive() and not done     # the long answer was still streaming then
    th.join()
    assert done == [home]
    # everything ended: nothing is counted as waiting anywhere
    wait_until(lambda: all(b["kv_tokens"] == 0 and b["prefill_tokens"] == 0 for b in backends_json(gw).values()),
               what="the counts back to 0")


run()