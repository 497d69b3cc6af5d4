"""Several gateways as one, through a Redis of the test's own (Debian's redis-server on a loopback
port, no persistence, stopped after): a bad cluster section stops the gateway at start naming the
key; gateways see each other, a name is held by one live gateway at a time, one that stops or is
killed leaves; keys' limits, weights and max_inflight hold for the fleet; a response stored
through one gateway is followed up and read through another;
Redis going away leaves each gateway serving alone, and its return joins them again."""

import json
import os
import signal
import subprocess
import time

from harness import (Dir, Sampler, binary, chat_body, cluster_members, http, http_json, metric, raw_post, run,
                     sim_waiting, start_clustered, start_gateway, start_redis, start_sim, stateful_backend, test,
                     upload, wait_cluster, wait_until)


def cluster(gw):
    return http_json("GET", gw.url + "/health/backends")[2]["cluster"]


def healthy(gw, n):
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == n, timeout=10,
               what=f"{n} healthy backends")


@test
def a_bad_cluster_section_stops_the_gateway_at_start_naming_the_key():
    cases = [
        (["--cluster-redis", "http://127.0.0.1:6379"], "cluster.redis_url: 'http://127.0.0.1:6379' is not a redis:// URL"),
        (["--cluster-redis", "redis://127.0.0.1:6379", "--cluster-redis-tls-ca-file", "/etc/hostname"],
         "cluster.redis_tls_ca_file: given with a redis:// URL"),
        (["--cluster-redis", "redis://127.0.0.1:99999"], "cluster.redis_url: 'redis://127.0.0.1:99999': the port"),
        (["--cluster-redis", "redis://127.0.0.1/x"], "the database after '/' must be a number"),
        (["--cluster-redis", "redis://127.0.0.1", "--cluster-sync-ms", "0"], "--cluster-sync-ms: 0 is out of range"),
        (["--cluster-redis", "redis://127.0.0.1", "--cluster-lease-s", "0"], "--cluster-lease-s: 0 is out of range"),
        (["--cluster-redis", "redis://127.0.0.1", "--cluster-name", "a b"], "cluster.name: 'a b' must be"),
        (["--cluster-redis", "redis://no-such-host.invalid"], "cluster.redis_url: cannot resolve the host"),
    ]
    for args, want in cases:
        t0 = time.monotonic()
        r = subprocess.run([binary("infergate"), "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:9",
                            *args], capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and want in r.stderr, (args, r.returncode, r.stderr)
        assert time.monotonic() - t0 < 5, args
    # the same checks from the file, naming the file's keys, and --check-config says so too
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"backends": ["http://127.0.0.1:9"],
                   "cluster": {"redis_url": "redis:/x", "name": "gw-a", "sync_ms": 0, "lease_s": "ten"}}, f)
    r = subprocess.run([binary("infergate"), "--check-config", "--config", f.name], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 2 and "cluster.sync_ms" in r.stderr and "cluster.lease_s" in r.stderr, r.stderr


@test
def gateways_see_each_other_and_a_name_is_held_by_one_at_a_time():
    redis = start_redis()
    sim = start_sim()
    a = start_clustered(redis, "gw-a", [sim])
    b = start_clustered(redis, "gw-b", [sim])
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=10,
               what="both see both")
    c = cluster(a)
    assert c["redis"] == "up" and c["name"] == "gw-a" and c["redis_url"] == redis.redis_url + "/0", c
    m = http("GET", a.url + "/metrics")[2]
    assert metric(m, "infergate_cluster_members") == 2 and metric(m, "infergate_cluster_redis_up") == 1, m
    # a second gateway configured alike is refused, naming the key
    r = subprocess.run([binary("infergate"), "--listen", "127.0.0.1:0", "--backend", sim.url,
                        "--cluster-redis", redis.redis_url, "--cluster-name", "gw-b"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "cluster.name: 'gw-b' is held by a live gateway" in r.stderr, r.stderr
    # one that stops leaves at once; under its name again, it is welcome
    b.stop()
    wait_until(lambda: cluster_members(a) == ["gw-a"], timeout=3, what="gw-b gone")
    b = start_clustered(redis, "gw-b", [sim])
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"], timeout=10, what="gw-b back")
    # one killed is dropped after three periods, and its name is free again after them
    b.stop(signal.SIGKILL)
    t0 = time.monotonic()
    wait_until(lambda: cluster_members(a) == ["gw-a"], timeout=5, what="the killed one dropped")
    print(f"# a SIGKILLed gateway left the others' view after {time.monotonic() - t0:.2f} s (sync 100 ms)")
    b = start_clustered(redis, "gw-b", [sim])
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"], timeout=10, what="gw-b back after a kill")
    assert "cluster: joined as 'gw-b'" in b.read_log(), b.read_log()


@test
def a_redis_with_a_password_and_a_database():
    redis = start_redis("--requirepass", "s3cret")
    sim = start_sim()
    url = f"redis://:s3cret@127.0.0.1:{redis.port}/3"
    a = start_gateway([sim], "--cluster-redis", url, "--cluster-name", "gw-a")
    wait_until(lambda: cluster_members(a) == ["gw-a"], timeout=10, what="joined")
    c = cluster(a)
    assert c["redis_url"] == f"redis://***@127.0.0.1:{redis.port}/3" and "s3cret" not in a.read_log(), c
    out = subprocess.run(["redis-cli", "-p", str(redis.port), "-a", "s3cret", "-n", "3", "EXISTS", "infergate:gw:gw-a"],
                         capture_output=True, text=True, timeout=5).stdout
    assert out.strip() == "1", out      # in database 3
    r = subprocess.run([binary("infergate"), "--listen", "127.0.0.1:0", "--backend", sim.url, "--cluster-redis",
                        f"redis://:wrong@127.0.0.1:{redis.port}", "--cluster-name", "gw-b"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "cluster.redis_url: Redis at" in r.stderr and "refused the password" in r.stderr, r.stderr
    assert "wrong" not in r.stderr, r.stderr


@test
def a_response_stored_through_one_gateway_is_followed_up_through_another():
    redis = start_redis()
    fbs = [stateful_backend() for _ in range(7)]
    a = start_clustered(redis, "gw-a", fbs)
    b = start_clustered(redis, "gw-b", fbs)
    healthy(a, 7)
    healthy(b, 7)
    wait_until(lambda: cluster_members(b) == ["gw-a", "gw-b"], timeout=10, what="both joined")
    st, hdrs, raw = http("POST", a.url + "/v1/responses", {"model": "m", "input": "first"})
    assert st == 200, raw
    holder, rid = hdrs["x-infergate-backend"], json.loads(raw)["id"]
    wait_until(lambda: cluster(b)["responses_learned"] >= 1, timeout=5, what="gw-b told")
    # seven backends, least-loaded: without the shared index most follow-ups would miss
    for i in range(14):
        st, hdrs, raw = http("POST", b.url + "/v1/responses", {"model": "m", "input": f"more {i}",
                                                               "previous_response_id": rid})
        assert st == 200 and hdrs["x-infergate-backend"] == holder, (i, st, raw)
    st, hdrs, raw = http("GET", f"{b.url}/v1/responses/{rid}")
    assert st == 200 and hdrs["x-infergate-backend"] == holder and json.loads(raw)["id"] == rid, raw
    assert cluster(a)["responses_shared"] >= 1 and cluster(b)["responses_learned"] >= 1
    # Redis keeps it for the response's life, under its id
    out = subprocess.run(["redis-cli", "-p", str(redis.port), "PTTL", f"infergate:resp:{rid}"],
                         capture_output=True, text=True, timeout=5).stdout
    assert int(out) > 23 * 3600 * 1000, out


@test
def without_redis_each_gateway_serves_alone_and_joins_again_when_it_is_back():
    redis = start_redis()
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    a = start_clustered(redis, "gw-a", [sim])
    b = start_clustered(redis, "gw-b", [sim])
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"], timeout=10, what="both joined")
    port = redis.port
    redis.stop(signal.SIGKILL)
    wait_until(lambda: not cluster(a)["joined"] and cluster(a)["redis"] != "up", timeout=5, what="gw-a alone")
    # traffic goes on, nothing waits for Redis
    for gw in (a, b):
        t0 = time.monotonic()
        for i in range(20):
            st, _, _ = http("POST", gw.url + "/v1/chat/completions",
                            {"model": "sim-model", "messages": [{"role": "user", "content": f"q{i}"}]})
            assert st == 200, st
        assert time.monotonic() - t0 < 5
    m = http("GET", a.url + "/metrics")[2]
    assert metric(m, "infergate_cluster_joined") == 0 and metric(m, "infergate_cluster_redis_up") == 0, m
    assert "cluster: serving alone (Redis:" in a.read_log(), a.read_log()
    # Redis back on its port: shared again within a few periods (reconnects back off to 5 s)
    redis = start_redis(port=port)
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=15,
               what="both joined again")
    assert a.read_log().count("cluster: serving alone") == 1, a.read_log()   # logged once per change
    assert a.read_log().count("cluster: joined as 'gw-a'") == 2, a.read_log()


def keys(path, entries):
    import hashlib
    with open(path, "w") as f:
        json.dump({"keys": [dict(name=e["name"], sha256=hashlib.sha256(e["key"].encode()).hexdigest(),
                                 **{k: v for k, v in e.items() if k not in ("name", "key")}) for e in entries]}, f)


@test
def a_keys_limits_hold_across_gateways_and_split_when_redis_is_gone():
    import tempfile
    redis = start_redis()
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")
    path = tempfile.mkdtemp(prefix="ig-keys-") + "/keys.json"
    keys(path, [{"name": "shared", "key": "k-shared", "rpm": 60}, {"name": "later", "key": "k-later", "rpm": 60},
                {"name": "busy", "key": "k-busy", "rpm": 6000}] +
         [{"name": f"many{i}", "key": f"k-many{i}", "rpm": 600} for i in range(40)])
    a = start_clustered(redis, "gw-a", [sim], "--api-keys-file", path)
    b = start_clustered(redis, "gw-b", [sim], "--api-keys-file", path)
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=10,
               what="both joined")
    auth = {"Authorization": "Bearer k-shared"}
    body = {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    # 100 requests alternating between the two, within seconds: the key's 60, not 60 each
    t0 = time.monotonic()
    got = {200: 0, 429: 0}
    remaining = []
    for i in range(100):
        st, h, _ = http("POST", (a if i % 2 == 0 else b).url + "/v1/chat/completions", body, headers=auth)
        got[st] = got.get(st, 0) + 1
        if st == 200:
            remaining.append(int(h["x-ratelimit-remaining-requests"]))
    elapsed = time.monotonic() - t0
    print(f"# rpm 60 over two gateways, 100 alternating in {elapsed:.1f} s: {got[200]} answered, {got[429]} x 429")
    assert got[200] + got[429] == 100, got
    assert 55 <= got[200] <= 60 + elapsed + 2, (got, elapsed)
    assert min(remaining) <= 2, remaining           # the fleet's remaining, not one gateway's
    # a key used through one gateway only: its share moves there (and the other keeps a little)
    busy = {"Authorization": "Bearer k-busy"}
    def share(gw):
        ks = [k for k in http_json("GET", gw.url + "/health/backends")[2]["keys"] if k["name"] == "busy"]
        return ks[0]["limit_share"]["requests"] if ks else None
    t_end = time.monotonic() + 3
    while time.monotonic() < t_end:
        assert http("POST", a.url + "/v1/chat/completions", body, headers=busy)[0] == 200
        time.sleep(0.01)
    sa, sb = share(a), share(b)
    print(f"# a key used through gw-a only for 3 s: shares of its rpm gw-a {sa:.3f}, gw-b {sb:.3f}")
    assert sa > 0.85 and sb < 0.15 and sa + sb <= 1.0 + 1e-6, (sa, sb)
    # many keys active at once: each key sync carries them all (both gateways: B syncs them as
    # active elsewhere), and the shares follow
    for i in range(40):
        assert http("POST", a.url + "/v1/chat/completions", body, headers={"Authorization": f"Bearer k-many{i}"})[0] == 200
    wait_until(lambda: cluster(a)["keys_synced"] >= 40 and cluster(b)["keys_synced"] >= 40, timeout=5,
               what="40 keys in the key syncs")
    assert cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"]
    # Redis gone: each goes on alone with its part of a limit (half: two were live), so another
    # key's burst of 60 through one gateway gets 30, not the 60 a lone gateway would give
    redis.stop(signal.SIGKILL)
    wait_until(lambda: not cluster(a)["joined"], timeout=5, what="gw-a alone")
    later = {"Authorization": "Bearer k-later"}
    n = sum(1 for i in range(60) if http("POST", a.url + "/v1/chat/completions", body, headers=later)[0] == 200)
    print(f"# Redis gone: a burst of 60 at rpm 60 through one of two gateways: {n} answered")
    assert 30 <= n <= 32, n


@test
def a_gateway_starts_alone_when_redis_is_not_there_and_joins_when_it_comes():
    # a port below the ephemeral range: the gateway's repeated connects to a port nobody listens
    # on could otherwise self-connect (TCP simultaneous open) and keep Redis from binding it
    import random
    import socket
    while True:
        port = random.randint(20000, 30000)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
                break
            except OSError:
                continue
    sim = start_sim()
    t0 = time.monotonic()
    a = start_gateway([sim], "--cluster-redis", f"redis://127.0.0.1:{port}", "--cluster-name", "gw-a")
    assert time.monotonic() - t0 < 5
    wait_until(lambda: "cluster: Redis at redis://127.0.0.1:%d/0 does not answer" % port in a.read_log(), timeout=5,
               what="the log line")
    st, _, _ = http("POST", a.url + "/v1/chat/completions",
                    {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]})
    assert st == 200
    assert cluster(a)["joined"] is False
    start_redis(port=port)
    wait_until(lambda: cluster_members(a) == ["gw-a"], timeout=15, what="joined")


@test
def low_work_through_one_gateway_leaves_the_slots_to_normal_work_waiting_at_another():
    # One backend of 4 slots (stated in /v1/loads), 0.5 s a request. Gateway A gets 40 requests of
    # class low (a bulk run); then gateway B gets 4 of class normal. Alone, B would send them to
    # the backend at once (its own limit is 4, it has none there) and they would wait in the
    # backend's queue behind A's; with the cluster, B counts A's 4 on the backend and holds its
    # own, A sees B's waiting and starts no more low work, so B's go next.
    import threading
    redis = start_redis()
    sim = start_sim("--max-running", "4", "--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "10")
    a = start_clustered(redis, "gw-a", [sim])
    b = start_clustered(redis, "gw-b", [sim])
    for gw in (a, b):
        wait_until(lambda: http_json("GET", gw.url + "/health/backends")[2]["backends"][0].get("limit_from")
                   == "reported", timeout=10, what="the stated 4")
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=10,
               what="both joined")
    done, lock = [], threading.Lock()
    def call(gw, tag, klass):
        st, _, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": tag},
                        headers={"X-Infergate-Priority": klass}, timeout=120)
        with lock:
            done.append((tag, st, time.monotonic()))
    lows = [threading.Thread(target=call, args=(a, f"low{i}", "low")) for i in range(40)]
    for t in lows:
        t.start()
    wait_until(lambda: http_json("GET", a.url + "/health/backends")[2]["models"]["sim-model"]["queue_depth"] >= 30,
               timeout=10, what="A's low work queued")
    wait_until(lambda: http_json("GET", b.url + "/health/backends")[2]["backends"][0].get("others_inflight") == 4,
               timeout=5, what="B sees A's 4 on the backend")
    normals = [threading.Thread(target=call, args=(b, f"normal{i}", "normal")) for i in range(4)]
    with Sampler(lambda: sim_waiting(sim)) as sampled:
        for t in normals:
            t.start()
        for t in normals + lows:
            t.join()
    (waiting,) = sampled.values
    assert all(st == 200 for _, st, _ in done) and len(done) == 44, done
    order = [tag for tag, _, _ in sorted(done, key=lambda x: x[2])]
    last_normal = max(order.index(f"normal{i}") for i in range(4))
    print(f"# 40 low through gw-a, then 4 normal through gw-b: the last normal ended {last_normal + 1}th of 44; "
          f"most waiting at the backend {max(waiting)}")
    # B's four went in the next round or the one after (A's 4 running then, at most 4 more low that
    # were placed before A saw B's), not after A's 36 queued low
    assert last_normal < 16, order
    assert max(waiting) <= 1, waiting   # neither sends past what the backend runs


@test
def a_headroom_learned_at_one_gateway_holds_low_work_back_at_another():
    # Interactive requests through gw-a, a bulk run at low through gw-b, one backend of four
    # slots (max_inflight on both): gw-b keeps gw-a's learned headroom free of its low work.
    redis = start_redis()
    sim = start_sim("--tokens-per-second", "20", "--ttft-ms", "0")
    d = Dir()
    with open(d("c.json"), "w") as f:
        json.dump({"backends": [{"url": sim.url, "max_inflight": 4}]}, f)
    a = start_clustered(redis, "gw-a", [], config=d("c.json"))
    b = start_clustered(redis, "gw-b", [], config=d("c.json"))
    wait_cluster((a, b), ["gw-a", "gw-b"])
    wait_until(lambda: http_json("GET", b.url + "/v1/models")[2]["data"], timeout=10, what="models")
    socks = [raw_post(b.port, chat_body(f"bulk{i}", max_tokens=20), [("X-Infergate-Priority", "low")])
             for i in range(60)]

    def low(gw):
        return http_json("GET", gw.url + "/health/backends")[2]["gateway"]["classes"]["low"]

    def headroom(gw):
        return http_json("GET", gw.url + "/health/backends")[2]["models"]["sim-model"]["headroom"]
    try:
        wait_until(lambda: low(b)["inflight"] == 4, timeout=10, what="gw-b's low work on all four slots")
        for i in range(4):   # interactive traffic through gw-a: the first waits, then one slot is kept
            st, _, _ = http_json("POST", a.url + "/v1/chat/completions", chat_body(f"chat {i}", max_tokens=2))
            assert st == 200, st
        assert headroom(a)["slots"] >= 1, headroom(a)
        wait_until(lambda: headroom(b)["others_slots"] >= 1, timeout=5, what="gw-b told")
        wait_until(lambda: low(b)["inflight"] == 3, timeout=10, what="gw-b leaving a slot free")
        assert low(b)["waiting"] > 0, low(b)
        st, hdrs, _ = http_json("POST", a.url + "/v1/chat/completions", chat_body("at once", max_tokens=2))
        assert st == 200 and "x-infergate-queued-ms" not in hdrs, hdrs
    finally:
        for s in socks:
            s.close()


@test
def fair_shares_and_a_keys_max_inflight_hold_across_gateways():
    # One backend of 8 slots (stated), 0.5 s a request. Key "light" (weight 1) sends 40 through
    # gateway A, key "heavy" (weight 3) 40 through gateway B, at once. Each gateway alone would
    # take half the slots (each sees one key); across the fleet the split follows the weights:
    # 2 slots for light, 6 for heavy.
    import tempfile
    import threading
    redis = start_redis()
    sim = start_sim("--max-running", "8", "--tokens-per-second", "20", "--ttft-ms", "0", "--output-tokens", "10")
    path = tempfile.mkdtemp(prefix="ig-keys-") + "/keys.json"
    keys(path, [{"name": "light", "key": "k-light", "weight": 1}, {"name": "heavy", "key": "k-heavy", "weight": 3},
                {"name": "capped", "key": "k-capped", "max_inflight": 4}])
    a = start_clustered(redis, "gw-a", [sim], "--api-keys-file", path)
    b = start_clustered(redis, "gw-b", [sim], "--api-keys-file", path)
    for gw in (a, b):
        wait_until(lambda: http_json("GET", gw.url + "/health/backends")[2]["backends"][0].get("limit_from")
                   == "reported", timeout=10, what="the stated 8")
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=10,
               what="both joined")
    done, lock = [], threading.Lock()
    def call(gw, key, tag):
        st, _, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": tag},
                        headers={"Authorization": "Bearer " + key}, timeout=120)
        with lock:
            done.append((tag, st))
    ts = [threading.Thread(target=call, args=(a, "k-light", f"light{i}")) for i in range(40)] + \
         [threading.Thread(target=call, args=(b, "k-heavy", f"heavy{i}")) for i in range(40)]
    with Sampler(lambda: sim_waiting(sim)) as sampled:
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert len(done) == 80 and all(st == 200 for _, st in done), done
    order = [tag for tag, _ in done]
    heavy30 = [i for i, tag in enumerate(order) if tag.startswith("heavy")][29]
    light = sum(1 for tag in order[:heavy30] if tag.startswith("light"))
    print(f"# weights 1 and 3 through two gateways, 8 slots: {light} light ended before the 30th heavy "
          f"(by weight: 10; an even split: 30); most waiting at the backend {max(sampled.values[0])}")
    assert 3 <= light <= 18, order
    # none waiting at the backend but for a moment (a sync that a slow build, TSan's, answers past
    # the live window leaves each gateway alone with its even part for a while)
    over = sum(1 for w in sampled.values[0] if w > 1)
    assert over <= len(sampled.values[0]) // 10, sampled.values[0]
    # A key's max_inflight (4) over both: 20 requests through each at once, the backend with room for
    # 8; never more than 4 of the key's running, counted at the backend, and both gateways serve.
    done.clear()
    def running():
        return http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"]
    ts = [threading.Thread(target=call, args=(gw, "k-capped", f"{name}{i}"))
          for i in range(20) for gw, name in ((a, "a"), (b, "b"))]
    with Sampler(running, lambda: [k.get("cluster_inflight_cap") for gw in (a, b)
                                   for k in http_json("GET", gw.url + "/health/backends")[2]["keys"]
                                   if k["name"] == "capped"], every=0.01) as sampled:
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    run_counts, caps = sampled.values
    assert len(done) == 40 and all(st == 200 for _, st in done), done
    print(f"# max_inflight 4 over two gateways, 20 requests through each: most running at the backend "
          f"{max(run_counts)} ({sum(1 for r in run_counts if r > 4)} of {len(run_counts)} samples above 4); "
          f"caps seen {sorted(set(str(c) for c in caps))[:8]}")
    assert max(run_counts) >= 3, run_counts   # the key ran, at its cap
    assert max(run_counts) <= 4, run_counts


