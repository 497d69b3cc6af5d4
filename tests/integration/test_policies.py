"""Routing policies that look past request counts, with real processes:
least-tokens (the soonest expected finish: outstanding tokens over each
backend's measured speed). What a user sees: which backend served each
request (X-Infergate-Backend) and /health/backends."""

import collections
import json

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


run()
