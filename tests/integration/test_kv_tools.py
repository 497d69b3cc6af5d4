"""The KV-event test tools other tests stand on: tests/tools/kvpub publishes
what its script says, as an engine would (src/common/kvpub.c), and
tests/tools/kvsub prints it back decoded, in seq order, filling a gap by
replay. A test of the gateway's subscriber trusts these two: here they are
checked against each other, over loopback."""

import json
import os
import subprocess
import threading

from harness import BUILDDIR, run, start, test, wait_until


def tool(name):
    return os.path.join(BUILDDIR, "tests", "tools", name)


class Pub:
    """kvpub driven line by line: each action's answer line is returned."""

    def __init__(self):
        self.proc = start([tool("kvpub")], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def do(self, obj):
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()
        return self.proc.stdout.readline().decode().strip()


def batch(ts, *events, **kw):
    return {"batch": {"ts": ts, "events": list(events), "dp_rank": 0}, **kw}


STORED = {"type": "BlockStored", "block_hashes": [1, "0xffffffffffffffff"], "parent_block_hash": None,
          "token_ids": list(range(32)), "block_size": 16}


@test
def kvpub_publishes_and_kvsub_reads_gaps_raw_and_restarts():
    pub = Pub()
    bound = pub.do({"bind": "tcp://127.0.0.1:*", "replay": "tcp://127.0.0.1:*", "flavor": "vllm"})
    _, pub_ep, replay_ep = bound.split()
    assert pub_ep.startswith("tcp://127.0.0.1:") and not pub_ep.endswith(":*"), bound

    sub = start([tool("kvsub"), "--connect", pub_ep, "--replay", replay_ep, "--idle-ms", "20000"],
                stdout=subprocess.PIPE)
    got = []
    threading.Thread(target=lambda: [got.append(json.loads(l)) for l in sub.stdout], daemon=True).start()
    assert pub.do({"wait_subscriber_ms": 10000}) == "subscribers 1"

    assert pub.do(batch(1.0, STORED)) == "sent 0"
    assert pub.do({"skip_seq": 2}) == "skipping 2"
    assert pub.do(batch(2.0, {"type": "BlockRemoved", "block_hashes": [1]})) == "held 1"
    assert pub.do({"raw": "c1"}) == "held 2"                      # not msgpack
    assert pub.do(batch(3.0, {"type": "AllBlocksCleared"})) == "sent 3"
    wait_until(lambda: len(got) >= 4, what="4 batches at kvsub")
    assert [b["seq"] for b in got] == [0, 1, 2, 3], got           # 1 and 2 came by replay
    assert got[0]["events"] == [{"type": "BlockStored", "block_hashes": ["0000000000000001", "ffffffffffffffff"],
                                 "medium": "GPU", "parent_block_hash": None, "token_ids": list(range(32)),
                                 "block_size": 16, "lora_id": None}], got[0]
    assert got[1]["events"][0]["type"] == "BlockRemoved"
    assert "error" in got[2] and "not msgpack" in got[2]["error"], got[2]
    assert got[3]["events"] == [{"type": "AllBlocksCleared"}]

    assert pub.do({"restart": True}) == "restarted"
    assert pub.do(batch(4.0, {"type": "AllBlocksCleared"})) == "sent 0"
    wait_until(lambda: len(got) >= 6, what="the batch after the restart")
    assert got[4] == {"restart": True}, got[4]                    # seq 0 again: kvsub says so
    assert got[5]["seq"] == 0 and got[5]["ts"] == 4.0, got[5]
    assert pub.do({"stats": True}) == "stats published 5 sent 3 dropped 0 replays 2", "stats"


run()
