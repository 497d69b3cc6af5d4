#!/usr/bin/env python3
"""Prefill/decode disaggregation against co-located servers on the Mooncake conversation trace.
The same eight `infergate-sim --profile h100-8b` per target, fresh for each (speed, target), all
targets in one run, the trace replayed open loop by `infergate-bulk replay` as bench/trace.py
replays it (its functions: the window, the replay, the options):

  colocated-8            eight co-located servers, infergate `--policy cache-aware` (the
                         policy a user would pick for this trace; the reference: every figure
                         is also a ratio to its own)
  colocated-8-POLICY     the same with `--policy POLICY` (e.g. colocated-8-least-loaded)
  pd-NpMd                N prefill + M decode servers in SGLang's protocol
                         (`--disaggregation-mode prefill|decode`, backends[].role, "engine":
                         "sglang", bootstrap_port), the gateway's defaults: `--pd-prefill-policy
                         cache-aware`, `--pd-decode-policy least-loaded`
  pd-NpMd-vllm           the same in vLLM's (NixlConnector `--kv-transfer-config`, the side
                         channel; "engine": "vllm")

Per (speed, target), from the replay's summary (simulated time): TTFT and TPOT p50/p90/p99,
goodput at --slo-ttft-ms and --slo-tpot-ms (trace.py's defaults, 2000 and 100 ms) and at a
tighter TPOT (--slo-tpot-tight-ms 20, where decodes slowed by prefills miss), errors,
late sends, the answers' cached share (a pair's: the decode server's own prefix match) and the
prefill servers' (SGLang's /metrics); from the gateway's /metrics the pairs by outcome
(infergate_pd_requests_total); from the simulators' /sim/state, sampled every second of wall
clock, the requests in flight per server of each role (mean and the most at once), which says
where the queue was.

What the simulator models (docs/simulator.md, src/sim/conf.c, src/sim/pd.c), and so what to
expect: an h100-8b server prefills 60,000 tokens/s (chunks of 8,192 in its steps) and a decode
step lasts 6.2 ms + 30 us per request + 40 ns per token of their context. Co-located, a prefill
chunk lengthens the step of every decode beside it (TPOT suffers); a decode server gets the KV
over the link (prompt tokens x --kv-bytes-per-token 131,072 at --transfer-gbps 25: about 63 ms
for the trace's mean 12,000 tokens, added to TTFT) and computes no prefill. Each transfer has
the whole bandwidth (the simulator models no contention on the link). The trace's window asks
for about 42,000 prompt tokens/s at 1x: N prefill servers hold N x 60,000 less what their prefix
caches save, so prefill saturates near 1.4 N x of speed (uncached); the "prefill load" column is
that demand over the prefill servers' capacity (co-located: over all eight, which also decode).
Above 1 a queue grows at the prefill servers for as long as the burst lasts, and past
--pd-transfer-timeout-ms (60 s of wall clock, the gateway's default; 120 s simulated at time
scale 2) pairs are cut.

Window (--start 1200 --duration 300, trace seconds), --speeds 2,4 and --time-scale 2 (the
defaults): seven targets at two speeds take about 15 minutes of wall clock on 2 cores. At 2x two
prefill servers run at 0.7 of their capacity, at 4x at 1.4 (three at 0.93, four at 0.70); the
co-located fleet is nearly idle at both (trace.py's notes: busy from 5x).

Usage: python3 bench/pd.py [--speeds 2,4] [--targets colocated-8,pd-2p6d,...] [--time-scale X]
       [--start S] [--duration S] [--sim-args "--transfer-gbps 5"] [--results DIR] [--dry-run]
Env: IG_BUILD, IG_SKIP_DEPS, IG_BENCH_TMP as for bench/trace.py.
"""

import argparse
import importlib.util
import json
import os
import re
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

# bench/trace.py by its path: the name "trace" is also a module of the standard library
_spec = importlib.util.spec_from_file_location("bench_trace", os.path.join(B.BENCH, "trace.py"))
T = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(T)