def start_haproxy(gws):
    """HAProxy (Debian's) in front of the gateways, roundrobin: consecutive requests of one client
    reach different gateways."""
    import os
    import shutil
    import tempfile
    from harness import free_port, start
    exe = shutil.which("haproxy") or "/usr/sbin/haproxy"
    if not os.path.exists(exe):
        raise FileNotFoundError("haproxy is not installed (apt-get install -y haproxy)")
    port = free_port()
    d = tempfile.mkdtemp(prefix="ig-haproxy-")
    with open(os.path.join(d, "haproxy.cfg"), "w") as f:
        f.write("defaults\n  mode http\n  timeout connect 2s\n  timeout client 60s\n  timeout server 60s\n"
                f"frontend fe\n  bind 127.0.0.1:{port}\n  default_backend be\n"
                "backend be\n  balance roundrobin\n" +
                "".join(f"  server g{i} 127.0.0.1:{g.port}\n" for i, g in enumerate(gws)))
    return start([exe, "-db", "-f", os.path.join(d, "haproxy.cfg")], port=port)


@test
def the_official_client_through_haproxy_in_front_of_two_gateways():
    from harness import ensure_openai, run_client, sim_requests
    import tempfile
    ensure_openai()    # before any process starts: npm may take a while the first time
    redis = start_redis()
    fbs = [stateful_backend() for _ in range(7)]
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")
    path = tempfile.mkdtemp(prefix="ig-keys-") + "/keys.json"
    keys(path, [{"name": "looper", "key": "k-loop", "rpm": 60}, {"name": "writer", "key": "k-resp"}])
    a = start_clustered(redis, "gw-a", fbs + [sim], "--api-keys-file", path, "--model-alias", "m2=sim-model")
    b = start_clustered(redis, "gw-b", fbs + [sim], "--api-keys-file", path, "--model-alias", "m2=sim-model")
    for gw in (a, b):
        healthy(gw, 8)
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=10,
               what="both joined")
    hp = start_haproxy([a, b])
    # Responses: create, five follow-ups, retrieve, delete; one request to each gateway in turn, so
    # every other call reaches a gateway that did not see the response made
    out = run_client(hp, "m", "responses", "5", env={"IG_API_KEY": "k-resp"})
    holder = out["plain"]["backend"]
    assert out["plain"]["status"] == "completed" and [f["backend"] for f in out["follow"]] == [holder] * 5, out
    assert out["stored"]["backend"] == holder and out["stored"]["gone"]["status"] == 404, out
    assert cluster(a)["responses_learned"] + cluster(b)["responses_learned"] >= 1
    # a key at rpm 60 over both: 70 chat completions through HAProxy all complete with the
    # client's default retries, and the fleet admitted no more than the key's limit allows
    t0 = time.monotonic()
    before = sim_requests(sim)
    out = run_client(hp, "m2", "loop", "70", env={"IG_API_KEY": "k-loop"}, timeout=180)
    elapsed = time.monotonic() - t0
    print(f"# official client through HAProxy and two gateways, 70 at rpm 60: {out} in {elapsed:.1f} s")
    assert out["completed"] == 70 and out["statuses"].get("200") == 70, out
    assert out["statuses"].get("429", 0) >= 1, out    # 429 then served (the retries wait as told)
    assert sim_requests(sim) - before == 70


