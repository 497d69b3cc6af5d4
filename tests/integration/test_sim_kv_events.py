"""infergate-sim --kv-events: its prefix cache published as vLLM and SGLang
publish their KV events (ZMQ PUB + replay ROUTER, msgpack), read back by
tests/tools/kvsub (which decodes with the gateway's codec, src/common/kvwire.c).
What a gateway routing on these events relies on: a prompt's stored blocks
are its 64-byte blocks, their token ids the text's 4-byte groups, each store
naming the block before it; evictions remove exactly the evicted blocks; a
cache flush clears; the replay gives back the same batches."""

import json
import os
import re
import subprocess
import threading

from harness import (BUILDDIR, binary, http, http_json, run, start, start_sim, test,
                     wait_until)


def kvsub_path():
    return os.path.join(BUILDDIR, "tests", "tools", "kvsub")


def endpoints(sim):
    """The PUB and replay endpoints the sim bound (ports of ZMQ's choosing, logged)."""
    line = wait_until(lambda: re.search(r"kv events of rank 0 on (\S+?)(?:, replay on (\S+))? \(",
                                        sim.read_log()), timeout=10, what="the kv events line")
    return line.group(1), line.group(2)


class Sub:
    """kvsub connected to a sim: every batch it prints, decoded, in seq order.
    Without a replay socket, nothing published before its subscription
    reached the sim would come (PUB/SUB's slow joiner): it waits for the
    sim to count it in /sim/state."""

    def __init__(self, sim, pub, replay, *extra):
        self.batches = []
        args = [kvsub_path(), "--connect", pub, "--idle-ms", "20000"]
        if replay:
            args += ["--replay", replay]
        self.proc = start(args + list(extra), stdout=subprocess.PIPE)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["ranks"][0]["kv_event_subscribers"] >= 1,
                   what="the subscription at the sim")

    def _read(self):
        for line in self.proc.stdout:
            self.batches.append(json.loads(line))

    def events(self, kind=None):
        return [e for b in self.batches for e in b.get("events", []) if kind is None or e["type"] == kind]

    def wait(self, pred, what):
        return wait_until(lambda: pred(self), timeout=15, what=what)


def text(seed, nblocks):
    """nblocks x 64 bytes of lowercase text, different for each seed."""
    out = []
    x = seed * 7919 + 1
    for _ in range(nblocks * 64):
        x = (x * 1103515245 + 12345) & 0x7fffffff
        out.append(chr(ord("a") + (x >> 16) % 26))
    return "".join(out)


def tokens_of(t):
    """The sim's token ids: each 4 bytes of text, little-endian."""
    b = t.encode()
    return [int.from_bytes(b[i:i + 4], "little") for i in range(0, len(b) - len(b) % 4, 4)]


def complete(sim, prompt):
    status, _, body = http_json("POST", sim.url + "/v1/completions",
                             {"model": "sim-model", "prompt": prompt, "max_tokens": 2})
    assert status == 200, (status, body)
    return body


def stored_by_prompt(sub, prompt):
    """The BlockStored events whose tokens are blocks of prompt, joined in order."""
    want = tokens_of(prompt)
    return [e for e in sub.events("BlockStored") if e["token_ids"] and e["token_ids"][:16] in
            [want[i:i + 16] for i in range(0, len(want), 16)]]


STEP = ["--profile", "h100-8b", "--output-reserve", "0"]


