#!/usr/bin/env python3
"""The gateway subscribed to an engine's KV events (src/gateway/fleet/kvevents.c):
tests/tools/kvpub stands in for vLLM's publisher (a PUB socket and a replay
ROUTER on free loopback ports, batches scripted on its stdin), a fake HTTP
backend for the engine's API; what a user sees is /health/backends'
"kv_events" of that backend (the exact index's blocks, the sequence's
counters, its state) and /metrics. Also: a bad kv_events setting stops the
gateway at start, naming the key and the value."""
import json
import signal
import subprocess
import tempfile

from harness import (FakeBackend, binary, http, http_json, run, start, start_gateway, test, wait_until,
                     free_port)

STALE_MS = 600


class KvPub:
    """tests/tools/kvpub on loopback: .ep and .replay are its bound endpoints."""

    def __init__(self, replay=True, bind="tcp://127.0.0.1:*"):
        self.p = start([binary("tests/tools/kvpub")], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        obj = {"bind": bind, "flavor": "vllm", "buffer_steps": 100}
        if replay:
            obj["replay"] = "tcp://127.0.0.1:*"
        self.p.stdin.write((json.dumps(obj) + "\n").encode())
        self.p.stdin.flush()
        words = self.p.stdout.readline().decode().split()
        # a port taken: kvpub says error (the caller may try another)
        self.ep = words[1] if words and words[0] == "bound" else None
        self.replay = words[2] if replay and self.ep else None

    def cmd(self, obj):
        """Sends one line; returns kvpub's answer line (it answers once done)."""
        self.p.stdin.write((json.dumps(obj) + "\n").encode())
        self.p.stdin.flush()
        line = self.p.stdout.readline().decode().strip()
        assert line and not line.startswith("error"), (obj, line)
        return line

    def batch(self, *events):
        return self.cmd({"batch": {"ts": 1.0, "events": list(events)}})


def stored(hashes, parent=None, first_token=0):
    """BlockStored of len(hashes) blocks of 16 tokens each, chained."""
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": list(range(first_token, first_token + 16 * len(hashes))), "block_size": 16,
            "lora_id": None, "medium": "GPU"}


def removed(hashes):
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}


def write_config(obj):
    f = tempfile.NamedTemporaryFile("w", prefix="ig-kv-", suffix=".json", delete=False)
    json.dump(obj, f)
    f.close()
    return f.name


def gateway_with(pub, backend=None, **top):
    """A gateway whose one backend (a fake one) publishes on pub; waits for
    its subscription to reach kvpub."""
    fb = backend or FakeBackend()
    entry = {"url": fb.url, "kv_events": pub.ep}
    if pub.replay:
        entry["kv_events_replay"] = pub.replay
    cfg = {"backends": [entry], "kv_events": {"stale_after_ms": STALE_MS, **top}}
    gw = start_gateway([], "--health-interval-ms", "200", config=write_config(cfg))
    assert pub.cmd({"wait_subscriber_ms": 10000}).startswith("subscribers"), "no subscription"
    return gw, fb


def kv(gw, entry=0):
    return http_json("GET", gw.url + "/health/backends")[2]["backends"][entry]["kv_events"]


def wait_kv(gw, what, entry=0, **want):
    """Waits until the backend's (entry: its place in /health/backends, a
    data-parallel rank's own) kv_events has every key at its value."""
    return wait_until(lambda: (lambda k: k if all(k.get(n) == v for n, v in want.items()) else None)(kv(gw, entry)),
                      timeout=10, what=what)