# ---- files and batches in a data_dir every gateway mounts

def redis_cli(redis, *args):
    return subprocess.run(["redis-cli", "-p", str(redis.port), *args], capture_output=True, text=True,
                          timeout=10).stdout.strip()


def batch_gateway(redis, name, d, sims, *extra, port=None):
    return start_gateway(sims, "--cluster-redis", redis.redis_url, "--cluster-name", name, "--cluster-sync-ms", "100",
                         "--cluster-lease-s", "2", "--data-dir", d("data"), *extra, port=port)


def batch_line(i, **body):
    b = {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}], **body}
    return {"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": b}


def make_batch(d, gw, n, **body):
    with open(d("c.jsonl"), "w") as f:
        for i in range(n):
            f.write(json.dumps(batch_line(i, **body)) + "\n")
    st, f = upload(gw, open(d("c.jsonl"), "rb").read())
    assert st == 200, f
    st, _, b = http_json("POST", gw.url + "/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/chat/completions",
                                                          "completion_window": "24h"})
    assert st == 200 and b["status"] == "validating", b
    return f["id"], b["id"]


def batch(gw, bid):
    st, _, b = http_json("GET", f"{gw.url}/v1/batches/{bid}")
    return b if st == 200 else None


def lines_of(gw, file_id):
    st, _, raw = http("GET", f"{gw.url}/v1/files/{file_id}/content")
    assert st == 200, (st, raw[:200])
    return [json.loads(x)["custom_id"] for x in raw.decode().splitlines()]


