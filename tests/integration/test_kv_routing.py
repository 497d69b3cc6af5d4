#!/usr/bin/env python3
"""cache-aware on the engines' own KV events (the exact index): simulators that
publish their prefix caches' stores, evictions and clears in vLLM's format
(infergate-sim --kv-events), a gateway subscribed to them. What a user sees:
the backend that served (X-Infergate-Backend) and the prompt tokens its
engine found cached; /health/backends' kv_events counts."""
import json
import os
import tempfile

from harness import (free_port, http, http_json, run, start_gateway, start_sim, test, wait_until)


def start_publishing_sims(n, *extra):
    """n simulators with a prefix cache (the h100-8b profile) publishing KV events (vLLM's
    format) with a replay socket; .kv, .kv_replay: their endpoints."""
    sims = []
    for _ in range(n):
        pub, rep = free_port(), free_port()
        s = start_sim("--profile", "h100-8b", "--kv-events", f"tcp://127.0.0.1:{pub}",
                      "--kv-events-replay", f"tcp://127.0.0.1:{rep}", *extra)
        s.kv, s.kv_replay = f"tcp://127.0.0.1:{pub}", f"tcp://127.0.0.1:{rep}"
        sims.append(s)
    return sims


def gateway_on_events(sims, *extra, events=True, fmt="vllm"):
    """A cache-aware gateway in front of sims, subscribed to their events (events=False: the
    approximate index alone) in format fmt."""
    cfg = {"backends": [{"url": s.url, **({"kv_events": s.kv, "kv_events_replay": s.kv_replay,
                                           "kv_events_format": fmt} if events else {})}
                        for s in sims]}
    d = tempfile.mkdtemp(prefix="ig-kvr-")
    path = os.path.join(d, "gw.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    gw = start_gateway([], "--config", path, "--policy", "cache-aware", "--health-interval-ms", "200", *extra)
    if events:
        wait_until(lambda: all(b["kv_events"]["state"] in ("flowing", "waiting") for b in backends(gw)),
                   what="subscribed to every simulator's events")
    return gw


def backends(gw):
    return http_json("GET", gw.url + "/health/backends")[2]["backends"]


def kv_blocks(gw, sim):
    for b in backends(gw):
        if b["url"] == sim.url:
            return b["kv_events"]["blocks"]
    raise AssertionError(f"{sim.url} not in /health/backends")


def prompt(tag, nbytes=6400):
    """A prompt of nbytes of text (100 blocks of 64 bytes: 1,600 of the simulators' tokens)."""
    words = f"{tag} conversation history with enough words to fill the blocks "
    return (words * (nbytes // len(words) + 1))[:nbytes]


def complete(url, text, max_tokens=4):
    """POST /v1/completions; (the backend that served or None, cached prompt tokens)."""
    st, h, body = http("POST", url + "/v1/completions", {"model": "sim-model", "prompt": text, "max_tokens": max_tokens})
    assert st == 200, (st, body[:300])
    obj = json.loads(body)
    cached = ((obj.get("usage") or {}).get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return h.get("x-infergate-backend"), cached


@test
def test_a_prefix_cached_elsewhere_is_found():
    """A prefix the gateway never routed, cached on one simulator by a client that went to it
    straight: the engine's event tells the gateway, and the next turn goes there and finds its
    prefix cached (the approximate index cannot know: it remembers only what it sent). Twice,
    on two simulators, so it is not chance (1 in 9)."""
    sims = start_publishing_sims(3)
    gw = gateway_on_events(sims)
    for tag, home in (("alpha", sims[1]), ("beta", sims[2])):
        p = prompt(tag)
        complete(home.url, p)  # straight to the engine, not through the gateway
        wait_until(lambda: kv_blocks(gw, home) >= 100, what=f"{home.url}'s 100 blocks of {tag} in the index")
        served, cached = complete(gw.url, p + " and the next question")
        assert served == home.url, (tag, served, home.url)
        assert cached >= 1600, (tag, cached)


@test
def test_sglangs_format_too():
    """The same with the simulators publishing as SGLang does (a BlockStored per page, hashes
    as signed 64-bit integers: python/sglang/srt/disaggregation/kv_events.py)."""
    sims = start_publishing_sims(3, "--kv-events-format", "sglang")
    gw = gateway_on_events(sims, fmt="sglang")
    home = sims[1]
    p = prompt("zeta")
    complete(home.url, p)
    wait_until(lambda: kv_blocks(gw, home) >= 100, what="the 100 blocks in the index")
    served, cached = complete(gw.url, p + " and the next question")
    assert served == home.url, (served, home.url)
    assert cached >= 1600, cached


@test
def test_an_eviction_is_seen():
    """The approximate index keeps believing in a cache the engine emptied: a conversation
    routed to one simulator, whose cache is then flushed (AllBlocksCleared), its history cached
    on another by a direct client; the next turn through the gateway goes to the one that holds
    it, and its engine reports it cached."""
    sims = start_publishing_sims(2)
    gw = gateway_on_events(sims)
    p = prompt("gamma")
    first, _ = complete(gw.url, p)
    first_sim = next(s for s in sims if s.url == first)
    other = next(s for s in sims if s is not first_sim)
    wait_until(lambda: kv_blocks(gw, first_sim) >= 100, what="the first turn's blocks in the index")
    st, _, body = http("POST", first_sim.url + "/flush_cache", {})
    assert st == 200, (st, body[:200])
    wait_until(lambda: kv_blocks(gw, first_sim) == 0, what="the flush seen (AllBlocksCleared)")
    complete(other.url, p)
    wait_until(lambda: kv_blocks(gw, other) >= 100, what="the other simulator's blocks in the index")
    served, cached = complete(gw.url, p + " and the next question")
    assert served == other.url, (served, other.url, first)
    assert cached >= 1600, cached


@test
def test_nine_backends_subscribed():
    """The events thread's poll set holds every source (it once had room for 16 sockets and no
    more, so the ninth backend with its replay socket wrote past it): nine simulators, the last
    one's blocks reach the index."""
    sims = start_publishing_sims(9)
    gw = gateway_on_events(sims)
    complete(sims[8].url, prompt("ninth"))
    wait_until(lambda: kv_blocks(gw, sims[8]) >= 100, what="the ninth simulator's blocks in the index")
    assert all(b["kv_events"]["malformed"] == 0 for b in backends(gw))


TOK = os.path.join(os.environ.get("IG_SRCDIR", os.path.join(os.path.dirname(__file__), "..", "..")),
                   "tests", "fixtures", "prompt", "tokenizer.json")


@test
def test_a_real_tokenizer_on_both_sides():
    """Token ids of a model's own tokenizer on both sides (tests/fixtures/prompt: a byte-level
    tokenizer, a byte a token, and a ChatML-like template): the simulators tokenize and render
    chats as an engine does and publish those ids, the gateway renders and tokenizes the same
    way; a conversation's history cached on one simulator by a direct client is found for its
    next turn through the gateway, in chat form."""
    sims = start_publishing_sims(3, "--tokenizer", TOK)
    gw = gateway_on_events(sims, "--tokenizer", f"sim-model={TOK}")
    home = sims[2]
    st, _, obj = http_json("POST", home.url + "/tokenize", {"prompt": "hi<|im_end|>"})
    assert st == 200 and obj["tokens"] == [104, 105, 257], (st, obj)  # the simulator's ids are the model's
    history = [{"role": "user", "content": prompt("epsilon", 3000)}]
    st, _, body = http("POST", home.url + "/v1/chat/completions", {"model": "sim-model", "messages": history,
                                                                   "max_tokens": 4})
    assert st == 200, (st, body[:300])
    first = json.loads(body)
    # a byte a token: <|im_start|>user\n TEXT <|im_end|>\n <|im_start|>assistant\n
    assert first["usage"]["prompt_tokens"] == 1 + 5 + 3000 + 1 + 1 + 1 + 10, first["usage"]
    wait_until(lambda: kv_blocks(gw, home) >= 3000 // 16, what="the history's blocks in the index")
    turn = history + [first["choices"][0]["message"], {"role": "user", "content": "and then?"}]
    st, h, body = http("POST", gw.url + "/v1/chat/completions", {"model": "sim-model", "messages": turn,
                                                                 "max_tokens": 4})
    assert st == 200, (st, body[:300])
    assert h["x-infergate-backend"] == home.url, (h["x-infergate-backend"], home.url)
    cached = json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 3000, cached


@test
def test_without_events_the_guess_is_kept():
    """The same flush with the approximate index alone: the next turn goes back where the first
    was sent and finds nothing cached: what the events fix."""
    sims = start_publishing_sims(2)
    gw = gateway_on_events(sims, events=False)
    p = prompt("delta")
    first, _ = complete(gw.url, p)
    first_sim = next(s for s in sims if s.url == first)
    other = next(s for s in sims if s is not first_sim)
    http("POST", first_sim.url + "/flush_cache", {})
    complete(other.url, p)
    served, cached = complete(gw.url, p + " and the next question")
    assert served == first, (served, first)
    assert cached == 0, cached


if __name__ == "__main__":
    run()
