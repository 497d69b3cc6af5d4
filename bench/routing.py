#!/usr/bin/env python3
"""Part 5: routing quality. Seven simulators of unequal capacity (batch slots and decode
speed each differing up to 4x), one of which turns slow (POST /sim/fault {"mode":"slow"}:
TTFT x10, decode /10) once half the workload is done. A fixed-size closed-loop workload
(infergate-bulk, M prompts, C in flight) goes through the gateway once per policy;
throughput = M / wall time, compared with the ideal.

Ideal: a simulator with S slots, first-token delay T and decode rate R, answering N tokens
per request, completes at most S / (T + N/R) requests/s when its slots are always full.
The ideal router keeps every slot full and no request waiting behind a slower one, so the
ideal throughput is the sum of these capacities: C_before while all are well, C_after once
one is slow. The workload's first half runs at C_before, the second at C_after:
ideal time = (M/2)/C_before + (M/2)/C_after, ideal throughput = M / ideal time. (It
ignores the last service time at the end, under 1 s here, which no router can avoid.)

Usage: python3 bench/routing.py [--requests M] [--concurrency C] [--policies a,b,...]
       [--time-cap S]
Env: IG_BUILD (build dir, default ./build), IG_BENCH_TMP.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

TOKENS = 50
TTFT_MS = 20
# (batch slots, tokens/s): slots 8..32 (4x), speed 25..100 (4x)
SIMS = [(32, 100), (32, 50), (16, 100), (16, 50), (8, 100), (32, 25), (8, 50)]
SLOW = 2          # index of the simulator that turns slow halfway (16 slots, 100 tok/s)
HEDGE_MS = 2500   # the +hedge variants' hedge.after_ms: past a well server's slowest answer


def capacity(slots, tps, ttft_ms):
    return slots / (ttft_ms / 1000 + TOKENS / tps)


def run_policy(policy, corpus, m, conc, cap_s, workdir):
    """One fresh set of simulators and one gateway; returns figures of the run."""
    procs = B.Procs(os.path.join(workdir, policy))
    args = [["--max-running", str(s), "--tokens-per-second", str(r), "--ttft-ms", str(TTFT_MS),
             "--output-tokens", str(TOKENS)] for s, r in SIMS]
    sims, _ = B.start_sims(procs, len(SIMS), args)
    if policy == "least-loaded+max_inflight":
        # the gateway keeps the queue and sends only when a backend has a free slot
        cfg = os.path.join(procs.workdir, "gateway.json")
        with open(cfg, "w") as f:
            json.dump({"policy": "least-loaded",
                       "queue_size": max(1024, conc), "queue_timeout_ms": 600000,
                       "backends": [{"url": u, "max_inflight": s}
                                    for u, (s, _) in zip(sims, SIMS)]}, f)
        gw, gwp = B.start_gateway(procs, sims, config=cfg)   # --listen overrides the file
    elif policy.endswith("+hedge-p95"):
        # the same, hedged after the model's learned p95 time to first byte (hedge.after_ms -1)
        gw, gwp = B.start_gateway(procs, sims, extra=["--policy", policy[:-len("+hedge-p95")],
                                                      "--hedge-after-ms", "-1", "--hedge-budget-percent", "5"])
    elif policy.endswith("+hedge"):
        # stragglers hedged: no byte after HEDGE_MS (a well server answers 50 tokens in 0.5-2 s;
        # the slowed one in 5.2 s), within 5% of the requests a minute
        gw, gwp = B.start_gateway(procs, sims, extra=["--policy", policy[:-len("+hedge")],
                                                      "--hedge-after-ms", str(HEDGE_MS),
                                                      "--hedge-budget-percent", "5"])
    elif policy.endswith("+normal"):
        # the +hedge variant's reference: the same class (normal), no hedging
        gw, gwp = B.start_gateway(procs, sims, extra=["--policy", policy[:-len("+normal")]])
    elif policy.endswith("+gateway-load"):
        # blind to the backends' own queues: counts only its own requests in flight
        gw, gwp = B.start_gateway(procs, sims, extra=["--policy", policy[:-len("+gateway-load")],
                                                      "--load-source", "gateway"])
    else:
        gw, gwp = B.start_gateway(procs, sims, extra=["--policy", policy])
    out = os.path.join(procs.workdir, "out.jsonl")
    progress = os.path.join(procs.workdir, "progress.json")
    summary = os.path.join(procs.workdir, "summary.json")
    p = procs.start("bulk", [B.binary("infergate-bulk"), "--input", corpus, "--output", out,
                             "--url", gw, "--model", "sim-model", "--concurrency", str(conc),
                             "--progress-file", progress, "--summary-json", summary,
                             "--progress-interval-s", "30"]
                    # class low (the bulk client's default) is never hedged: these run as normal
                    + (["--priority", "normal"] if policy.endswith(("+hedge", "+hedge-p95", "+normal")) else []))
    t0 = time.time()
    t_fault = None
    done = done_at_fault = 0
    while p.poll() is None:
        time.sleep(0.2)
        try:
            with open(progress) as f:
                done = json.load(f).get("done", 0)
        except (OSError, ValueError):
            pass
        if t_fault is None and done >= m // 2:
            B.http(sims[SLOW] + "/sim/fault", {"mode": "slow"})
            t_fault = time.time() - t0
            done_at_fault = done
            B.log(f"{policy}: {done} done at {t_fault:.1f} s: {sims[SLOW]} is now slow")
        if time.time() - t0 > cap_s:
            B.log(f"{policy}: stopped at the {cap_s} s cap with {done} of {m} done")
            procs.stop(p, timeout=3)
            break
    wall = time.time() - t0
    served = {}
    st, body = B.http(gw + "/health/backends")
    if st == 200:
        for b in json.loads(body)["backends"]:
            served[b["url"]] = b["served"]
    hedges = B.metrics(gw, ("infergate_hedges_total{", "infergate_hedge_waste_seconds_total ",
                            "infergate_hedge_waste_prompt_tokens_total "))
    capped = p.returncode is None or not os.path.exists(summary)
    if not capped:
        with open(summary) as f:
            s = json.load(f)
        wall, done = s["wall_time_s"], s["ok"]
    procs.stop_all()
    return {"policy": policy, "done": done, "wall_s": wall, "rps": done / wall,
            "capped": capped, "fault_at_s": t_fault, "done_at_fault": done_at_fault,
            "rps_before_fault": done_at_fault / t_fault if t_fault else None,
            "served": [served.get(u, 0) for u in sims], "hedges": hedges}


def k(outcome):
    return f'infergate_hedges_total{{outcome="{outcome}"}}'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=6000, help="workload size M [6000]")
    ap.add_argument("--concurrency", type=int, default=448, help="requests in flight C [448]")
    ap.add_argument("--policies", default="least-loaded,power-of-two,round-robin,"
                                          "least-loaded+gateway-load,least-loaded+max_inflight")
    ap.add_argument("--time-cap", type=int, default=120, help="seconds per policy at most [120]")
    args = ap.parse_args()

    mach = B.machine()
    workdir = os.path.join(B.TMP, f"routing-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(args.requests),
                           "--seed", "2", "--output", corpus], stdout=subprocess.DEVNULL)
    caps = [capacity(s, r, TTFT_MS) for s, r in SIMS]
    c_before = sum(caps)
    c_after = c_before - caps[SLOW] + capacity(SIMS[SLOW][0], SIMS[SLOW][1] / 10, TTFT_MS * 10)
    ideal_t = (args.requests / 2) / c_before + (args.requests / 2) / c_after
    ideal = args.requests / ideal_t
    B.log(f"capacities {[round(c, 1) for c in caps]} req/s; sum {c_before:.1f}, "
          f"{c_after:.1f} once sim{SLOW + 1} is slow; ideal {ideal:.1f} req/s ({ideal_t:.1f} s)")

    runs = []
    for pol in args.policies.split(","):
        r = run_policy(pol, corpus, args.requests, args.concurrency, args.time_cap, workdir)
        B.log(f"{pol}: {r['done']} in {r['wall_s']:.1f} s = {r['rps']:.1f} req/s "
              f"({100 * r['rps'] / ideal:.0f}% of ideal); served per backend {r['served']}"
              + (f"; hedges {r['hedges']}" if r["hedges"].get('infergate_hedges_total{outcome="sent"}') else ""))
        runs.append(r)
    def first_half(r):
        if not r["rps_before_fault"]:
            return "-"
        return f"{r['rps_before_fault']:.1f} ({100 * r['rps_before_fault'] / c_before:.0f}%)"
    rows = [[r["policy"], f"{r['done']:,}{' (capped)' if r['capped'] else ''}",
             f"{r['wall_s']:.1f}", f"{r['rps']:.1f}", f"{r['rps'] * TOKENS:,.0f}",
             f"{100 * r['rps'] / ideal:.1f}%", first_half(r),
             " ".join(str(x) for x in r["served"])]
            for r in runs]
    rows.append(["ideal", f"{args.requests:,}", f"{ideal_t:.1f}", f"{ideal:.1f}",
                 f"{ideal * TOKENS:,.0f}", "100%", f"{c_before:.1f} (100%)",
                 " ".join(f"{c / c_before * args.requests / 2 + c2 / c_after * args.requests / 2:.0f}"
                          for c, c2 in zip(caps, caps[:SLOW] + [c_after - c_before + caps[SLOW]]
                                           + caps[SLOW + 1:]))])
    table = B.md_table(["policy", "requests done", "wall s", "req/s", "output tok/s",
                        "of ideal", "req/s until the fault (of sum)",
                        "served per backend (sim1..sim7)"], rows)
    sims_desc = ", ".join(f"sim{i + 1} {s} slots x {r} tok/s = {c:.1f} req/s"
                          for i, ((s, r), c) in enumerate(zip(SIMS, caps)))
    notes = (f"Simulators (`--output-tokens {TOKENS} --ttft-ms {TTFT_MS}`): {sims_desc}; "
             f"sum {c_before:.1f} req/s. sim{SLOW + 1} turns slow when {args.requests // 2:,} "
             f"requests are done (then {c_after:.1f} req/s in all). Workload: "
             f"`infergate-bulk --concurrency {args.concurrency}` over {args.requests:,} "
             f"generated prompts, a fresh set of simulators and gateway per policy. "
             f"The first three use the defaults (load_source backend: each backend's slot count "
             f"is learned from its own load report, and the surplus waits in the gateway's "
             f"queue). least-loaded+gateway-load: `--load-source gateway`, blind to the "
             f"backends' queues (the default before this was learned). "
             f"least-loaded+max_inflight: each backend's `max_inflight` set by hand to its slot "
             f"count, the reference for what learning should reach. A `+hedge` variant: "
             f"`--hedge-after-ms {HEDGE_MS} --hedge-budget-percent 5`, its requests of class normal "
             f"(`infergate-bulk --priority normal`: low is not hedged unless `hedge.low`), against "
             f"`+normal`, the same class without hedging; `+hedge-p95`: after the model's learned p95 "
             f"time to first byte (`--hedge-after-ms -1`)" +
             "".join(f"; {r['policy']}: hedges sent {r['hedges'].get(k('sent'), 0):.0f}, won "
                     f"{r['hedges'].get(k('won'), 0):.0f}, lost {r['hedges'].get(k('lost'), 0):.0f}, not sent "
                     f"{r['hedges'].get(k('not_sent'), 0):.0f} (budget or no free slot), backend time of the "
                     f"losers {r['hedges'].get('infergate_hedge_waste_seconds_total', 0):.1f} s and the "
                     f"prompts they were sent "
                     f"{r['hedges'].get('infergate_hedge_waste_prompt_tokens_total', 0):,.0f} tokens"
                     for r in runs if "+hedge" in r["policy"]) + ".")
    B.record("routing", "Routing quality", B.command_line(), mach,
             {"ideal_rps": ideal, "capacity_before": c_before, "capacity_after": c_after,
              "runs": runs}, table, notes)


if __name__ == "__main__":
    main()
