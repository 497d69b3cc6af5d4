#!/usr/bin/env python3
"""Issue 21: more than one core. The gateway with one reactor against two (`--workers`), and
nginx with one worker against two as the reference of what this machine lets a proxy gain,
in front of the same seven simulators, in one run, alternating --rounds times.

Placements (taskset-style affinity, inherited by each process and its threads):
  1 core   the proxy on CPU 0 (one reactor / one worker), wrk and the simulators on CPU 1:
           the proxy's own core is its limit.
  2 cores  the proxy on CPUs 0-1 (two reactors / two workers), and so are wrk and the
           simulators: a 2-core machine has no third core for the load, so the load takes
           its share of the same two. The gateway with one reactor placed the same way is
           run too ("1 reactor, 2 cores"), so what the second reactor adds is read at equal
           placement.

Figures per configuration (medians over the rounds): req/s, p99, the proxy's CPU
(user+system, % of one core), requests per CPU-second of the proxy (its efficiency: a lock
that contended would lower it), and per-core throughput (req/s divided by the cores the
proxy used). With two reactors, the gateway's lock from its /metrics: wall time held per
request (the holder preempted counts too: an upper bound on this shared machine), times
taken per request, the share of takings another reactor was holding it, and the ceiling
1 / held it would set on any number of cores. What a 32-core host would give is argued in bench/results/profile-notes.md.

Usage: python3 bench/scaling.py [--duration S] [--rounds N] [--connections N]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402
import proxy as P  # noqa: E402


def med(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=8, help="seconds per run [8]")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of all configurations [3]")
    ap.add_argument("--connections", type=int, default=64, help="wrk connections [64]")
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("scaling.py needs two CPUs (0 and 1) this process may use")
    B.need(("wrk", "wrk"), ("nginx", "nginx-light"))
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"scaling-{os.getpid()}")
    procs = B.Procs(workdir)
    both, one, other = {0, 1}, {0}, {1}

    os.sched_setaffinity(0, other)
    sims, _ = B.start_sims(procs, 7, P.SIM_ARGS)
    for p in procs.procs:                      # the simulators: CPU 1 for the 1-core runs
        os.sched_setaffinity(p.pid, other)
    targets = []                               # (name, url, pid, proxy cores, load cores)
    os.sched_setaffinity(0, one)
    u, p = B.start_gateway(procs, sims, extra=["--workers", "1"], name="gw-1")
    targets.append(("infergate, 1 reactor, 1 core", u, p.pid, one, other))
    u, p = P.start_nginx(procs, sims, os.path.join(workdir, "ng1"), 1)
    targets.append(("nginx, 1 worker, 1 core", u, p.pid, one, other))
    os.sched_setaffinity(0, both)
    u, p = B.start_gateway(procs, sims, extra=["--workers", "2"], name="gw-2")
    targets.append(("infergate, 2 reactors, 2 cores", u, p.pid, both, both))
    u, p = B.start_gateway(procs, sims, extra=["--workers", "1"], name="gw-1b")
    targets.append(("infergate, 1 reactor, 2 cores", u, p.pid, both, both))
    u, p = P.start_nginx(procs, sims, os.path.join(workdir, "ng2"), 2)
    targets.append(("nginx, 2 workers, 2 cores", u, p.pid, both, both))
    sim_pids = [q.pid for q in procs.procs[:7]]

    def lock_figures(url):
        """The gateway's lock counters (only with more than one reactor), or None."""
        try:
            text = B.http(url + "/metrics")[1].decode()
        except Exception:  # noqa: BLE001 - nginx has no /metrics of this kind
            return None
        vals = {}
        for line in text.splitlines():
            for k in ("infergate_lock_acquisitions_total", "infergate_lock_contended_total",
                      "infergate_lock_held_seconds_total", "infergate_requests_total"):
                if line.startswith(k + " ") or (k == "infergate_requests_total" and line.startswith(k + "{")):
                    vals[k] = vals.get(k, 0.0) + float(line.rsplit(" ", 1)[1])
        return vals if "infergate_lock_held_seconds_total" in vals else None

    runs = {t[0]: [] for t in targets}
    for _ in range(args.rounds):
        for name, url, pid, _pc, load in targets:
            for sp in sim_pids:
                os.sched_setaffinity(sp, load)
            os.sched_setaffinity(0, load)      # wrk starts from here
            l0 = lock_figures(url) if name.startswith("infergate") else None
            r = P.measure(name, url, pid, args.connections, args.duration, len(load))
            l1 = lock_figures(url) if l0 else None
            if l0 and l1:
                reqs = l1.get("infergate_requests_total", 0) - l0.get("infergate_requests_total", 0)
                held = l1["infergate_lock_held_seconds_total"] - l0["infergate_lock_held_seconds_total"]
                taken = l1["infergate_lock_acquisitions_total"] - l0["infergate_lock_acquisitions_total"]
                r["lock_held_us_per_req"] = held * 1e6 / max(reqs, 1)
                r["lock_acq_per_req"] = taken / max(reqs, 1)
                r["lock_contended_share"] = ((l1["infergate_lock_contended_total"] - l0["infergate_lock_contended_total"])
                                             / max(taken, 1))
            runs[name].append(r)
    os.sched_setaffinity(0, both)

    figs, rows = {}, []
    for name, *_ in targets:
        rs = runs[name]
        f = {k: med([r[k] for r in rs]) for k in ("rps", "p99_ms", "cpu_pct")}
        f["req_per_cpu_s"] = med([r["rps"] / max(r["cpu_pct"], 1) * 100 for r in rs])
        f["errors"] = sum(r["errors"] for r in rs)
        f["rounds"] = [[r["rps"], r["p99_ms"], r["cpu_pct"]] for r in rs]
        if all("lock_held_us_per_req" in r for r in rs):
            for k in ("lock_held_us_per_req", "lock_acq_per_req", "lock_contended_share"):
                f[k] = med([r[k] for r in rs])
        figs[name] = f
        rows.append([name, f"{f['rps']:,.0f}", f"{f['p99_ms']:.2f}", f"{f['cpu_pct']:.0f}%",
                     f"{f['req_per_cpu_s']:,.0f}", f"{f['rps'] / max(f['cpu_pct'], 1) * 100:,.0f}", f["errors"]])
    table = B.md_table(["configuration", "req/s", "p99 ms", "proxy CPU", "req per proxy CPU-s",
                        "req/s per core used", "errors"], rows)
    g1, g2, g1b = (figs["infergate, 1 reactor, 1 core"], figs["infergate, 2 reactors, 2 cores"],
                   figs["infergate, 1 reactor, 2 cores"])
    n1, n2 = figs["nginx, 1 worker, 1 core"], figs["nginx, 2 workers, 2 cores"]
    ratios = {"infergate_2_over_1_rps": g2["rps"] / g1["rps"], "nginx_2_over_1_rps": n2["rps"] / n1["rps"],
              "infergate_2r_over_1r_same_cores_rps": g2["rps"] / g1b["rps"],
              "infergate_2_over_1_req_per_cpu_s": g2["req_per_cpu_s"] / g1["req_per_cpu_s"],
              "nginx_2_over_1_req_per_cpu_s": n2["req_per_cpu_s"] / n1["req_per_cpu_s"],
              "infergate_over_nginx_1_core_rps": g1["rps"] / n1["rps"],
              "infergate_over_nginx_2_cores_rps": g2["rps"] / n2["rps"]}
    table += "\n\n" + B.md_table(["ratio", "infergate", "nginx"], [
        ["req/s, 2 cores / 1 core", f"{ratios['infergate_2_over_1_rps']:.2f}", f"{ratios['nginx_2_over_1_rps']:.2f}"],
        ["req per CPU-s, 2 cores / 1 core", f"{ratios['infergate_2_over_1_req_per_cpu_s']:.2f}",
         f"{ratios['nginx_2_over_1_req_per_cpu_s']:.2f}"],
        ["req/s, 2 reactors / 1 reactor, both on 2 cores", f"{ratios['infergate_2r_over_1r_same_cores_rps']:.2f}", ""],
        ["req/s, infergate / nginx, 1 core", f"{ratios['infergate_over_nginx_1_core_rps']:.2f}", ""],
        ["req/s, infergate / nginx, 2 cores", f"{ratios['infergate_over_nginx_2_cores_rps']:.2f}", ""]])
    lk = figs["infergate, 2 reactors, 2 cores"]
    if "lock_held_us_per_req" in lk:
        table += "\n\n" + B.md_table(["the gateway's lock, 2 reactors", "per request"], [
            ["held (wall time, µs)", f"{lk['lock_held_us_per_req']:.2f}"],
            ["taken (times)", f"{lk['lock_acq_per_req']:.2f}"],
            ["of which another reactor held it", f"{100 * lk['lock_contended_share']:.1f}%"],
            ["ceiling it sets (1 / held)", f"{1e6 / max(lk['lock_held_us_per_req'], 1e-9):,.0f} req/s"]])
    notes = (f"wrk -c{args.connections} -d{args.duration}s (threads: one per load core) with bench/lib/post.lua; "
             f"seven `infergate-sim {' '.join(P.SIM_ARGS)}`; medians of {args.rounds} rounds, the "
             "configurations alternating. 1 core: the proxy alone on CPU 0, wrk and the simulators on CPU 1. "
             "2 cores: proxy, wrk and simulators all on CPUs 0-1 (this machine has no third core for the "
             "load), so the 2-core figures are bounded by the load's share as much as by the proxy.")
    B.record("scaling", "More than one core", B.command_line(), mach, {"configs": figs, "ratios": ratios},
             table, notes)


if __name__ == "__main__":
    main()
