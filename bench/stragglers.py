#!/usr/bin/env python3
"""Issue 33: a straggler's cost, with hedging and without. Seven infergate-sim, one of them 20x
slower to decode (the others answer 50 tokens in about 110 ms, it in about 2 s), the gateway in
front; N non-streamed chat requests of class normal, C at a time, timed end to end. The same
workload through a gateway without hedging and through one with `--hedge-after-ms` (within
`--hedge-budget-percent`), each on fresh processes: p50, p99 and max latency side by side, the
p99 against the p50 (at f62086c: 17.8x, 1,964 ms against 110 ms), and the hedges sent, won and
lost with the backend time of the losers (the waste).

Usage: python3 bench/stragglers.py [--requests 280] [--concurrency 28] [--hedge-after-ms 300]
       [--budget 5]
Env: IG_BUILD (build dir, default ./build), IG_BENCH_TMP.
"""

import argparse
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

SIMS = 7
TPS, SLOW_TPS = 500, 25   # the slow one decodes 20x slower


def one_run(a, label, gw_extra):
    procs = B.Procs(os.path.join(B.TMP, f"stragglers-{label.split()[0]}"))
    try:
        args = [["--tokens-per-second", str(SLOW_TPS if i == 0 else TPS), "--ttft-ms", "10",
                 "--output-tokens", "50"] for i in range(SIMS)]
        sims, _ = B.start_sims(procs, SIMS, args)
        gw, _ = B.start_gateway(procs, sims, extra=list(gw_extra))
        todo = list(range(a.requests))
        lat, lock, statuses = [], threading.Lock(), {}

        def worker():
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop()
                t0 = time.monotonic()
                st, _ = B.http(gw + "/v1/chat/completions",
                               {"model": "sim-model", "max_tokens": 50,
                                "messages": [{"role": "user", "content": f"straggler {i}"}]}, timeout=60)
                with lock:
                    lat.append((time.monotonic() - t0) * 1000)
                    statuses[st] = statuses.get(st, 0) + 1

        t0 = time.monotonic()
        ws = [threading.Thread(target=worker) for _ in range(a.concurrency)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        wall = time.monotonic() - t0
        h = B.metrics(gw, "infergate_hedge")
        g = lambda o: h.get(f'infergate_hedges_total{{outcome="{o}"}}', 0)   # noqa: E731
        return {"label": label, "p50": B.pct(lat, 50), "p99": B.pct(lat, 99), "max": max(lat), "wall_s": wall,
                "statuses": statuses, "sent": g("sent"), "won": g("won"), "lost": g("lost"),
                "not_sent": g("not_sent"), "waste_s": h.get("infergate_hedge_waste_seconds_total", 0)}
    finally:
        procs.stop_all()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=280)
    ap.add_argument("--concurrency", type=int, default=28)
    ap.add_argument("--hedge-after-ms", type=int, default=300)
    ap.add_argument("--budget", type=int, default=5)
    a = ap.parse_args()
    mach = B.machine()
    runs = [one_run(a, "without hedging", []),
            one_run(a, f"hedge.after_ms {a.hedge_after_ms}, budget {a.budget}%",
                    ["--hedge-after-ms", str(a.hedge_after_ms), "--hedge-budget-percent", str(a.budget)])]
    rows = [[r["label"], f"{r['p50']:.0f}", f"{r['p99']:.0f}", f"{r['max']:.0f}", f"{r['p99'] / r['p50']:.1f}x",
             f"{r['wall_s']:.1f}", f"{r['sent']:.0f} / {r['won']:.0f} / {r['lost']:.0f} / {r['not_sent']:.0f}",
             f"{r['waste_s']:.1f}", json.dumps(r["statuses"])] for r in runs]
    table = B.md_table(["gateway", "p50 ms", "p99 ms", "max ms", "p99 / p50", "wall s",
                        "hedges sent / won / lost / not sent", "losers' backend s", "statuses"], rows)
    base, hedged = runs
    notes = (f"{SIMS} simulators (`--ttft-ms 10 --output-tokens 50`, {TPS} tokens/s; sim1 {SLOW_TPS} tokens/s: "
             f"20x slower), the default policy; {a.requests} non-streamed chat requests of class normal, "
             f"{a.concurrency} at a time, timed end to end by the client. p99 with hedging against without: "
             f"{hedged['p99']:.0f} ms against {base['p99']:.0f} ms ({hedged['p99'] / base['p99']:.2f}x); "
             f"at f62086c the p99 was 17.8x the p50.")
    B.record("stragglers", "A straggler's cost, with hedging and without", B.command_line(), mach,
             {"runs": runs}, table, notes)


if __name__ == "__main__":
    main()
