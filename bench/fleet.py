#!/usr/bin/env python3
"""A big fleet from its first second: 200 small servers behind one gateway, a corpus pushed
through with `infergate-bulk`, at a fixed concurrency equal to the fleet's slots and with
`--concurrency auto`, against nginx least_conn with the same fixed concurrency, in one run.

The fleet (the cluster issue's shape, and the run that showed the gateway learning slowly):
200 `infergate-sim` (SGLang flavour: /v1/loads states max_running_requests), 4 slots each,
100 tokens/s, 20-token answers, TTFT 20 ms: 800 slots, a request 0.22 s, so the ideal for
30,000 lines is 30,000 / 800 x 0.22 = 8.25 s. One gateway, --health-interval-ms 1000.

Runs, each on a fresh gateway (nothing learned carries over) and the same simulators:
  nginx-800      nginx least_conn, infergate-bulk --concurrency 800 (the reference)
  infergate-800  infergate, infergate-bulk --concurrency 800
  infergate-auto infergate, infergate-bulk --concurrency auto
Sampled while each runs: every 0.1 s the gateway's requests on backends (GET /health/capacity,
the pool's inflight: when the fleet was first full, >= 0.98 x the slots); every second, past the
first, each simulator's own queue (GET /sim/state num_waiting_reqs: the most any one had).

Targets (the issue): auto's wall time within 1/0.95 of the fixed 800 through infergate
(auto >= 0.95x its speed); full concurrency within 2 s of the start; at most 1 request waiting
at any backend after the first second.

Usage: python3 bench/fleet.py [--backends 200] [--slots 4] [--lines 30000] [--runs a,b,c]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get), IG_BENCH_TMP.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
from proxy import start_nginx  # noqa: E402  (bench/proxy.py: the reference nginx configuration)

RUNS = ["nginx-800", "infergate-800", "infergate-auto"]


def sim_waiting(url):
    st, body = B.http(url + "/sim/state", timeout=2)
    return json.loads(body)["num_waiting_reqs"] if st == 200 else 0


def one_run(procs, name, sims, corpus, slots, d, gw_url, bulk_bin):
    out, summary = os.path.join(d, f"{name}.out.jsonl"), os.path.join(d, f"{name}.summary.json")
    for f in (out, summary):
        if os.path.exists(f):
            os.unlink(f)
    conc = "auto" if name.endswith("auto") else str(slots)
    argv = [bulk_bin, "--input", corpus, "--output", out, "--url", gw_url,
            "--model", "sim-model", "--concurrency", conc, "--summary-json", summary,
            "--progress-interval-s", "30", "--priority", "none", "--max-concurrency", str(4 * slots)]
    samples, waits, stop = [], [], threading.Event()
    gateway = not name.startswith("nginx")
    t0 = time.monotonic()

    def watch_inflight():
        while not stop.is_set():
            st, body = B.http(gw_url + "/health/capacity", timeout=1)
            if st == 200:
                m = json.loads(body)["models"].get("sim-model", {})
                samples.append((time.monotonic() - t0, m.get("inflight", 0), m.get("slots", 0),
                                m.get("queue_depth", 0)))
            time.sleep(0.1)

    def watch_waiting():
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            while not stop.wait(1.0):
                waits.append((time.monotonic() - t0, max(ex.map(sim_waiting, sims))))

    threads = [threading.Thread(target=watch_waiting)]
    if gateway:
        threads.append(threading.Thread(target=watch_inflight))
    bulk = procs.start(f"bulk-{name}", argv)
    t0 = time.monotonic()
    for t in threads:
        t.start()
    rc = bulk.wait()
    wall = time.monotonic() - t0
    stop.set()
    for t in threads:
        t.join()
    with open(out) as f:
        lines = sum(1 for _ in f)
    full = next((t for t, inflight, s, _ in samples if s and inflight >= 0.98 * slots), None)
    after1 = [w for t, w in waits if t > 1.0]
    return {"run": name, "rc": rc, "wall_s": round(wall, 2), "lines": lines,
            "full_at_s": round(full, 2) if full is not None else None,
            "max_waiting_after_1s": max(after1) if after1 else None,
            "max_waiting": max((w for _, w in waits), default=None),
            "gateway_queue_max": max((q for *_, q in samples), default=None)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", type=int, default=200)
    ap.add_argument("--slots", type=int, default=4, help="per backend")
    ap.add_argument("--lines", type=int, default=30000)
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--reference", metavar="BUILD",
                    help="another build (infergate, infergate-bulk) also run at 800 and auto: reference-800, "
                         "reference-auto")
    a = ap.parse_args()
    runs = a.runs.split(",")
    for r in runs:
        if r not in RUNS:
            sys.exit(f"--runs: unknown run '{r}' ({', '.join(RUNS)})")
    if a.reference:
        runs += ["reference-800", "reference-auto"]
    if "nginx-800" in runs:
        B.need(("nginx", "nginx-light"))
    hard = B.raise_nofile()
    mach = B.machine()
    d = os.path.join(B.TMP, "fleet")
    procs = B.Procs(d)
    slots = a.backends * a.slots
    corpus = os.path.join(d, "corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(a.lines), "--seed", "1",
                           "--kind", "completions", "--output", corpus], stderr=subprocess.DEVNULL)
    B.log(f"starting {a.backends} simulators")
    sims, _ = B.start_sims(procs, a.backends, ["--max-running", str(a.slots), "--tokens-per-second", "100",
                                               "--output-tokens", "20", "--ttft-ms", "20"])
    ideal = a.lines / slots * 0.22
    results = []
    for name in runs:
        ref = name.startswith("reference")
        if name.startswith("nginx"):
            # the reference configuration (bench/conf/nginx.conf.in), with room for 800 held
            # connections to 200 backends
            url, p = start_nginx(procs, sims, d, 2, {"worker_rlimit_nofile": hard, "worker_connections": 16384,
                                                     "keepalive": 1024})
        else:
            url, p = B.start_gateway(procs, sims, ["--health-interval-ms", "1000"], name="gateway-" + name,
                                     program=os.path.join(a.reference, "infergate") if ref else None)
        B.log(f"{name}: {a.lines} lines")
        bulk = os.path.join(a.reference, "infergate-bulk") if ref else B.binary("infergate-bulk")
        r = one_run(procs, name, sims, corpus, slots, d, url, bulk)
        r["of_ideal"] = round(ideal / r["wall_s"], 3)
        results.append(r)
        B.log(json.dumps(r))
        procs.stop(p)
    by = {r["run"]: r for r in results}
    rows = []
    for r in results:
        ratio = ""
        fixed = r["run"].replace("auto", "800")
        if r["run"].endswith("auto") and fixed in by:
            ratio = f"{by[fixed]['wall_s'] / r['wall_s']:.3f}"
        ref = f"{by['nginx-800']['wall_s'] / r['wall_s']:.3f}" if "nginx-800" in by else ""
        rows.append([r["run"], f"{r['wall_s']:.2f} s", f"{100 * r['of_ideal']:.0f}%", ref, ratio,
                     "-" if r["full_at_s"] is None else f"{r['full_at_s']:.1f} s",
                     r["max_waiting_after_1s"], r["max_waiting"], r["lines"]])
    table = B.md_table(["run", "wall", "of ideal", "speed vs nginx-800", "auto speed vs the same build at 800",
                        "fleet full at", "most waiting at a backend after 1 s", "most waiting (whole run)",
                        "lines written"], rows)
    notes = (f"{a.backends} x infergate-sim (--max-running {a.slots}, 100 tokens/s, 20-token answers, TTFT "
             f"20 ms): {slots} slots, ideal {ideal:.2f} s for {a.lines} lines. Targets: auto speed >= 0.95 of "
             "infergate-800's; fleet full within 2 s; at most 1 waiting at a backend after the first second. "
             "'fleet full at': the first 0.1 s sample with the gateway's requests on backends >= 98% of the "
             "slots (infergate runs only)." + (f" reference: the build in {a.reference}." if a.reference else ""))
    B.record("fleet", f"{a.backends} backends from the first second", B.command_line(), mach,
             {"results": results, "ideal_s": ideal, "slots": slots}, table, notes)


if __name__ == "__main__":
    main()