TARGETS = ["colocated-8", "colocated-8-least-loaded", "pd-1p7d", "pd-2p6d", "pd-3p5d", "pd-4p4d", "pd-2p6d-vllm"]
REFERENCE = "colocated-8"
PREFILL_TPS = 60000   # h100-8b's prefill tokens/s (src/sim/conf.c), for the prefill load column
KV = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'


def parse_target(t):
    """(prefill servers, decode or co-located servers, engine, co-located policy) of a name."""
    m = re.fullmatch(r"colocated-(\d+)(?:-(.+))?", t)
    if m:
        return 0, int(m.group(1)), "sglang", m.group(2) or "cache-aware"
    m = re.fullmatch(r"pd-(\d+)p(\d+)d(-vllm)?", t)
    if m and int(m.group(1)) > 0 and int(m.group(2)) > 0:
        return int(m.group(1)), int(m.group(2)), "vllm" if m.group(3) else "sglang", None
    sys.exit(f"--targets: '{t}' is neither colocated-N[-POLICY] nor pd-NpMd[-vllm]")


def sim_flags(role, engine, port):
    """A simulator's PD flags: role prefill or decode (port: its bootstrap listener or side channel)."""
    if engine == "vllm":
        return ["--flavor", "vllm", "--kv-transfer-config", KV, "--nixl-side-channel-port", str(port)]
    return ["--disaggregation-mode", role] + (["--disaggregation-bootstrap-port", str(port)] if role == "prefill" else [])


class Sampler(threading.Thread):
    """The requests in flight (waiting and running) on each simulator, read from /sim/state once
    a second while the replay runs: per role, the mean per server and the most on one at once.
    A prefill server admits up to 512 requests and works its chunks oldest first, so its queue
    shows as requests running, not waiting."""

    def __init__(self, roles):
        super().__init__(daemon=True)
        self.roles, self.stop, self.samples = roles, threading.Event(), {r: [] for r in set(roles.values())}

    def run(self):
        while not self.stop.wait(1.0):
            per = {r: [] for r in self.samples}
            for url, role in self.roles.items():
                st, body = B.http(url + "/sim/state", timeout=2)
                if st == 200:
                    s = json.loads(body)
                    per[role].append(s["num_waiting_reqs"] + s["num_running_reqs"])
            for r, v in per.items():
                if v:
                    self.samples[r].append(v)

    def figures(self):
        out = {}
        for r, snaps in self.samples.items():
            v = [n for snap in snaps for n in snap]
            out[r] = {"in_flight_mean": sum(v) / len(v) if v else None, "in_flight_max": max(v, default=None)}
        return out


def server_cached(urls):
    """The share of their prompt tokens the servers found in their prefix caches, from SGLang's
    /metrics (sglang:cache_hit_rate, cumulative per rank, times sglang:prompt_tokens_total); None
    for vLLM's, which the simulator gives no such count. A decode server counts its own cache
    only: the KV it is handed is not a hit."""
    cached = prompt = 0.0
    for u in urls:
        st, body = B.http(u + "/metrics", timeout=5)
        rate, tokens = {}, {}
        for line in body.decode().splitlines() if st == 200 else []:
            for name, into in (("sglang:cache_hit_rate", rate), ("sglang:prompt_tokens_total", tokens)):
                if line.startswith(name + "{"):
                    into[line[len(name):].rsplit(" ", 1)[0]] = float(line.rsplit(" ", 1)[1])
        for labels, n in tokens.items():
            cached += rate.get(labels, 0.0) * n
            prompt += n
    return cached / prompt if prompt else None


