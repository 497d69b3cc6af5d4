#!/usr/bin/env python3
"""A server's data-parallel ranks routed by the gateway against the server's own round-robin,
with one rank slowed. One `infergate-sim --dp-ranks 4 --dp-rank-slowdown 1=F` (each rank its own
--max-running slots and FIFO; rank 1 F times slower: its TTFT and token intervals), the gateway in
front, a fixed closed-loop workload of streamed chat completions (`infergate-bulk --stream`,
C in flight, C above the four ranks' slots together), fresh processes for each target, all targets
in one run:

  server-rr              the reference: the backend without dp_ranks; the gateway sees one server
                         (its slots the sum of the ranks' from the load report) and the server
                         deals requests to its ranks in turn, as SGLang's data-parallel controller
                         does (round_robin_scheduler) and vLLM's API server when the request names
                         no rank
  gateway-ranks          the backend with "dp_ranks": 4: each rank a sub-backend with its own
                         slots, load and queue; the gateway picks the rank (default policy,
                         least-loaded) and names it in the X-Data-Parallel-Rank header, which
                         both servers read before balancing (SGLang before the body's
                         routed_dp_rank)
  gateway-ranks-POLICY   the same with `--policy POLICY`
  ...-vllm               the same in vLLM's flavor (`--flavor vllm`, "engine": "vllm"); its ratios
                         are to server-rr-vllm

Per target, from the client's summary: TTFT p50/p99 (to the first streamed token, queueing in the
gateway included), requests/s and output tokens/s over the run's wall time, errors and retries;
from the simulator's /sim/state the requests each rank served (ranks[].requests_served); from the
gateway's /health/backends how many backends it kept for the server (1 without rank routing, 4
with) and what each served.

What to expect: a rank serves at most S / (TTFT + N / R) requests/s (S slots, N tokens at R
tokens/s), the slowed one F times less. Dealt in turn, every rank gets a quarter of the requests,
so the slow rank bounds the whole server at 4x its own rate and most requests in flight wait in
its FIFO; a router that sees each rank's free slots can keep the fast ranks full: the bound is
the sum of the four. Both bounds are printed with the figures.

Usage: python3 bench/dp.py [--targets server-rr,gateway-ranks,...] [--requests 600]
       [--concurrency 64] [--slowdown 4] [--max-running 8]
Env: IG_BUILD (build dir, default ./build), IG_BENCH_TMP.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

RANKS = 4
SLOW_RANK = 1
TTFT_MS = 20
TPS = 100
TOKENS = 50
TARGETS = ["server-rr", "gateway-ranks", "gateway-ranks-round-robin", "server-rr-vllm", "gateway-ranks-vllm"]


def parse_target(t):
    """(ranks routed by the gateway, its policy or None for the default, flavor) of a name."""
    m = re.fullmatch(r"(server-rr|gateway-ranks)(?:-(.+?))??(-vllm)?", t)
    if not m or (m.group(1) == "server-rr" and m.group(2)):
        sys.exit(f"--targets: '{t}' is neither server-rr[-vllm] nor gateway-ranks[-POLICY][-vllm]")
    return m.group(1) == "gateway-ranks", m.group(2), "vllm" if m.group(3) else "sglang"


def reference(t):
    return "server-rr-vllm" if parse_target(t)[2] == "vllm" else "server-rr"


def rank_capacity(args, factor=1.0):
    """Requests/s one rank completes with its slots always full."""
    return args.max_running / (factor * (TTFT_MS / 1000 + TOKENS / TPS))


def start_gateway(procs, conf, extra):
    """infergate with the config file, once every backend it made of it is healthy and its
    slots are known (a count of 1 or of RANKS: the script runs before and after the gateway
    learned to route by rank)."""
    port = B.free_port()
    p = procs.start("gateway", [B.binary("infergate"), "--listen", f"127.0.0.1:{port}", "--log-level", "warn",
                                "--config", conf] + extra)
    url = f"http://127.0.0.1:{port}"

    def ready(status, body):
        if status != 200:
            return False
        bs = json.loads(body or b"{}").get("backends") or []
        return bool(bs) and all(b.get("state") == "up" and (b.get("limit") or 0) > 0 for b in bs)
    B.wait_http(url + "/health/backends", ok=ready, proc=p)
    return url


def measure(target, args, corpus, workdir):
    by_rank, policy, flavor = parse_target(target)
    procs = B.Procs(os.path.join(workdir, target))
    try:
        sims, _ = B.start_sims(procs, 1, ["--flavor", flavor, "--dp-ranks", str(RANKS),
                                          "--dp-rank-slowdown", f"{SLOW_RANK}={args.slowdown:g}",
                                          "--max-running", str(args.max_running), "--ttft-ms", str(TTFT_MS),
                                          "--tokens-per-second", str(TPS), "--output-tokens", str(TOKENS)])
        conf = os.path.join(procs.workdir, "gateway.json")
        with open(conf, "w") as f:
            # the same entry in both but for dp_ranks (engine: which server it is, as a user would say)
            json.dump({"backends": [dict({"url": sims[0], "engine": flavor},
                                         **({"dp_ranks": RANKS} if by_rank else {}))]}, f)
        gw = start_gateway(procs, conf, ["--policy", policy] if policy else [])
        out = os.path.join(procs.workdir, "out.jsonl")
        summary = os.path.join(procs.workdir, "summary.json")
        if os.path.exists(summary):
            os.unlink(summary)
        bulk = procs.start("bulk", [B.binary("infergate-bulk"), "--input", corpus, "--output", out,
                                    "--url", gw, "--model", "sim-model", "--max-tokens", str(TOKENS),
                                    "--concurrency", str(args.concurrency), "--stream", "--priority", "none",
                                    "--summary-json", summary, "--progress-interval-s", "30"])
        t0 = time.time()
        while bulk.poll() is None:
            time.sleep(0.2)
            if time.time() - t0 > args.time_cap:
                B.log(f"{target}: stopped at the {args.time_cap} s cap")
                procs.stop(bulk, timeout=3)
                break
        if not os.path.exists(summary):
            sys.exit(f"{target}: infergate-bulk wrote no summary (exit {bulk.returncode}); see "
                     f"{procs.workdir}/bulk.log")
        with open(summary) as f:
            s = json.load(f)
        st, body = B.http(sims[0] + "/sim/state")
        ranks = [r["requests_served"] for r in json.loads(body)["ranks"]] if st == 200 else []
        st, body = B.http(gw + "/health/backends")
        gbs = json.loads(body)["backends"] if st == 200 else []
        fig = {"target": target, "flavor": flavor, "policy": policy or "least-loaded (default)",
               "dp_ranks_in_config": RANKS if by_rank else None,
               "ok": s["ok"], "errors": s["errors"], "retries": s["retries"], "errors_by_code": s["errors_by_code"],
               "complete": s["complete"], "wall_s": s["wall_time_s"], "rps": s["ok"] / s["wall_time_s"],
               "output_tokens": s["output_tokens"], "output_tps": s["output_tokens_per_s"],
               "ttft_ms": s["ttft_ms"], "latency_ms": s["latency_ms"], "served_per_rank": ranks,
               "gateway_backends": [{k: b.get(k) for k in ("url", "served", "limit", "limit_from", "dp_rank")
                                     if k in b} for b in gbs]}
        B.log(f"{target:28} {fig['ok']} ok, {fig['errors']} errors, {fig['retries']} retries in "
              f"{fig['wall_s']:.1f} s = {fig['rps']:.1f} req/s, {fig['output_tps']:,.0f} tok/s; TTFT p50 "
              f"{s['ttft_ms']['p50']:,.0f} p99 {s['ttft_ms']['p99']:,.0f} ms; served per rank {ranks}; "
              f"gateway backends {len(gbs)}")
        return fig
    finally:
        procs.stop_all()


def backends_cell(gbs):
    """"4: 8 8 8 8 (reported)": the backends the gateway made of the server and the requests in
    flight each was allowed at the end, with where that limit came from."""
    froms = sorted({str(b.get("limit_from")) for b in gbs})
    return f"{len(gbs)}: " + " ".join(str(b.get("limit")) for b in gbs) + f" ({', '.join(froms)})"


def ratio(x, ref):
    return f"{x / ref:.2f}" if ref else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help="server-rr[-vllm] and gateway-ranks[-POLICY][-vllm]; each flavor's server-rr is the "
                         f"reference of its targets [{','.join(TARGETS)}]")
    ap.add_argument("--requests", type=int, default=600, help="streamed chat completions per target [600]")
    ap.add_argument("--concurrency", type=int, default=64,
                    help="requests in flight, above the ranks' slots together [64: twice 4 x 8]")
    ap.add_argument("--slowdown", type=float, default=4.0, help=f"rank {SLOW_RANK}'s --dp-rank-slowdown factor [4]")
    ap.add_argument("--max-running", type=int, default=8, help="slots per rank [8]")
    ap.add_argument("--time-cap", type=int, default=90, help="seconds per target at most [90]")
    args = ap.parse_args()
    targets = args.targets.split(",")
    for t in targets:
        parse_target(t)
    for b in ("infergate", "infergate-sim", "infergate-bulk"):
        B.binary(b)
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"dp-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(args.requests), "--seed", "3",
                           "--output", corpus], stdout=subprocess.DEVNULL)
    fast, slow = rank_capacity(args), rank_capacity(args, args.slowdown)
    rr_bound, sum_bound = RANKS * slow, (RANKS - 1) * fast + slow
    B.log(f"a rank serves {fast:.1f} req/s, rank {SLOW_RANK} {slow:.1f}: round-robin bound {rr_bound:.1f} req/s, "
          f"the ranks' sum {sum_bound:.1f}")

    figs = [measure(t, args, corpus, workdir) for t in targets]
    refs = {f["target"]: f for f in figs if f["target"] in ("server-rr", "server-rr-vllm")}
    rows = []
    for f in figs:
        r = refs.get(reference(f["target"]))
        rows.append([f["target"], f["flavor"], f["policy"] if f["dp_ranks_in_config"] else "-",
                     f"{f['ok']}{'' if f['complete'] else ' (capped)'}", f"{f['errors']} / {f['retries']}",
                     f"{f['wall_s']:.1f}", f"{f['rps']:.1f}", ratio(f["rps"], r and r["rps"]),
                     f"{f['output_tps']:,.0f}", ratio(f["output_tps"], r and r["output_tps"]),
                     f"{f['ttft_ms']['p50']:,.0f}", ratio(f["ttft_ms"]["p50"], r and r["ttft_ms"]["p50"]),
                     f"{f['ttft_ms']['p99']:,.0f}", ratio(f["ttft_ms"]["p99"], r and r["ttft_ms"]["p99"]),
                     " / ".join(str(n) for n in f["served_per_rank"]), backends_cell(f["gateway_backends"])])
    table = B.md_table(["target", "flavor", "gateway policy over ranks", "requests ok", "errors / retries",
                        "wall s", "req/s", "vs server-rr", "output tok/s", "vs", "TTFT p50 ms", "vs",
                        "TTFT p99 ms", "vs", f"served by rank 0..{RANKS - 1} (rank {SLOW_RANK} slowed)",
                        "gateway's backends: their limits at the end"], rows)
    notes = (f"One `infergate-sim --dp-ranks {RANKS} --dp-rank-slowdown {SLOW_RANK}={args.slowdown:g} --max-running "
             f"{args.max_running} --ttft-ms {TTFT_MS} --tokens-per-second {TPS} --output-tokens {TOKENS}` "
             f"(`--flavor` as named) and one gateway per target, fresh; the backend entry "
             f"`{{\"url\": ..., \"engine\": FLAVOR}}`, with `\"dp_ranks\": {RANKS}` for gateway-ranks. Workload: "
             f"`infergate-bulk --stream --concurrency {args.concurrency} --priority none` over {args.requests} "
             f"generated chat prompts, max_tokens {TOKENS}; TTFT from the client (the gateway's queue included: "
             f"{args.concurrency} in flight against {RANKS * args.max_running} slots). A rank serves "
             f"{fast:.1f} requests/s with its slots full, rank {SLOW_RANK} {slow:.1f}: dealt in turn, the server "
             f"is bound at {rr_bound:.1f} requests/s ({RANKS} x the slow rank); the four ranks' sum is "
             f"{sum_bound:.1f}. Served by rank: the simulator's /sim/state ranks[].requests_served. The gateway's "
             f"backends: how many /health/backends lists for the server (1: it does not route by rank) and each "
             f"one's limit at the end of the run (limit, limit_from: reported by the server's load report, learned "
             f"by the gateway from its queue, ramp while it learns). vs: the "
             f"ratio to the same flavor's server-rr in this run. Client, gateway and simulator on the same "
             f"2 cores." + "".join(
                 f" {f['target']} against {reference(f['target'])}: {f['rps'] / r['rps']:.2f}x the requests/s "
                 f"({100 * f['rps'] / sum_bound:.0f}% of the ranks' sum), {f['ttft_ms']['p99'] / r['ttft_ms']['p99']:.2f}x "
                 f"the TTFT p99."
                 for f in figs for r in [refs.get(reference(f["target"]))]
                 if r and f is not r and r["rps"] and r["ttft_ms"]["p99"]))
    B.record("dp", "Data-parallel ranks: routed by the gateway against the server's round-robin, one rank slowed",
             B.command_line(), mach, {"ranks": RANKS, "slow_rank": SLOW_RANK, "slowdown": args.slowdown,
                                      "max_running": args.max_running, "ttft_ms": TTFT_MS, "tokens_per_s": TPS,
                                      "output_tokens": TOKENS, "requests": args.requests,
                                      "concurrency": args.concurrency, "rank_rps": fast, "slow_rank_rps": slow,
                                      "round_robin_bound_rps": rr_bound, "sum_bound_rps": sum_bound, "runs": figs},
             table, notes)


if __name__ == "__main__":
    main()