@test
def stored_removed_and_cleared_blocks_are_counted():
    pub = KvPub()
    gw, fb = gateway_with(pub)
    k = kv(gw)
    assert k["endpoint"] == pub.ep and k["replay"] == pub.replay and k["format"] == "vllm", k
    assert k["state"] == "waiting" and k["batches"] == 0, k
    pub.batch(stored([11, 12, 13]))
    wait_kv(gw, "three blocks stored", blocks=3, batches=1, events=1, state="flowing")
    pub.batch(removed([13]))
    wait_kv(gw, "one removed", blocks=2, batches=2)
    pub.batch({"type": "AllBlocksCleared"})
    k = wait_kv(gw, "all cleared", blocks=0, batches=3)
    assert k["gaps"] == 0 and k["malformed"] == 0 and k["restarts"] == 0, k
    ix = http_json("GET", gw.url + "/health/backends")[2]["gateway"]["kv_index"]
    assert ix["blocks"] == 0 and ix["orphans"] == 0 and ix["sources"] >= 1, ix
    status, _, body = http("GET", gw.url + "/metrics")
    assert status == 200
    assert 'infergate_kv_events_total{backend="%s",rank="0",kind="batches"} 3' % fb.url in body.decode(), body
    assert 'infergate_kv_events_exact{backend="%s"} 1' % fb.url in body.decode()


@test
def a_gap_is_filled_from_the_replay():
    pub = KvPub()
    gw, _ = gateway_with(pub)
    pub.batch(stored([21]))
    wait_kv(gw, "the first block", blocks=1)
    assert pub.cmd({"skip_seq": 1}).startswith("skipping")
    assert pub.batch(stored([22], parent=21, first_token=16)).startswith("held")
    pub.batch(stored([23], parent=22, first_token=32))
    k = wait_kv(gw, "the gap filled", gaps=1, gaps_filled=1, batches=3)
    # the held block came from the replay, so its child was not an orphan
    assert k["blocks"] == 3 and k["gaps_lost"] == 0 and k["state"] == "flowing", k


@test
def a_restarted_engine_starts_from_nothing():
    pub = KvPub()
    gw, _ = gateway_with(pub)
    pub.batch(stored([31, 32]))
    wait_kv(gw, "two blocks", blocks=2)
    assert pub.cmd({"restart": True}) == "restarted"
    pub.batch(stored([41], first_token=100))
    k = wait_kv(gw, "the restart", restarts=1, batches=2)
    assert k["blocks"] == 1, k  # the new run's only


@test
def malformed_messages_are_counted_and_the_gateway_goes_on():
    pub = KvPub(replay=False)
    gw, _ = gateway_with(pub)
    pub.batch(stored([51]))
    wait_kv(gw, "a block", blocks=1)
    for raw in ("c1", "93", "ff" * 40):
        pub.cmd({"raw": raw})
    wait_kv(gw, "three malformed", malformed=3)
    assert gw.poll() is None and http("GET", gw.url + "/health/backends")[0] == 200  # still serving
    pub.batch(stored([52], parent=51, first_token=16))
    k = wait_kv(gw, "the next batch", blocks=2, batches=2)
    assert k["gaps"] == 0 and k["state"] == "flowing", k  # their sequence numbers were taken