def measure(target, speed, args, workdir, blocks):
    npre, ndec, engine, policy = parse_target(target)
    procs = B.Procs(os.path.join(workdir, f"{speed:g}x-{target}"))
    try:
        base = ["--profile", "h100-8b", "--time-scale", f"{args.time_scale:g}"] + args.sim_args.split()
        if not npre:
            sims, _ = B.start_sims(procs, ndec, base)
            url, _ = B.start_gateway(procs, sims, extra=["--policy", policy] + args.gateway_args.split())
            roles = {u: "colocated" for u in sims}
        else:
            ports = [B.free_port() for _ in range(npre + ndec)]
            pre, _ = B.start_sims(procs, npre, [base + sim_flags("prefill", engine, p) for p in ports[:npre]],
                                  name="prefill")
            dec, _ = B.start_sims(procs, ndec, [base + sim_flags("decode", engine, p) for p in ports[npre:]],
                                  name="decode")
            conf = os.path.join(procs.workdir, "gateway.json")
            with open(conf, "w") as f:
                json.dump({"backends": [dict({"url": u, "role": "prefill", "engine": engine},
                                             **({"bootstrap_port": p} if engine == "sglang" else {}))
                                        for u, p in zip(pre, ports)] +
                                       [{"url": u, "role": "decode", "engine": engine} for u in dec]}, f)
            url, _ = B.start_gateway(procs, pre + dec, config=conf, extra=args.gateway_args.split())
            roles = dict({u: "prefill" for u in pre}, **{u: "decode" for u in dec})
        sampler = Sampler(roles)
        sampler.start()
        fig = T.replay(procs, url, target, speed, args, blocks)
        fig["goodput_tight"] = goodput_at(fig["requests_file"], args.slo_ttft_ms, args.slo_tpot_tight_ms)
        sampler.stop.set()
        sampler.join()
        fig["queues"] = sampler.figures()
        fig["pd_requests"] = B.metrics(url, "infergate_pd_requests_total")
        fig["server_cached"] = {r: server_cached([u for u, x in roles.items() if x == r]) for r in set(roles.values())}
        fig["servers"] = {"prefill": npre, "decode" if npre else "colocated": ndec, "engine": engine,
                          "policy": policy}
        s, q = fig["summary"], fig["queues"]
        B.log(f"{speed:g}x {target:24} TTFT p50 {s['ttft_ms']['p50']:,.0f} p90 {s['ttft_ms']['p90']:,.0f} p99 "
              f"{s['ttft_ms']['p99']:,.0f} ms  TPOT p50 {s['tpot_ms']['p50']:,.1f} p90 {s['tpot_ms']['p90']:,.1f} "
              f"p99 {s['tpot_ms']['p99']:,.1f} ms  goodput {s['goodput']['share']:.1%}  errors {s['errors']}  "
              + "  ".join(f"{r} in flight mean {T.fmt(v['in_flight_mean'], '.1f')} max {T.fmt(v['in_flight_max'])}"
                          for r, v in q.items()) + f"  pairs {outcomes(fig['pd_requests'])}  cached at the "
              + " ".join(f"{r} servers {T.fmt(v, '.1%')}" for r, v in fig["server_cached"].items())
              + f"  {fig['wall_s']:.0f} s wall")
        return fig
    finally:
        procs.stop_all()


def outcomes(samples):
    """infergate_pd_requests_total's non-zero outcomes: "paired 1007 transfer_timeout 3"."""
    return " ".join(f"{re.search(r'outcome=.([a-z_]+)', k).group(1)} {v:g}" for k, v in samples.items() if v) or "-"


def goodput_at(path, ttft_ms, tpot_ms):
    """The share of a per-request file's requests answered whole within both SLOs (a request of one
    output token has no TPOT: only its TTFT counts)."""
    with open(path) as f:
        reqs = [json.loads(line) for line in f if line.strip()]
    met = sum(1 for r in reqs if r["status"] == 200 and not r.get("error") and r["ttft_ms"] is not None
              and r["ttft_ms"] <= ttft_ms and (r.get("tpot_ms") is None or r["tpot_ms"] <= tpot_ms))
    return met / len(reqs) if reqs else 0.0


def ratio(x, ref):
    return f"{x / ref:.2f}" if ref else "-"