@test
def stored_blocks_are_the_prompts_blocks_with_their_tokens_and_parent():
    sim = start_sim(*STEP, "--kv-events", "tcp://127.0.0.1:*", "--kv-events-replay", "tcp://127.0.0.1:*")
    pub, replay = endpoints(sim)
    sub = Sub(sim, pub, replay)
    a = text(1, 8)
    b = a[:4 * 64] + text(2, 4)   # shares a's first 4 blocks
    complete(sim, a)
    sub.wait(lambda s: len(s.events("BlockStored")) >= 1, "a's store")
    complete(sim, b)
    sub.wait(lambda s: len(s.events("BlockStored")) >= 2, "b's store")
    sa, sb = sub.events("BlockStored")[:2]
    # a: its 8 blocks (512 bytes / 64), the text's 4-byte groups, no parent
    assert len(sa["block_hashes"]) == 8, sa
    assert sa["token_ids"] == tokens_of(a), sa
    assert sa["block_size"] == 16 and sa["parent_block_hash"] is None, sa
    assert sa["medium"] == "GPU"
    # b: only its last 4 blocks are new, after a's 4th
    assert len(sb["block_hashes"]) == 4, sb
    assert sb["token_ids"] == tokens_of(b)[64:], sb
    assert sb["parent_block_hash"] == sa["block_hashes"][3], (sb, sa)
    assert not set(sb["block_hashes"]) & set(sa["block_hashes"])
    assert all(bt["dp_rank"] == 0 for bt in sub.batches)
    assert not sub.events("BlockRemoved"), sub.batches

    # The replay from seq 0 gives back the very same batches.
    out = subprocess.run([kvsub_path(), "--replay", replay, "--replay-only", "--from", "0", "--idle-ms", "5000"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out
    replayed = [json.loads(x) for x in out.stdout.splitlines()]
    assert replayed == sub.batches, (replayed, sub.batches)
    # and from seq 1, those from 1 on
    out = subprocess.run([kvsub_path(), "--replay", replay, "--replay-only", "--from", "1", "--idle-ms", "5000"],
                         capture_output=True, text=True, timeout=30)
    assert [json.loads(x) for x in out.stdout.splitlines()] == sub.batches[1:], out.stdout


@test
def evictions_remove_exactly_the_evicted_blocks_and_a_flush_clears():
    # 12 blocks of KV: a's 8 cached, then c (8 new blocks, 128 tokens) needs
    # 4 of them: a's deepest 4 go
    sim = start_sim(*STEP, "--kv-tokens", "192", "--kv-events", "tcp://127.0.0.1:*")
    pub, replay = endpoints(sim)
    assert replay is None
    sub = Sub(sim, pub, None)
    a, c = text(3, 8), text(4, 8)
    complete(sim, a)
    sub.wait(lambda s: s.events("BlockStored"), "a's store")
    complete(sim, c)
    sub.wait(lambda s: len(s.events("BlockStored")) >= 2, "c's store")
    sa, sc = sub.events("BlockStored")[:2]
    assert sc["token_ids"] == tokens_of(c) and sc["parent_block_hash"] is None, sc
    removed = [h for e in sub.events("BlockRemoved") for h in e["block_hashes"]]
    assert removed == sa["block_hashes"][4:][::-1], (removed, sa["block_hashes"])
    # the removal came before c's store
    kinds = [e["type"] for e in sub.events()]
    assert kinds == ["BlockStored", "BlockRemoved", "BlockStored"], kinds

    status, _, body = http("POST", sim.url + "/flush_cache")
    assert status == 200 and body.startswith(b"Cache flushed."), (status, body)
    sub.wait(lambda s: s.events("AllBlocksCleared"), "the flush's AllBlocksCleared")
    assert [e["type"] for e in sub.events()][-1] == "AllBlocksCleared"
    # after the flush nothing is cached: a is stored whole again
    complete(sim, a)
    sub.wait(lambda s: len(s.events("BlockStored")) >= 3, "a's store again")
    assert sub.events("BlockStored")[2]["token_ids"] == tokens_of(a)


@test
def sglang_format_sends_a_block_per_event():
    sim = start_sim(*STEP, "--kv-events", "tcp://127.0.0.1:*", "--kv-events-format", "sglang")
    pub, _ = endpoints(sim)
    sub = Sub(sim, pub, None, "--flavor", "sglang")
    a = text(5, 3)
    complete(sim, a)
    sub.wait(lambda s: len(s.events("BlockStored")) >= 3, "a's 3 stores")
    ev = sub.events("BlockStored")
    assert len(ev) == 3 and len(sub.batches) == 1, sub.batches
    assert [e["token_ids"] for e in ev] == [tokens_of(a)[i:i + 16] for i in (0, 16, 32)]
    assert ev[0]["parent_block_hash"] is None
    assert ev[1]["parent_block_hash"] == ev[0]["block_hashes"][0]
    assert ev[2]["parent_block_hash"] == ev[1]["block_hashes"][0]


@test
def kv_events_flags_are_checked_at_start():
    for args, want in [
        (["--kv-events", "tcp://127.0.0.1:5557"], "--kv-events: the classic profile has no prefix cache"),
        ([*STEP, "--kv-events-replay", "tcp://127.0.0.1:5558"], "--kv-events-replay: needs --kv-events"),
        ([*STEP, "--kv-events", "udp://x:1"], "--kv-events: 'udp://x:1' is not tcp://HOST:PORT"),
        ([*STEP, "--kv-events", "tcp://127.0.0.1:*", "--dp-ranks", "2"], "with a port for each --dp-ranks"),
    ]:
        out = subprocess.run([binary("infergate-sim"), *args], capture_output=True, text=True, timeout=10)
        assert out.returncode == 2 and want in out.stderr, (args, out.returncode, out.stderr)


@test
def sigterm_still_stops_it_cleanly():
    # the publisher's thread must not take the signal the sim's signalfd waits for
    sim = start_sim(*STEP, "--kv-events", "tcp://127.0.0.1:*", "--kv-events-replay", "tcp://127.0.0.1:*")
    endpoints(sim)
    complete(sim, text(7, 2))
    assert sim.stop() == 0, sim.read_log()
    assert "stopped: 1 served" in sim.read_log()


@test
def flush_cache_waits_for_an_idle_server():
    sim = start_sim(*STEP, "--time-scale", "0.01")  # a slow step: the request is still running
    def ask():
        try:
            http("POST", sim.url + "/v1/completions", {"prompt": text(6, 2), "max_tokens": 2})
        except OSError:
            pass  # the sim is stopped at the end of the test, the request still running
    t = threading.Thread(target=ask, daemon=True)
    t.start()
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_running_reqs"] > 0, what="a running request")
    status, _, body = http("POST", sim.url + "/flush_cache")
    assert status == 400 and body == b"Flush cache failed.\n", (status, body)


run()
