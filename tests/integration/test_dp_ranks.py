#!/usr/bin/env python3
"""A server's data-parallel ranks as backends of their own (backends[].dp_ranks):
each rank has its own slots (from its rank's part of the load report), load and
queue; the gateway picks the rank and names it in X-Data-Parallel-Rank, which
SGLang and vLLM run the request on. What a user sees: the rank the gateway
chose (X-Infergate-DP-Rank) is the one that served (the simulator's
X-Sim-DP-Rank and its per-rank counts), a slowed rank gets little work where
the server's own round-robin gives it its quarter, /health/backends lists the
ranks, a prefix cached on one rank is found there, the admin API drains one
rank or removes the whole server."""
import hashlib
import json
import os
import socket
import subprocess
import tempfile
import threading

from harness import binary, free_port, http, http_json, run, start_gateway, start_sim, test, wait_until

UNPACED = ("--tokens-per-second", "0", "--ttft-ms", "0")
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "1000")
ADMIN = {"Authorization": "Bearer admin-secret"}


def config(backends, **more):
    d = tempfile.mkdtemp(prefix="ig-dp-")
    path = os.path.join(d, "gw.json")
    with open(path, "w") as f:
        json.dump({"backends": backends, **more}, f)
    return path


def entries(gw):
    return http_json("GET", gw.url + "/health/backends")[2]["backends"]


def sim_served(sim):
    """Requests each of the simulator's ranks finished (/sim/state)."""
    return [r["requests_served"] for r in http_json("GET", sim.url + "/sim/state")[2]["ranks"]]


def complete(url, prompt, max_tokens=4, headers=None):
    st, h, body = http("POST", url + "/v1/completions",
                       {"model": "sim-model", "prompt": prompt, "max_tokens": max_tokens}, headers=headers)
    assert st == 200, (st, body[:300])
    return h, json.loads(body)


def ranks_gateway(sim, n, *extra, **entry):
    gw = start_gateway([], *QUICK_HEALTH, *extra, config=config([{"url": sim.url, "dp_ranks": n, **entry}]))
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == n, what=f"{n} ranks up")
    return gw


@test
def the_rank_the_gateway_chose_is_the_rank_that_served():
    """SGLang and vLLM: 24 requests one after another over four idle ranks; each
    answer's X-Infergate-DP-Rank equals the simulator's X-Sim-DP-Rank, every rank
    serves (equals take turns), and the simulator's per-rank counts are the
    gateway's. /health/backends shows the four ranks of the one URL, each with
    the slots its rank's report states."""
    for flavor in ("sglang", "vllm"):
        sim = start_sim("--flavor", flavor, "--dp-ranks", "4", "--max-running", "3", *UNPACED)
        gw = ranks_gateway(sim, 4)
        got = [0, 0, 0, 0]
        for i in range(24):
            h, _ = complete(gw.url, f"{flavor} request {i}")
            assert h["x-infergate-backend"] == sim.url, h
            assert h["x-infergate-dp-rank"] == h["x-sim-dp-rank"], (flavor, i, h)
            got[int(h["x-infergate-dp-rank"])] += 1
        assert all(g > 0 for g in got), (flavor, got)
        assert sim_served(sim) == got, (flavor, sim_served(sim), got)
        es = entries(gw)
        assert [(e["url"], e["dp_rank"], e["key"]) for e in es] == \
            [(sim.url, r, f"{sim.url}#dp{r}") for r in range(4)], es
        assert all(e["server_id"] == es[0]["id"] for e in es), es
        assert [e["served"] for e in es] == got, es
        if flavor == "sglang":  # /v1/loads states each rank's max_running_requests
            wait_until(lambda: all(e["limit"] == 3 and e["limit_from"] == "reported" for e in entries(gw)),
                       what="each rank's stated slots")
        gw.stop()
        sim.stop()


def burst(url, n, threads, max_tokens):
    """n requests through `threads` clients at once; the rank each ran on (X-Sim-DP-Rank)."""
    ranks, lock, todo = [], threading.Lock(), list(range(n))

    def client():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            h, _ = complete(url, f"burst request {i}", max_tokens=max_tokens)
            with lock:
                ranks.append(int(h["x-sim-dp-rank"]))
    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [ranks.count(r) for r in range(4)]