def table(runs, demand, speed, span, args):
    ref = next((f["summary"] for f in runs if f["target"] == REFERENCE), None)
    ref_tight = next((f["goodput_tight"] for f in runs if f["target"] == REFERENCE), None)
    rows = []
    for f in runs:
        x, q, sv = f["summary"], f["queues"], f["servers"]
        npre = sv["prefill"]
        load = demand / ((npre or sv.get("colocated", 0)) * PREFILL_TPS)
        pre_q = q.get("prefill") or q.get("colocated") or {}
        sc = f.get("server_cached") or {}
        pre_c = sc.get("prefill", sc.get("colocated"))
        dec_q = q.get("decode") or q.get("colocated") or {}
        late = f"{x['late']}" + (" !" if x["late_ms"]["p99"] > args.late_warn_ms else "")
        rows.append([f["target"], *(T.fmt(x["ttft_ms"][p]) for p in ("p50", "p90", "p99")),
                     ratio(x["ttft_ms"]["p50"], ref and ref["ttft_ms"]["p50"]),
                     ratio(x["ttft_ms"]["p99"], ref and ref["ttft_ms"]["p99"]),
                     *(T.fmt(x["tpot_ms"][p], ",.1f") for p in ("p50", "p90", "p99")),
                     ratio(x["tpot_ms"]["p50"], ref and ref["tpot_ms"]["p50"]),
                     ratio(x["tpot_ms"]["p99"], ref and ref["tpot_ms"]["p99"]),
                     f"{x['goodput']['share']:.1%}", ratio(x["goodput"]["share"], ref and ref["goodput"]["share"]),
                     f"{f['goodput_tight']:.1%}", ratio(f["goodput_tight"], ref and ref_tight),
                     f"{x['cached_share']:.1%}", T.fmt(pre_c, ".1%"), x["errors"], late, f"{load:.2f}",
                     f"{T.fmt(pre_q.get('in_flight_mean'), '.1f')} / {T.fmt(pre_q.get('in_flight_max'))}",
                     f"{T.fmt(dec_q.get('in_flight_mean'), '.1f')} / {T.fmt(dec_q.get('in_flight_max'))}"])
    sm = runs[0]["summary"]
    rate = sm["requests"] * speed / span
    head = (f"Speed {speed:g}x: {sm['requests']} requests, {rate:.1f}/s of simulated time "
            f"({rate * args.time_scale:.1f}/s of wall clock), {demand:,.0f} prompt tokens/s.")
    return head + "\n\n" + B.md_table(
        ["target", "TTFT p50 ms", "p90", "p99", f"p50 vs {REFERENCE}", "p99 vs", "TPOT p50 ms", "p90", "p99",
         f"p50 vs {REFERENCE}", "p99 vs", "goodput", "vs", f"goodput, TPOT <= {args.slo_tpot_tight_ms} ms", "vs",
         "cached (answers)", "cached at the prefill (co-located) servers", "errors", "late", "prefill load",
         "in flight per prefill (co-located) server, mean / max", "per decode (co-located) server"], rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--speeds", default="2,4",
                    help="arrival speed-ups, one run of every target each [2,4: two prefill servers at 0.7 of "
                         "their capacity, and at 1.4; co-located at 0.17 and 0.35]")
    T.replay_options(ap)
    # a run of seven targets at two speeds in about 15 minutes; at 4x and time scale 2, 27 requests/s
    # of wall clock (pairs: two requests each through the gateway) were sent on time
    ap.set_defaults(duration=300, time_scale=2.0)
    for a in ap._actions:  # the help says this script's defaults, not trace.py's
        if a.dest == "duration":
            a.help = "window length, trace seconds; 0 = to the end [300: seven targets at two speeds in about 16 minutes]"
        elif a.dest == "time_scale":
            a.help = "simulated time per wall second, the simulators' and the replay's [2]"
    ap.add_argument("--targets", default=",".join(TARGETS),
                    help="colocated-N[-POLICY] and pd-NpMd[-vllm], the first named colocated-8 the reference "
                         f"[{','.join(TARGETS)}]")
    ap.add_argument("--slo-tpot-tight-ms", type=int, default=20,
                    help="a second goodput, TTFT as --slo-ttft-ms and TPOT at most this, simulated ms: where "
                         "decodes slowed by prefills miss [20]")
    ap.add_argument("--results", default=B.RESULTS, help="where pd.md and pd.jsonl go [bench/results]")
    ap.add_argument("--dry-run", action="store_true",
                    help="check the options, the trace and the build, say what would run, and exit 0")
    args = ap.parse_args()
    speeds = [float(s) for s in args.speeds.split(",")]
    targets = args.targets.split(",")
    for t in targets:
        parse_target(t)
    if not os.path.exists(args.trace):
        sys.exit(f"--trace: {args.trace} not found")
    for b in ("infergate", "infergate-sim", "infergate-bulk"):
        B.binary(b)
    B.RESULTS = os.path.abspath(args.results)
    blocks, window, span = T.read_window(args)
    demand = sum(o["input_length"] for o in window) / span
    est = sum(span / (s * args.time_scale) for s in speeds) * len(targets)
    B.log(f"{len(targets)} targets x speeds {args.speeds}, window {args.start:g}+{span:g} s ({len(window)} requests, "
          f"{demand:,.0f} prompt tokens/s at 1x) at time scale {args.time_scale:g}: about {est / 60:.0f} minutes of "
          f"replay plus the drains")
    if args.dry_run:
        for s in speeds:
            for t in targets:
                npre, ndec, engine, policy = parse_target(t)
                B.log(f"  {s:g}x {t}: " + (f"{ndec} co-located, --policy {policy}" if not npre else
                                           f"{npre} prefill + {ndec} decode, {engine}; prefill load "
                                           f"{demand * s / (npre * PREFILL_TPS):.2f}"))
        return
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"pd-{os.getpid()}")
    figs = [measure(t, s, args, workdir, blocks) for s in speeds for t in targets]
    text = "\n\n".join(table([f for f in figs if f["speed"] == s], demand * s, s, span, args) for s in speeds)
    notes = (f"Eight `infergate-sim --profile h100-8b --time-scale {args.time_scale:g}"
             f"{' ' + args.sim_args if args.sim_args else ''}` per run (the PD ones with their role's flags), fresh "
             f"for each (speed, target); infergate with its defaults"
             f"{' and `' + args.gateway_args + '`, which win over them' if args.gateway_args else ''} "
             f"(co-located: `--policy` as named, cache-aware when not; pairs: `--pd-prefill-policy cache-aware "
             f"--pd-decode-policy least-loaded`, `--pd-transfer-timeout-ms 60000`). `infergate-bulk replay` of "
             f"{os.path.basename(args.trace)}, window {args.start:g} s + {span:g} s, `--speed S --time-scale "
             f"{args.time_scale:g}`, open loop; every figure in simulated time. TPOT: the replay's time per output "
             f"token after the first. Goodput: TTFT <= {args.slo_ttft_ms} ms and TPOT <= {args.slo_tpot_ms} ms; "
             f"the second: TTFT <= {args.slo_ttft_ms} ms and TPOT <= {args.slo_tpot_tight_ms} ms, from the "
             f"per-request files. "
             f"Cached (answers): cached / prompt tokens in the answers' "
             f"usage, for a pair the decode server's own prefix match; cached at the prefill servers: what they "
             f"found in their prefix caches (SGLang's sglang:cache_hit_rate x sglang:prompt_tokens_total; - for "
             f"vLLM's flavor). Prefill load: the window's prompt tokens/s at that speed over {PREFILL_TPS:,} x the prefill servers "
             f"(co-located: all of them), caching ignored. In flight: requests waiting or running per server, "
             f"sampled each second of wall clock (a prefill server's queue counts as running: it admits up to 512). Late: sends behind their time (! when over 1% were more than "
             f"{args.late_warn_ms:g} ms late: the client set the pace). Client, gateway and simulators on the "
             f"same 2 cores.")
    B.record("pd", "Prefill/decode disaggregation on the Mooncake conversation trace", B.command_line(), mach,
             {"speeds": speeds, "time_scale": args.time_scale, "start": args.start, "duration": span,
              "prompt_tokens_per_s_1x": demand, "slo_ttft_ms": args.slo_ttft_ms, "slo_tpot_ms": args.slo_tpot_ms,
              "slo_tpot_tight_ms": args.slo_tpot_tight_ms,
              "sim_args": args.sim_args, "gateway_args": args.gateway_args, "runs": figs}, text, notes)


if __name__ == "__main__":
    main()