def once(n, *lists):
    seen = [c for lst in lists for c in lst]
    dup = sorted({c for c in seen if seen.count(c) > 1})
    assert not dup, dup[:10]
    assert set(seen) == {f"r{i}" for i in range(n)}, (len(set(seen)), n)


def holder(gws, bid):
    """The gateway that runs the batch now (its lease and fence), or None."""
    for g in gws:
        b = batch(g, bid)
        if b and b["infergate"]["run_here"]["held"]:
            return g
    return None


SLOW = ("--model", "m", "--tokens-per-second", "0", "--ttft-ms", "150", "--output-tokens", "4", "--max-running", "16")


@test
def files_and_a_batch_made_through_one_gateway_are_read_and_cancelled_through_another():
    d = Dir()
    redis = start_redis()
    sim = start_sim(*SLOW)
    a = batch_gateway(redis, "gw-a", d, [sim])
    b = batch_gateway(redis, "gw-b", d, [sim])
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=10,
               what="both see both")
    # a file uploaded through A is listed, read and deleted through B
    st, f = upload(a, b'{"custom_id": "x"}\n', filename="one.jsonl")
    assert st == 200, f
    wait_until(lambda: http_json("GET", f"{b.url}/v1/files/{f['id']}")[0] == 200, timeout=10, what="B knows A's file")
    assert http_json("GET", f"{b.url}/v1/files/{f['id']}")[2] == f
    assert http("GET", f"{b.url}/v1/files/{f['id']}/content")[2] == b'{"custom_id": "x"}\n'
    assert f["id"] in [x["id"] for x in http_json("GET", b.url + "/v1/files")[2]["data"]]
    st, _, obj = http_json("DELETE", f"{b.url}/v1/files/{f['id']}")
    assert st == 200 and obj["deleted"] is True, obj
    wait_until(lambda: http_json("GET", f"{a.url}/v1/files/{f['id']}")[0] == 404, timeout=10, what="A forgets it")
    # a batch made through A: run by A, seen through B with its progress
    n = 1200
    fid, bid = make_batch(d, a, n)
    wait_until(lambda: batch(b, bid) is not None, timeout=10, what="B knows A's batch")
    wait_until(lambda: batch(a, bid)["infergate"]["run_here"]["held"], timeout=10, what="A runs it")
    assert batch(b, bid)["infergate"]["run_here"]["held"] is False
    assert bid in [x["id"] for x in http_json("GET", b.url + "/v1/batches")[2]["data"]]
    wait_until(lambda: batch(b, bid)["request_counts"]["completed"] >= 100, timeout=60, what="progress seen through B")
    # cancelled through B: A stops it; both say cancelled; the partial output read through B
    st, _, got = http_json("POST", f"{b.url}/v1/batches/{bid}/cancel")
    assert st == 200 and got["status"] == "cancelling", got
    wait_until(lambda: batch(a, bid)["status"] == "cancelled" and batch(b, bid)["status"] == "cancelled",
               timeout=30, what="cancelled on both")
    assert "cancelled through another gateway" in a.read_log()
    done = batch(b, bid)
    assert done == {**batch(a, bid), "infergate": done["infergate"]}, (done, batch(a, bid))
    k = done["request_counts"]["completed"]
    assert 100 <= k < n, done
    out = lines_of(b, done["output_file_id"])
    assert len(out) == k and len(set(out)) == k, (len(out), k)
    # a small one made through B runs to completed there, read through A
    fid2, bid2 = make_batch(d, b, 50)
    wait_until(lambda: (batch(a, bid2) or {}).get("status") == "completed", timeout=60, what="completed, seen by A")
    once(50, lines_of(a, batch(a, bid2)["output_file_id"]))
    assert "run here from now" in b.read_log()
    # a third gateway cut off from Redis (it hears no announcement) still finds them in data_dir
    # when asked for them by id, and says 404 for what is not there
    from harness import free_port
    c = start_gateway([sim], "--cluster-redis", f"redis://127.0.0.1:{free_port()}", "--cluster-name", "gw-c",
                      "--data-dir", d("data"))
    st, f2 = upload(a, b'{"custom_id": "y"}\n', filename="two.jsonl")
    assert http_json("GET", f"{c.url}/v1/files/{f2['id']}")[2] == f2
    assert http("GET", f"{c.url}/v1/files/{f2['id']}/content")[2] == b'{"custom_id": "y"}\n'
    assert batch(c, bid2) == {**batch(a, bid2), "infergate": batch(c, bid2)["infergate"]}
    _, bid3 = make_batch(d, a, 5)    # made after C started: C has not read it at its start
    wait_until(lambda: batch(a, bid3)["status"] == "completed", timeout=30, what="the third completed")
    got = batch(c, bid3)
    assert got is not None and got["status"] == "completed" and got["request_counts"]["completed"] == 5, got
    assert got["infergate"]["run_here"]["held"] is False
    assert http_json("GET", f"{c.url}/v1/files/file-{'0' * 24}")[0] == 404
    assert http_json("GET", f"{c.url}/v1/batches/batch_{'0' * 24}")[0] == 404
    assert http_json("GET", f"{c.url}/v1/batches/batch_..%2F..%2Fx")[0] == 404