@test
def load_follows_the_free_ranks_where_round_robin_does_not():
    """Four ranks of two slots, rank 1 ten times slower; 48 requests, 16 at once.
    Through a gateway that sees one server, the server's own round-robin gives
    rank 1 its 12; through one that routes by rank, the fast ranks take what
    rank 1 would hold, and rank 1 serves a fraction of any other's count."""
    sim_args = ("--flavor", "sglang", "--dp-ranks", "4", "--max-running", "2", "--dp-rank-slowdown", "1=10",
                "--tokens-per-second", "400", "--ttft-ms", "5")
    sim = start_sim(*sim_args)
    gw = start_gateway([], *QUICK_HEALTH, config=config([{"url": sim.url}]))
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, what="the server up")
    rr = burst(gw.url, 48, 16, 40)
    assert rr == [12, 12, 12, 12], rr
    gw.stop()
    sim.stop()
    sim = start_sim(*sim_args)
    gw = ranks_gateway(sim, 4)
    wait_until(lambda: all(e["limit"] == 2 for e in entries(gw)), what="each rank's two slots")
    by_rank = burst(gw.url, 48, 16, 40)
    assert sum(by_rank) == 48, by_rank
    assert by_rank[1] * 3 <= min(by_rank[0], by_rank[2], by_rank[3]), by_rank


def two_free_ports():
    """A port p with p + 1 free as well, at this moment."""
    for _ in range(50):
        p = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise AssertionError("no two consecutive free ports")


def kv_sim():
    """A simulator with two ranks and a prefix cache each, publishing each rank's KV
    events on its own port (vLLM's rank r on port + r)."""
    pub = two_free_ports()
    s = start_sim("--profile", "h100-8b", "--dp-ranks", "2", "--kv-events", f"tcp://127.0.0.1:{pub}")
    s.kv = f"tcp://127.0.0.1:{pub}"
    return s


def prompt(tag, nbytes=6400):
    words = f"{tag} conversation history with enough words to fill the blocks "
    return (words * (nbytes // len(words) + 1))[:nbytes]


@test
def a_prefix_cached_on_one_rank_is_found_on_that_rank():
    """Each rank's events feed the exact index as a source of its own: a prefix a
    client cached on rank 1 straight at the engine (its header) is found there,
    the next turn through the gateway runs on rank 1 with its prompt cached;
    the same for another prefix on rank 0."""
    sim = kv_sim()
    gw = ranks_gateway(sim, 2, "--policy", "cache-aware", kv_events=sim.kv)
    wait_until(lambda: all(e["kv_events"]["state"] in ("waiting", "flowing") for e in entries(gw)),
               what="both ranks subscribed")
    for tag, rank in (("alpha", 1), ("beta", 0)):
        p = prompt(tag)
        complete(sim.url, p, headers={"X-Data-Parallel-Rank": str(rank)})
        wait_until(lambda: entries(gw)[rank]["kv_events"]["blocks"] >= 100,
                   what=f"rank {rank}'s blocks of {tag} in the index")
        h, obj = complete(gw.url, p + " and the next question")
        assert h["x-infergate-dp-rank"] == str(rank) == h["x-sim-dp-rank"], (tag, h)
        cached = (obj["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        assert cached >= 1600, (tag, obj["usage"])


@test
def a_drained_rank_gets_nothing_and_a_removed_rank_takes_its_server():
    d = tempfile.mkdtemp(prefix="ig-dp-")
    keys = os.path.join(d, "admin.keys")
    with open(keys, "w") as f:
        f.write(hashlib.sha256(b"admin-secret").hexdigest() + "\n")
    sim = start_sim("--flavor", "vllm", "--dp-ranks", "3", *UNPACED)
    gw = start_gateway([], *QUICK_HEALTH, config=config([{"url": sim.url, "dp_ranks": 3}], admin_keys_file=keys))
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 3, what="3 ranks up")
    ids = [e["id"] for e in entries(gw)]
    st, _, obj = http_json("POST", f"{gw.url}/admin/backends/{ids[1]}/drain", headers=ADMIN)
    assert st == 200 and obj["admin"] == "draining" and obj["dp_rank"] == 1, obj
    seen = {complete(gw.url, f"drained {i}")[0]["x-sim-dp-rank"] for i in range(12)}
    assert seen == {"0", "2"}, seen
    st, _, obj = http_json("DELETE", f"{gw.url}/admin/backends/{ids[2]}", headers=ADMIN)
    assert st == 202, obj
    wait_until(lambda: entries(gw) == [], what="the server's three ranks removed")
    st, _, obj = http_json("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "x", "max_tokens": 2})
    assert st in (404, 503) and "error" in obj, (st, obj)


@test
def dp_ranks_on_a_pair_half_is_refused_at_start():
    path = config([{"url": "http://127.0.0.1:9", "dp_ranks": 2, "role": "prefill", "engine": "sglang"},
                   {"url": "http://127.0.0.1:10", "role": "decode", "engine": "sglang"}])
    r = subprocess.run([binary("infergate"), "--config", path, "--check-config"], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 2 and "backends[0].dp_ranks: 2 with role \"prefill\"" in r.stderr, (r.returncode, r.stderr)


if __name__ == "__main__":
    run()