@test
def requests_without_events_make_it_stale_until_they_come():
    pub = KvPub(replay=False)
    gw, fb = gateway_with(pub)
    pub.batch(stored([61]))
    wait_kv(gw, "flowing", state="flowing")
    wait_until(lambda: http_json("GET", gw.url + "/health")[0] == 200, what="the backend up")
    status, _, _ = http("POST", gw.url + "/v1/chat/completions",
                        {"model": "sim-model", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200, status
    k = wait_kv(gw, "stale", state="stale", fallbacks=1)
    assert k["batches"] == 1, k
    pub.batch(stored([62], parent=61, first_token=16))
    k = wait_kv(gw, "flowing again", state="flowing", batches=2)
    assert k["fallbacks"] == 1, k


@test
def the_default_port_gives_every_backend_an_endpoint():
    pub = KvPub(replay=False)
    fb = FakeBackend()
    port = pub.ep.rsplit(":", 1)[1]
    gw = start_gateway([fb], "--kv-events-port", port)
    assert pub.cmd({"wait_subscriber_ms": 10000}).startswith("subscribers")
    assert kv(gw)["endpoint"] == "tcp://127.0.0.1:" + port
    pub.batch(stored([71]))
    wait_kv(gw, "a block", blocks=1)


@test
def data_parallel_ranks_publish_on_consecutive_ports():
    for attempt in range(5):
        r0 = KvPub(replay=False)
        port = int(r0.ep.rsplit(":", 1)[1])
        r1 = KvPub(replay=False, bind="tcp://127.0.0.1:%d" % (port + 1))
        if r1.ep:
            break
    assert r1.ep == "tcp://127.0.0.1:%d" % (port + 1), "no two consecutive free ports"
    fb = FakeBackend()
    cfg = {"backends": [{"url": fb.url, "kv_events": r0.ep, "dp_ranks": 2}]}
    gw = start_gateway([], config=write_config(cfg))
    for r in (r0, r1):
        assert r.cmd({"wait_subscriber_ms": 10000}).startswith("subscribers")
    # each rank is a backend entry of its own (routed to by rank), with its own source
    ranks = http_json("GET", gw.url + "/health/backends")[2]["backends"]
    assert [(b["url"], b.get("dp_rank")) for b in ranks] == [(fb.url, 0), (fb.url, 1)], ranks
    k = kv(gw)
    assert k["ranks"] == 2 and k["endpoint"] == r0.ep and k["state"] == "waiting", k
    r0.batch(stored([101]))
    wait_kv(gw, "rank 0's block", blocks=1, batches=1, state="flowing")
    k = kv(gw, 1)
    assert k["state"] == "waiting" and k["batches"] == 0, k  # rank 1 said nothing yet
    r1.batch(stored([201], first_token=50))
    wait_kv(gw, "rank 1's block", entry=1, blocks=1, batches=1, state="flowing")
    wait_kv(gw, "rank 0 unchanged", blocks=1, batches=1, state="flowing")


@test
def a_reload_that_moves_the_endpoint_subscribes_again():
    a, b = KvPub(replay=False), KvPub(replay=False)
    fb = FakeBackend()
    path = write_config({"backends": [{"url": fb.url, "kv_events": a.ep}]})
    gw = start_gateway([], "--health-interval-ms", "200", config=path)
    assert a.cmd({"wait_subscriber_ms": 10000}).startswith("subscribers")
    a.batch(stored([81, 82]))
    wait_kv(gw, "a's blocks", blocks=2)
    with open(path, "w") as f:
        json.dump({"backends": [{"url": fb.url, "kv_events": b.ep}]}, f)
    gw.send_signal(signal.SIGHUP)
    # the sync runs every second: the old source cleared, the new one subscribed
    wait_kv(gw, "b subscribed", endpoint=b.ep, blocks=0, batches=0)
    assert b.cmd({"wait_subscriber_ms": 10000}).startswith("subscribers")
    b.batch(stored([91]))
    wait_kv(gw, "b's block", blocks=1, batches=1)


def refused(args, config=None):
    """Runs the gateway, which must stop at once: (exit code, stderr)."""
    cmd = [binary("infergate"), "--listen", "127.0.0.1:%d" % free_port()]
    if config is not None:
        cmd += ["--config", write_config(config)]
    r = subprocess.run(cmd + args, capture_output=True, timeout=20)
    return r.returncode, r.stderr.decode()


@test
def bad_kv_events_settings_stop_the_gateway_at_start():
    for value, why in (("http://127.0.0.1:5557", "must be tcp://HOST:PORT or ipc://PATH"),
                       ("tcp://127.0.0.1", "no port"),
                       ("tcp://127.0.0.1:70000", "1..65535"),
                       ("tcp://bad host:5557", "DNS name or an IP address")):
        code, err = refused([], {"backends": [{"url": "http://127.0.0.1:1", "kv_events": value}]})
        assert code == 2, (value, code)
        assert "backends[0].kv_events: '%s'" % value in err and why in err, err
    code, err = refused([], {"backends": [{"url": "http://127.0.0.1:1", "kv_events": "tcp://h:1",
                                           "dp_ranks": 0, "kv_events_format": "trt"}]})
    assert code == 2 and "backends[0].dp_ranks: 0 is not an integer in 1..64" in err, err
    assert "backends[0].kv_events_format: \"trt\" is not" in err, err
    code, err = refused(["--backend", "http://127.0.0.1:1", "--kv-events-port", "70000"])
    assert code == 2 and "--kv-events-port" in err and "70000" in err, err
    code, err = refused([], {"backends": ["http://127.0.0.1:1"], "kv_events": {"port": 5557, "format": "x"}})
    assert code == 2 and "kv_events.format" in err, err


run()