@test
def the_gateway_running_a_batch_killed_three_times_and_another_finishes_every_line_once():
    d = Dir()
    redis = start_redis()
    sims = [start_sim(*SLOW) for _ in range(2)]
    gws = {"gw-a": batch_gateway(redis, "gw-a", d, sims), "gw-b": batch_gateway(redis, "gw-b", d, sims)}
    n = 3000
    _, bid = make_batch(d, gws["gw-a"], n)
    for frac in (0.1, 0.4, 0.7):       # three different moments
        wait_until(lambda: holder(gws.values(), bid) is not None and
                   (batch(holder(gws.values(), bid), bid) or {}).get("request_counts", {}).get("completed", 0) >= frac * n,
                   timeout=90, interval=0.05, what=f"{frac:.0%} done")
        h = holder(gws.values(), bid)
        name = next(k for k, g in gws.items() if g is h)
        port = h.port
        h.send_signal(signal.SIGKILL)
        h.wait()
        other = next(g for k, g in gws.items() if k != name)
        # the other takes it over once the lease lapses, from the journal
        wait_until(lambda: batch(other, bid)["infergate"]["run_here"]["held"], timeout=15, what="taken over")
        assert "run here from now" in other.read_log()
        gws[name] = batch_gateway(redis, name, d, sims, port=port)
    b = None
    def finished():
        nonlocal b
        b = batch(gws["gw-a"], bid)
        return b["status"] == "completed"
    wait_until(finished, timeout=180, interval=0.2, what="completed")
    assert b["request_counts"] == {"total": n, "completed": n, "failed": 0}, b
    once(n, lines_of(gws["gw-b"], b["output_file_id"]))
    # the fencing tokens grew with each take-over: four holders in all
    assert int(redis_cli(redis, "GET", "infergate:bfence")) >= 4


