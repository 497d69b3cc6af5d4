#!/usr/bin/env python3
"""Issue 15: fair shares between keys, and low never starved. Seven simulators (88 slots),
the gateway, and two infergate-bulk runs at once, each with its own API key and 1,000
requests in flight (every slot contended, the rest waiting in the gateway's queue).
The share of key A in each 10 s window is read from /health/backends (`keys`: requests each
key had dispatched from the queue), sampled every 10 s while both runs are backlogged.

Runs:
  equal    keys A and B, both class normal, weight 1 each: target 50% +- 5% per window
  weighted the same with api_key_settings weight 3 for A: target 75% +- 5%
  starve   A at class high, B at class low (a bulk run under an interactive flood): B keeps
           completing, at about its guaranteed share (low_share_percent, 5%)

Usage: python3 bench/fairness.py [--requests M] [--windows N]
Env: IG_BUILD (build dir, default ./build).
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

SLOTS = [4, 4, 8, 8, 16, 16, 32]
WINDOW_S = 10


def digest(key):
    return subprocess.run([B.binary("infergate"), "--hash-key"], input=key, capture_output=True, text=True,
                          check=True).stdout.strip()


def dispatched(url, keys):
    st, body = B.http(url + "/health/backends")
    by = {k["key"]: k["dispatched_from_queue"] for k in json.loads(body)["keys"]} if st == 200 else {}
    return [by.get(k[:12], 0) for k in keys]


def run(name, corpus, args, workdir, classes, weights):
    procs = B.Procs(os.path.join(workdir, name))
    sims, _ = B.start_sims(procs, len(SLOTS), [["--max-running", str(s), "--tokens-per-second", "50",
                                                 "--ttft-ms", "50", "--output-tokens", "0"] for s in SLOTS])
    keys = ["sk-bench-a", "sk-bench-b"]
    digests = [digest(k) for k in keys]
    cfg = os.path.join(procs.workdir, "gateway.json")
    with open(cfg, "w") as f:
        json.dump({"queue_size": 100000, "queue_timeout_ms": 3600000, "queue_timeout_high_ms": 3600000,
                   "backends": sims,
                   "api_key_settings": {d: {"weight": w} for d, w in zip(digests, weights)}}, f)
    url, _ = B.start_gateway(procs, sims, config=cfg)
    bulks = []
    for key, klass in zip(keys, classes):
        env = dict(os.environ, BENCH_KEY=key)
        out = os.path.join(procs.workdir, f"out-{key}.jsonl")
        bulks.append(procs.start(f"bulk-{key}", [B.binary("infergate-bulk"), "--input", corpus, "--output", out,
                                                 "--url", url, "--api-key-env", "BENCH_KEY", "--concurrency", "1000", "--model", "sim-model",
                                                 "--priority", klass, "--progress-interval-s", "600"], env=env))
    time.sleep(5)  # both runs ramp up and their queues fill
    windows = []
    prev = dispatched(url, digests)
    for _ in range(args.windows):
        time.sleep(WINDOW_S)
        cur = dispatched(url, digests)
        d = [c - p for c, p in zip(cur, prev)]
        prev = cur
        windows.append(d)
        if any(b.poll() is not None for b in bulks):
            B.log(f"{name}: a bulk run ended during the windows: raise --requests")
            break
    procs.stop_all()
    shares = [w[0] / sum(w) if sum(w) else float("nan") for w in windows]
    B.log(f"{name}: windows {windows}, share of A {[round(x, 3) for x in shares]}")
    return {"run": name, "classes": classes, "weights": weights, "windows": windows, "share_a": shares}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=6000, help="lines per bulk run [6000]")
    ap.add_argument("--windows", type=int, default=3, help="10 s windows measured per run [3]")
    args = ap.parse_args()
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"fairness-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(args.requests), "--seed", "4",
                           "--output", corpus, "--max-tokens", "64"], stdout=subprocess.DEVNULL)
    runs = [run("equal", corpus, args, workdir, ("normal", "normal"), (1, 1)),
            run("weighted", corpus, args, workdir, ("normal", "normal"), (3, 1)),
            run("starve", corpus, args, workdir, ("high", "low"), (1, 1))]
    rows = []
    targets = {"equal": (0.45, 0.55), "weighted": (0.70, 0.80)}
    verdict = []
    for r in runs:
        lo, hi = targets.get(r["run"], (None, None))
        shares = ", ".join(f"{100 * s:.1f}%" for s in r["share_a"])
        b_done = [w[1] for w in r["windows"]]
        rows.append([r["run"], f"{r['classes'][0]} / {r['classes'][1]}", f"{r['weights'][0]}:{r['weights'][1]}",
                     shares, ", ".join(str(x) for x in b_done)])
        if lo is not None:
            ok = all(lo <= s <= hi for s in r["share_a"])
            verdict.append(f"{r['run']}: key A's share in every window within {100 * lo:.0f}..{100 * hi:.0f}%: "
                           f"{'met' if ok else 'MISSED'}.")
        else:
            ok = all(x > 0 for x in b_done)
            verdict.append(f"starve: the low run completed in every window ({', '.join(str(x) for x in b_done)} "
                           f"dispatches; {', '.join(f'{100 * (1 - s):.1f}%' for s in r['share_a'])} of the "
                           f"total): {'met' if ok else 'MISSED'}.")
    table = B.md_table(["run", "classes A / B", "weights A:B", "key A's share per 10 s window",
                        "key B's dispatches per window"], rows)
    notes = (f"Seven infergate-sim (slots {SLOTS}, 50 tokens/s, 16..64-token answers), two `infergate-bulk "
             f"--concurrency 1000` runs of {args.requests} lines with their own API keys; shares from "
             "/health/backends `keys[].dispatched_from_queue`, sampled every 10 s after a 5 s ramp-up.\n\n"
             + "\n".join(verdict))
    B.record("fairness", "Fair shares between keys, low not starved", B.command_line(), mach, runs, table, notes)


if __name__ == "__main__":
    main()
