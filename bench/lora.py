#!/usr/bin/env python3
"""Issue 51: LoRA adapters as a resource. Four infergate-sim in vLLM's flavor, each with
`--max-loras 4` (four distinct adapters in a batch, four GPU slots swapped least recently used
first, each swap `--lora-load-ms` of stall) and `--max-running 16`; 20 adapters; N streamed
completions, C at a time, each naming an adapter drawn from a Zipf law (exponent `--zipf`,
seeded), timed by the client: time to the first token (p50, p99), throughput, and the swaps
(the simulators' GPU loads, /sim/state lora_loads).

Targets, each on fresh processes:
- adapter-aware (the gateway's default): the simulators start with no adapter and
  `--allow-runtime-lora-updating`; the gateway has the 20 in `models[].adapters` and learns
  each server's max_lora from its /metrics: an adapter's requests go where it is loaded, it is
  loaded elsewhere when those are full, a server's least recently used idle adapter goes first.
  Its loads and unloads (/metrics) are shown too.
- least-loaded without adapter awareness (the reference): every simulator registers all 20
  adapters at start (`--lora-modules`) and the gateway has no `models[].adapters`, so every
  server holds every adapter as far as the gateway knows and it routes an adapter's request as
  any model's, least-loaded over the four; each simulator swaps its four GPU slots under it.

Usage: python3 bench/lora.py [--requests 1600] [--concurrency 48] [--zipf 1.1] [--lora-load-ms 200]
Env: IG_BUILD (build dir, default ./build), IG_BENCH_TMP.
"""

import argparse
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

SIMS, ADAPTERS, MAX_LORAS = 4, 20, 4
NAMES = [f"lora{i:02d}" for i in range(ADAPTERS)]
OUTPUT_TOKENS = 32


def sim_args(a, register):
    args = ["--flavor", "vllm", "--enable-lora", "--max-loras", str(MAX_LORAS), "--lora-load-ms", str(a.lora_load_ms),
            "--max-running", "16", "--tokens-per-second", "100", "--ttft-ms", "20",
            "--output-tokens", str(OUTPUT_TOKENS)]
    if register:
        args += ["--max-cpu-loras", str(ADAPTERS), "--lora-modules"] + [f"{n}=/adapters/{n}" for n in NAMES]
    else:
        args += ["--allow-runtime-lora-updating"]
    return args


def draws(a):
    """The adapter of each request: Zipf over NAMES (rank 1 the most asked), seeded."""
    w = [1.0 / (r + 1) ** a.zipf for r in range(ADAPTERS)]
    rng = random.Random(a.seed)
    return rng.choices(NAMES, weights=w, k=a.requests)


def stream_one(base, model, i):
    """A streamed completion; returns (status, ttft ms, total ms)."""
    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    t0 = time.monotonic()
    ttft = None
    try:
        conn.request("POST", "/v1/completions", json.dumps(
            {"model": model, "prompt": f"request {i} for {model}", "max_tokens": OUTPUT_TOKENS, "stream": True}),
            {"Content-Type": "application/json"})
        r = conn.getresponse()
        while True:
            line = r.readline()
            if not line:
                break
            if ttft is None and line.startswith(b"data:") and b"[DONE]" not in line:
                ttft = (time.monotonic() - t0) * 1000
        return r.status, ttft, (time.monotonic() - t0) * 1000
    except OSError:
        return 0, None, (time.monotonic() - t0) * 1000
    finally:
        conn.close()