@test
def a_gateway_paused_past_its_lease_writes_nothing_more():
    d = Dir()
    redis = start_redis()
    sims = [start_sim(*SLOW) for _ in range(2)]
    a = batch_gateway(redis, "gw-a", d, sims)
    b = batch_gateway(redis, "gw-b", d, sims)
    n = 2000
    _, bid = make_batch(d, a, n)
    wait_until(lambda: batch(a, bid)["request_counts"]["completed"] >= 300, timeout=60, what="300 done")
    os.killpg(a.pid, signal.SIGSTOP)   # A holds its lines in flight, its lease lapses
    try:
        wait_until(lambda: batch(b, bid)["infergate"]["run_here"]["held"], timeout=15, what="B takes it over")
        fence_b = batch(b, bid)["infergate"]["run_here"]["fencing_token"]
        wait_until(lambda: batch(b, bid)["request_counts"]["completed"] >= 600, timeout=60, what="B goes on")
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    # A's answers arrive now: its next append finds B's token in the fence, and it stops
    wait_until(lambda: "run here no more" in a.read_log(), timeout=15, what="A lets go")
    assert batch(a, bid)["infergate"]["run_here"]["held"] is False
    done = None
    def finished():
        nonlocal done
        done = batch(b, bid)
        return done["status"] == "completed"
    wait_until(finished, timeout=120, interval=0.2, what="completed")
    assert done["infergate"]["run_here"]["fencing_token"] == fence_b
    once(n, lines_of(a, done["output_file_id"]))



