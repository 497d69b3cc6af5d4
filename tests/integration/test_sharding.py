"""Sharded bulk runs: four infergate-bulk clients with --shard 0/4 .. 3/4 at
once against one gateway and seven unpaced infergate-sim, then
`infergate-bulk merge`. What a user sees: each client's exit code, the merged
files, and the merge's exit code and report when a shard is missing, a line
is there twice, a shard was killed, or some lines failed for good."""

import json
import os
import signal
import subprocess

from harness import (Dir, binary, http, need_binary, run, start, start_gateway, start_sims, test,
                     wait_until)

MODEL = "m"
UNPACED = ("--model", MODEL, "--tokens-per-second", "0", "--ttft-ms", "0")
N = 10000
SHARDS = 4


def bulk(*args, timeout=120):
    """Runs infergate-bulk to the end: (exit code, stdout, stderr)."""
    p = subprocess.run([binary("infergate-bulk"), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def ids(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line)["custom_id"] for line in f]


def corpus_ids(path):
    with open(path) as f:
        return [json.loads(line)["custom_id"] for line in f if line.strip()]


def gateway_with_seven_sims():
    need_binary("infergate")
    sims = start_sims(7, *UNPACED)
    gw = start_gateway(sims)
    def lists_model():   # the gateway learns the models from its first probes
        status, _, body = http("GET", gw.url + "/v1/models")
        return status == 200 and MODEL in [m["id"] for m in json.loads(body)["data"]]
    wait_until(lists_model, timeout=10, what="gateway lists the model")
    return gw, sims


def shard_args(d, k, url, *extra):
    return ["--input", d("c.jsonl"), "--output", d(f"o{k}.jsonl"), "--url", url, "--model", MODEL,
            "--shard", f"{k}/{SHARDS}", "--concurrency", 16, "--summary-json", d(f"s{k}.json"), *extra]


def run_shards_at_once(d, url, ks=range(SHARDS), *extra):
    """Starts one client per shard, all at once, and waits for each."""
    procs = {k: start([binary("infergate-bulk"), *shard_args(d, k, url, *extra)], stdout=subprocess.DEVNULL)
             for k in ks}
    rcs = {}
    for k, p in procs.items():
        rcs[k] = p.wait(timeout=120)
        assert rcs[k] in (0, 1), (k, rcs[k], p.read_log()[-2000:])
    return rcs


def merge(d, *files, output="m.jsonl", extra=()):
    args = ["merge", "--input", d("c.jsonl"), "--shards", SHARDS, "--summary-json", d("merge.json"), *extra]
    if output:
        args += ["--output", d(output)]
    rc, out, err = bulk(*args, *files)
    summary = json.load(open(d("merge.json"))) if rc in (0, 1) else None
    return rc, out, err, summary


def generate(d, n=N, seed=3):
    rc, _, err = bulk("generate", "--count", n, "--seed", seed, "--output", d("c.jsonl"))
    assert rc == 0, err


@test
def four_shards_at_once_then_merge_is_exact():
    d = Dir()
    gw, sims = gateway_with_seven_sims()
    generate(d)
    rcs = run_shards_at_once(d, gw.url)
    assert rcs == {k: 0 for k in range(SHARDS)}, rcs
    for k in range(SHARDS):
        s = json.load(open(d(f"s{k}.json")))
        assert s["selected"] == N // SHARDS and s["ok"] == N // SHARDS, (k, s)
    want = corpus_ids(d("c.jsonl"))
    for k in range(SHARDS):            # each client took exactly its residue class
        assert sorted(ids(d(f"o{k}.jsonl"))) == sorted(want[k::SHARDS]), k
    rc, out, err, s = merge(d, *[d(f"o{k}.jsonl") for k in range(SHARDS)])
    assert rc == 0, (rc, out, err)
    assert "exact: each of the 10000 ids is in exactly one line" in out, out
    merged = ids(d("m.jsonl"))
    assert len(merged) == N and sorted(merged) == sorted(want)
    assert os.path.getsize(d("m.errors.jsonl")) == 0
    # byte for byte: the merged file is the shard files' lines
    shard_lines = sorted(line for k in range(SHARDS) for line in open(d(f"o{k}.jsonl")))
    assert sorted(open(d("m.jsonl"))) == shard_lines
    assert s["exact"] is True and s["missing"]["count"] == 0 and s["duplicated"]["ids"] == 0, s
    assert len(s["files"]) == 2 * SHARDS, s["files"]   # each output and the errors file next to it
    # the gateway spread the four clients over all seven backends
    served = [b["served"] for b in json.loads(http("GET", gw.url + "/health/backends")[2])["backends"]]
    assert sum(served) >= N and min(served) > 0, served


@test
def missing_shard_and_duplicated_line_exit_1():
    d = Dir()
    gw, sims = gateway_with_seven_sims()
    generate(d, n=800)
    run_shards_at_once(d, gw.url)
    outs = [d(f"o{k}.jsonl") for k in range(SHARDS)]

    # shard 3 forgotten: its 200 ids are missing, attributed to shard 3/4
    rc, out, err, s = merge(d, *outs[:3])
    assert rc == 1, (rc, out, err)
    assert "missing      200 ids (shard 3/4: 200)" in out, out
    assert "NOT exact" in out and "not exact" in err, (out, err)
    assert s["missing_per_shard"] == [0, 0, 0, 200], s
    assert not os.path.exists(d("m.jsonl")) and not os.path.exists(d("m.errors.jsonl"))
    assert not [f for f in os.listdir(d.path) if ".tmp." in f], os.listdir(d.path)

    # a line of shard 0 copied into shard 1's file: one id twice
    with open(outs[0]) as f:
        first = f.readline()
    with open(outs[1], "a") as f:
        f.write(first)
    dup_id = json.loads(first)["custom_id"]
    rc, out, err, s = merge(d, *outs)
    assert rc == 1, (rc, out, err)
    assert s["duplicated"] == {"ids": 1, "extra_lines": 1, "first": [dup_id]}, s
    assert f"'{dup_id}' 2 times (the second at {outs[1]} line 201)" in out, out
    assert s["missing"]["count"] == 0 and s["unknown"]["lines"] == 0, s

    # the same shard file given twice is a usage error
    rc, out, err, _ = merge(d, outs[0], outs[0])
    assert rc == 2 and "given twice" in err, (rc, err)


@test
def killed_shard_is_missing_until_resumed():
    """A pod killed mid-run (kill -9) leaves its shard short, maybe with a torn
    line; merge says which shard; rerunning that shard with --resume (what
    the Kubernetes Job's retry does) makes the merge exact."""
    d = Dir()
    gw, sims = gateway_with_seven_sims()
    generate(d)
    run_shards_at_once(d, gw.url, [0, 1, 3])
    # capped at 500 requests/s so that it is surely killed midway
    p = start([binary("infergate-bulk"), *shard_args(d, 2, gw.url, "--rate", 500)], stdout=subprocess.DEVNULL)
    wait_until(lambda: p.poll() is not None or (os.path.exists(d("o2.jsonl"))
                                                 and os.path.getsize(d("o2.jsonl")) > 100 * 600),
               timeout=60, interval=0.005, what="some output of shard 2")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    rc, out, err, s = merge(d, *[d(f"o{k}.jsonl") for k in range(SHARDS)])
    assert rc == 1, (rc, out, err)
    assert [k for k, n in enumerate(s["missing_per_shard"]) if n] == [2], s
    rc, out, err = bulk(*shard_args(d, 2, gw.url, "--resume"))
    assert rc == 0, (rc, out, err)
    rc, out, err, s = merge(d, *[d(f"o{k}.jsonl") for k in range(SHARDS)])
    assert rc == 0, (rc, out, err)
    assert sorted(ids(d("m.jsonl"))) == sorted(corpus_ids(d("c.jsonl")))


@test
def lines_that_failed_for_good_go_to_the_merged_errors_file():
    d = Dir()
    gw, sims = gateway_with_seven_sims()
    good = {"messages": [{"role": "user", "content": "hello"}]}
    with open(d("c.jsonl"), "w") as f:
        for i in range(200):
            # every 50th line is refused by the server with a 400: not retried
            line = {"custom_id": f"bad{i}", "messages": [1]} if i % 50 == 7 else dict(good, custom_id=f"g{i}")
            f.write(json.dumps(line) + "\n")
    rcs = run_shards_at_once(d, gw.url, range(SHARDS), "--backoff-ms", 1)
    assert rcs == {0: 0, 1: 1, 2: 0, 3: 1}, rcs       # 57 and 157 are in shard 1, 7 and 107 in shard 3
    rc, out, err, s = merge(d, *[d(f"o{k}.jsonl") for k in range(SHARDS)])
    assert rc == 0, (rc, out, err)
    assert s["exact"] is True and s["in_errors"]["ids"] == 4 and s["errors_by_code"] == {"http_400": 4}, s
    assert "in errors    4 ids (http_400 4)" in out, out
    assert sorted(ids(d("m.errors.jsonl"))) == sorted(f"bad{i}" for i in (7, 57, 107, 157))
    assert len(ids(d("m.jsonl"))) == 196
    # without --output it only checks; an existing MERGED needs --force
    rc, out, err, _ = merge(d, *[d(f"o{k}.jsonl") for k in range(SHARDS)], output=None)
    assert rc == 0 and "check only" in out, (rc, out)
    rc, out, err, _ = merge(d, *[d(f"o{k}.jsonl") for k in range(SHARDS)])
    assert rc == 2 and "--force" in err, (rc, err)


run()