def one_run(a, label, aware):
    procs = B.Procs(os.path.join(B.TMP, f"lora-{'aware' if aware else 'plain'}"))
    try:
        sims, _ = B.start_sims(procs, SIMS, sim_args(a, not aware))
        config = None
        if aware:
            config = os.path.join(procs.workdir, "gw.json")
            with open(config, "w") as f:
                json.dump({"backends": sims, "models": [
                    {"name": "sim-model", "adapters": {n: f"/adapters/{n}" for n in NAMES}}]}, f)
        gw, _ = B.start_gateway(procs, sims, config=config)
        if aware:  # each server's max_lora read from its /metrics
            B.wait_http(gw + "/health/backends", ok=lambda s, b: s == 200 and all(
                (x.get("lora") or {}).get("max_loras") == MAX_LORAS for x in json.loads(b)["backends"]))
        todo = list(enumerate(draws(a)))
        ttft, lock, statuses = [], threading.Lock(), {}

        def worker():
            while True:
                with lock:
                    if not todo:
                        return
                    i, model = todo.pop()
                st, t, _ = stream_one(gw, model, i)
                with lock:
                    statuses[st] = statuses.get(st, 0) + 1
                    if st == 200 and t is not None:
                        ttft.append(t)

        t0 = time.monotonic()
        ws = [threading.Thread(target=worker) for _ in range(a.concurrency)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        wall = time.monotonic() - t0
        swaps = sum(json.loads(B.http(s + "/sim/state")[1])["lora_loads"] for s in sims)
        m = B.metrics(gw, "infergate_lora_")
        loads = sum(v for k, v in m.items() if k.startswith("infergate_lora_loads_total") and 'outcome="ok"' in k)
        unloads = sum(v for k, v in m.items() if k.startswith("infergate_lora_unloads_total") and 'outcome="ok"' in k)
        failed = sum(v for k, v in m.items() if 'outcome="failed"' in k)
        return {"label": label, "ttft_p50": B.pct(ttft, 50), "ttft_p99": B.pct(ttft, 99), "wall_s": wall,
                "req_s": statuses.get(200, 0) / wall, "swaps": swaps, "loads": loads, "unloads": unloads,
                "failed": failed, "statuses": statuses}
    finally:
        procs.stop_all()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=1600)
    ap.add_argument("--concurrency", type=int, default=48)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--lora-load-ms", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    mach = B.machine()
    runs = [one_run(a, "least-loaded, no adapter awareness", False),
            one_run(a, "adapter-aware (default)", True)]
    ref = runs[0]
    rows = [[r["label"], f"{r['swaps']}", f"{r['loads']:.0f} / {r['unloads']:.0f} / {r['failed']:.0f}",
             f"{r['ttft_p50']:.0f}", f"{r['ttft_p99']:.0f} ({r['ttft_p99'] / ref['ttft_p99']:.2f}x)",
             f"{r['req_s']:.1f} ({r['req_s'] / ref['req_s']:.2f}x)", f"{r['wall_s']:.1f}", json.dumps(r["statuses"])]
            for r in runs]
    table = B.md_table(["target", "swaps (sims' GPU loads)", "gateway loads / unloads / failed", "TTFT p50 ms",
                        "TTFT p99 ms (x ref)", "req/s (x ref)", "wall s", "statuses"], rows)
    aware = runs[1]
    notes = (f"{SIMS} simulators (vLLM flavor, `--max-loras {MAX_LORAS} --lora-load-ms {a.lora_load_ms} "
             f"--max-running 16 --tokens-per-second 100 --ttft-ms 20 --output-tokens {OUTPUT_TOKENS}`), "
             f"{ADAPTERS} adapters, {a.requests} streamed completions {a.concurrency} at a time, adapters drawn "
             f"from Zipf({a.zipf}) (seed {a.seed}). The reference registers every adapter on every simulator and "
             f"gives the gateway no `models[].adapters` (each server holds each adapter as far as it knows: "
             f"least-loaded over all four); adapter-aware starts the simulators empty and lets the gateway load. "
             f"Adapter-aware against the reference: swaps {aware['swaps']} against {ref['swaps']}, TTFT p99 "
             f"{aware['ttft_p99']:.0f} ms against {ref['ttft_p99']:.0f} ms, {aware['req_s']:.1f} against "
             f"{ref['req_s']:.1f} req/s.")
    B.record("lora", "LoRA adapters: adapter-aware routing against least-loaded", B.command_line(), mach,
             {"runs": runs}, table, notes)


if __name__ == "__main__":
    main()