@test
def a_gateway_stopped_with_sigterm_hands_its_batch_over_at_once():
    # a lease of 60 s: a take-over that waited for it to lapse would not come within the test's 10 s
    d = Dir()
    redis = start_redis()
    sims = [start_sim(*SLOW) for _ in range(2)]
    a = batch_gateway(redis, "gw-a", d, sims, "--cluster-lease-s", "60")
    b = batch_gateway(redis, "gw-b", d, sims, "--cluster-lease-s", "60")
    n = 1500
    _, bid = make_batch(d, a, n)
    wait_until(lambda: batch(a, bid)["request_counts"]["completed"] >= 200, timeout=60, what="200 done")
    m = http("GET", a.url + "/metrics")[2]
    assert metric(m, 'infergate_batch_leases_total{event="taken"}') == 1, m
    lease = redis_cli(redis, "GET", f"infergate:blease:{bid}")
    assert lease.startswith("gw-a ") and lease.endswith(" 1"), lease      # NAME TOKEN FENCE
    size = int(redis_cli(redis, "MEMORY", "USAGE", f"infergate:blease:{bid}"))
    print(f"# Redis: a batch's lease takes {size} bytes")
    a.stop()
    wait_until(lambda: batch(b, bid)["infergate"]["run_here"]["held"], timeout=10, what="B takes it at once")
    assert batch(b, bid)["infergate"]["run_here"]["fencing_token"] == 2
    wait_until(lambda: batch(b, bid)["status"] == "completed", timeout=120, interval=0.2, what="completed")
    done = batch(b, bid)
    assert done["request_counts"] == {"total": n, "completed": n, "failed": 0}, done
    once(n, lines_of(b, done["output_file_id"]))


@test
def the_official_client_runs_files_and_a_batch_through_haproxy_in_front_of_two_gateways():
    # roundrobin: each of the client's calls (upload, create, every retrieve, list, content,
    # delete) reaches the other gateway than the one before
    from harness import ensure_openai, run_client
    ensure_openai()
    d = Dir()
    redis = start_redis()
    sims = [start_sim("--model", "m", "--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")
            for _ in range(2)]
    a = batch_gateway(redis, "gw-a", d, sims)
    b = batch_gateway(redis, "gw-b", d, sims)
    wait_until(lambda: cluster_members(a) == ["gw-a", "gw-b"] and cluster_members(b) == ["gw-a", "gw-b"], timeout=10,
               what="both joined")
    hp = start_haproxy([a, b])
    n = 2000
    with open(d("c.jsonl"), "w") as f:
        for i in range(n):
            f.write(json.dumps(batch_line(i)) + "\n")
    out = run_client(hp, "m", "files", d("c.jsonl"))
    assert out["same"] and out["content_equal"] and out["gone"] == 404, out
    out = run_client(hp, "m", "batch", d("c.jsonl"), d("out.jsonl"), timeout=300)
    got = out["batch"]
    assert got["status"] == "completed" and got["request_counts"] == {"total": n, "completed": n, "failed": 0}, out
    assert got["id"] in out["listed"], out
    once(n, [json.loads(x)["custom_id"] for x in open(d("out.jsonl"))])
    # it ran on one gateway; the other answered every other call of the client about it
    runs = [g for g in (a, b) if "run here from now" in g.read_log()]
    assert len(runs) == 1, [g.read_log()[-2000:] for g in (a, b)]

if __name__ == "__main__":
    run()
