#!/usr/bin/env python3
"""`infergate-bulk --concurrency auto` against a sweep of fixed concurrencies, on simulators
that batch like an engine (`infergate-sim --profile h100-8b | b200-27b-mtp`: decode steps over
the batch, a KV budget), directly against one simulator and through the gateway.

Cases, each run on fresh processes (no run inherits what a gateway learned in another):
  h100-direct   one h100-8b (512 slots), bulk straight at it: auto searches for the knee
  b200-direct   one b200-27b-mtp (256 slots), likewise
  h100x7-gw     seven h100-8b (3,584 slots) behind infergate: auto reads the learned slots
  b200x7-gw     seven b200-27b-mtp (1,792 slots) behind infergate
  unequal-gw    seven unequal ones behind infergate: h100-8b and b200-27b-mtp with 32..128
                --max-running, two of them held back by a 7,000-token KV budget (they run
                about 25, so the gateway learns less than the flag says)
  seed          the seed's shape rehearsed: seven b200-27b-mtp behind infergate, a sample of
                --seed-count lines run to the end at the seed's --concurrency 48 and with auto

Each run: one `infergate-bulk generate --seed 1` corpus (large enough not to run out), answers
of 16..256 tokens chosen by the prompt, non-streamed; bulk gets SIGINT when its budget is up (it
stops cleanly, exit 3). Its --progress-file is read once a second; through the gateway also
GET /health/backends (learned_slots of the backends that are up, the gateway's inflight).

Figures, in simulated time (with --time-scale X a simulator runs X simulated seconds per wall
second: simulated tok/s = wall tok/s / X; simulated latency = wall latency x X):
- steady tok/s: output tokens completed from the first sample past a third of the run to the
  last one, over the time between (what a long run gets; the start left out);
- run tok/s: every output token of the run over its wall time (the start included);
- auto: the limit held over the steady part and its final state (concurrency_state), when its
  3-second mean first reached 95% of the best fixed concurrency's steady tok/s, and through the
  gateway the largest in_flight / (sum of learned_slots) over the steady part;
- CPU: CPU-seconds of every process of the run per wall second, of all cores. A run near 100%
  measured the machine, not the engine model: it is marked in the table.
Targets: auto >= 95% of the best fixed concurrency's steady tok/s in every case; through the
gateway, in flight <= 1.5x the fleet's learned slots. Seed: the ratio of completion times.

How the time scales were chosen (CASES): what costs CPU here is requests per wall second (a
non-streamed answer is one response whatever its length; the step engine costs little).
Measured on 2 cores: one simulator and bulk take about 35% of the machine at 850 requests/s;
the gateway, seven simulators and bulk about 65% at 800/s (2 ms of CPU per request, a third
more with a long queue to scan). At the knee a simulator completes about 110 (h100-8b, 512
slots, 15,000 tok/s) or 125 (b200-27b-mtp, 256 slots, 17,000 tok/s) requests per simulated
second, so: x8 and x5 for one simulator, x1 for seven h100-8b (800 requests/s at 4,096 in
flight), x0.8 for seven b200-27b-mtp (700/s), x1.5 for the unequal fleet (54,000 tok/s: 600/s).
Higher scales reach steady state sooner in wall time but push the CPU column towards 100%, and
the top concurrencies then flatten for the wrong reason.

Budgets: a fixed run is steady within a few request latencies (a fleet's runs get 25-30 s: at
4,096 in flight and x1 a request takes 5-6 s). auto needs about three latencies per step of its search (settle, then a window of two),
doubling from 16: some 6 x (the knee) requests in all, whatever the time scale. Through the
gateway the capacity is known only once every backend has queued (the gateway learns slots from
the backends' load reports when they queue); until then auto doubles its limit each second
("learning"), then holds the learned slots: a few seconds to a steady state, but a fleet of
seven at x1 needs a few request latencies (4-5 s each at 3,584 in flight) to settle, so those
auto runs get 60 s and the steady part starts at a third of it.

The seed rehearsal: the seed's corpus is 902,087 lines; at 48 in flight seven b200-27b-mtp do
about a tenth of what they can, so the whole corpus would take hours here. The sample is run
to the end at both settings (same corpus, same time scale as b200x7-gw); auto's time includes
its ramp, which a 902,087-line corpus makes negligible, so both are also extrapolated to the
full corpus from the steady rates (48: its own run; auto: the b200x7-gw auto run of this bench).

Usage: python3 bench/concurrency-auto.py [--cases a,b,...] [--levels 8,16,...|none]
       [--budget S] [--auto-budget S] [--seed-count N] [--count N] [--max-concurrency N]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get), IG_BENCH_TMP.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

H100, B200 = ["--profile", "h100-8b"], ["--profile", "b200-27b-mtp"]
LEVELS_DIRECT = [8, 16, 48, 128, 256, 512, 1024]
UNEQUAL = [H100 + ["--max-running", "128"], H100 + ["--max-running", "64"],
           H100 + ["--max-running", "64", "--kv-tokens", "7000"],
           B200 + ["--max-running", "128"], B200 + ["--max-running", "64"],
           B200 + ["--max-running", "32"], B200 + ["--max-running", "64", "--kv-tokens", "7000"]]
# scale: --time-scale; budget / auto_budget: wall seconds of a fixed / an auto run (header)
CASES = {
    "h100-direct": {"sims": [H100], "gateway": False, "scale": 8, "levels": LEVELS_DIRECT,
                    "budget": 8, "auto_budget": 20, "what": "one h100-8b, direct"},
    "b200-direct": {"sims": [B200], "gateway": False, "scale": 5, "levels": LEVELS_DIRECT,
                    "budget": 8, "auto_budget": 20, "what": "one b200-27b-mtp, direct"},
    "h100x7-gw": {"sims": [H100] * 7, "gateway": True, "scale": 1, "levels": [48, 512, 1024, 2048, 4096],
                  "budget": 30, "auto_budget": 60, "what": "seven h100-8b through infergate"},
    "b200x7-gw": {"sims": [B200] * 7, "gateway": True, "scale": 0.8, "levels": [48, 256, 512, 1024, 2048, 4096],
                  "budget": 25, "auto_budget": 60, "what": "seven b200-27b-mtp through infergate"},
    "unequal-gw": {"sims": UNEQUAL, "gateway": True, "scale": 1.5, "levels": [128, 256, 512, 2048],
                   "budget": 15, "auto_budget": 42, "what": "seven unequal through infergate"},
}
SEED = {"sims": [B200] * 7, "gateway": True, "scale": 0.8, "what": "seed rehearsal"}
SHORT_CORPUS = 30000
SEED_LINES = 902087
SEED_CONCURRENCY = 48


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fleet(url):
    """From GET /health/backends: the sum of learned_slots over the backends that are up,
    how many of those have none yet, the gateway's inflight; {} when it does not answer."""
    status, body = B.http(url + "/health/backends", timeout=2)
    if status != 200:
        return {}
    j = json.loads(body)
    up = [b for b in j.get("backends", []) if b.get("state") == "up" and b.get("admin") == "enabled"]
    return {"learned": sum(b.get("learned_slots", 0) for b in up),
            "unlearned": sum(1 for b in up if not b.get("learned_slots")),
            "gw_inflight": j.get("gateway", {}).get("inflight")}


def corpus(count):
    """An `infergate-bulk generate` corpus of count lines, made once (kept in IG_BENCH_TMP)."""
    path = os.path.join(B.TMP, f"corpus-auto-{count}.jsonl")
    if not os.path.exists(path):
        os.makedirs(B.TMP, exist_ok=True)
        B.log(f"generating {path}")
        subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(count), "--seed", "1",
                               "--output", path + ".part"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.rename(path + ".part", path)
    return path


def lines_for(budget, args):
    """A corpus that the run cannot finish: 1,200 requests per wall second is more than any
    run here completes. Short runs take a short one (bulk reads it all before it starts)."""
    return SHORT_CORPUS if budget * 1200 <= SHORT_CORPUS else args.count


def run(c, conc, args, workdir, budget, lines):
    """One bulk run on fresh simulators (and gateway) for budget wall seconds (None: to the
    end, at most --seed-timeout): (figures, samples)."""
    procs = B.Procs(os.path.join(workdir, f"{c['name']}-c{conc}"))
    try:
        sims, _ = B.start_sims(procs, len(c["sims"]), [a + ["--time-scale", str(c["scale"])] for a in c["sims"]])
        url = B.start_gateway(procs, sims)[0] if c["gateway"] else sims[0]
        d = procs.workdir
        out, progress, summary = (os.path.join(d, f) for f in ("out.jsonl", "progress.json", "summary.json"))
        argv = [B.binary("infergate-bulk"), "--input", corpus(lines), "--output", out, "--url", url,
                "--model", "sim-model", "--concurrency", str(conc), "--progress-file", progress,
                "--summary-json", summary, "--progress-interval-s", "5"]
        if conc == "auto":
            argv += ["--max-concurrency", str(args.max_concurrency)]
        pids = [p.pid for p in procs.procs]
        cpu0 = B.cpu_seconds(pids)
        p = procs.start("bulk", argv)
        t0 = time.monotonic()
        deadline = t0 + (budget if budget else args.seed_timeout)
        samples, cpu_bulk = [], 0.0
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(1 - (time.monotonic() - t0) % 1)
            cpu_bulk = B.cpu_seconds([p.pid]) or cpu_bulk   # gone from /proc once it exits
            pr = read_json(progress)
            if pr is None:
                continue
            s = {"t": time.monotonic() - t0, "tokens": pr.get("output_tokens"), "done": pr.get("done", 0),
                 "in_flight": pr.get("in_flight"), "limit": pr.get("concurrency"),
                 "state": pr.get("concurrency_state"), "retries": pr.get("retries", 0)}
            if c["gateway"]:
                s.update(fleet(url))
            samples.append(s)
        wall = polled = time.monotonic() - t0
        cpu = B.cpu_seconds(pids) - cpu0 + max(cpu_bulk, B.cpu_seconds([p.pid]))
        finished = p.poll() is not None
        summ = read_json(summary) if finished else None
        if summ and summ.get("wall_time_s"):
            wall = summ["wall_time_s"]        # to the last answer, not to our next sample
        if not finished:
            os.kill(p.pid, signal.SIGINT)    # no new requests; waits for those in flight
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                procs.stop(p)                # the second signal: exits at once
        f = figures(c, conc, samples, wall, summ or read_json(summary) or {}, finished)
        f["ran_out"] = bool(budget and finished)     # the corpus ended before the budget
        f.update({"case": c["name"], "exit": p.returncode, "cpu_of_cores": cpu / polled / os.cpu_count()})
        say(f)
        return f, samples
    finally:
        procs.stop_all()
        for name in ("out.jsonl", "out.errors.jsonl"):   # tens of MB each; the figures are kept
            try:
                os.unlink(os.path.join(procs.workdir, name))
            except FileNotFoundError:
                pass


def rates(samples, X, span=3):
    """(t, simulated tok/s over the last span seconds) per sample."""
    pts = [s for s in samples if s["tokens"] is not None]
    out = []
    for i, s in enumerate(pts):
        p = pts[max(0, i - span)]
        out.append((s["t"], (s["tokens"] - p["tokens"]) / (s["t"] - p["t"]) / X if s["t"] > p["t"] else None))
    return out


def figures(c, conc, samples, wall, summ, finished):
    X = c["scale"]
    tok = [s for s in samples if s["tokens"] is not None]
    total = summ.get("output_tokens") if finished else (tok[-1]["tokens"] if tok else None)
    lat = summ.get("latency_ms") or {}
    f = {"concurrency": conc, "scale": X, "wall_s": wall, "finished": finished, "samples": len(samples),
         "done": summ.get("done") if finished else (samples[-1]["done"] if samples else 0),
         "output_tokens": total, "run_tps": total / wall / X if total else None, "steady_tps": None,
         "latency_p50_sim_s": lat["p50"] * X / 1000 if lat.get("p50") else None,
         "retries": max([s["retries"] or 0 for s in samples] + [summ.get("retries") or 0]),
         "concurrency_summary": summ.get("concurrency")}
    steady = []
    if len(tok) >= 3:
        first = next(s for s in tok if s["t"] >= tok[-1]["t"] / 3)
        if tok[-1]["t"] > first["t"]:
            f["steady_tps"] = (tok[-1]["tokens"] - first["tokens"]) / (tok[-1]["t"] - first["t"]) / X
        steady = [s for s in samples if s["t"] >= first["t"]]
    f["in_flight_max"] = max((s["in_flight"] for s in steady if s["in_flight"] is not None), default=None)
    if conc == "auto":
        lims = [s["limit"] for s in steady if s["limit"] is not None]
        f["limit_steady"] = {"min": min(lims), "max": max(lims), "mean": sum(lims) / len(lims)} if lims else None
        f["state_final"] = next((s["state"] for s in reversed(samples) if s["state"]), None)
    if c["gateway"]:
        known = [s for s in steady if s.get("learned") and not s.get("unlearned") and s["in_flight"] is not None]
        f["learned_slots_final"] = next((s["learned"] for s in reversed(samples) if s.get("learned")), None)
        f["samples_unlearned"] = sum(1 for s in steady if s.get("unlearned") or not s.get("learned"))
        f["inflight_over_learned_max"] = max((s["in_flight"] / s["learned"] for s in known), default=None)
        f["gateway_inflight_max"] = max((s["gw_inflight"] for s in steady if s.get("gw_inflight") is not None),
                                        default=None)
    return f


def say(f):
    extra = ""
    if f["concurrency"] == "auto":
        ls = f.get("limit_steady") or {}
        extra = f"  limit {ls.get('min', '?')}..{ls.get('max', '?')}, {f.get('state_final')}"
    if f.get("inflight_over_learned_max") is not None:
        extra += f"  in flight / learned <= {f['inflight_over_learned_max']:.2f}"
    if f["retries"]:
        extra += f"  RETRIES {f['retries']}"
    B.log(f"{f['case']:11} c={str(f['concurrency']):5} steady {fmt(f['steady_tps'], 8)} tok/s  run "
          f"{fmt(f['run_tps'], 8)} tok/s  done {f['done'] or 0:,}  cpu {f['cpu_of_cores']:.0%}{extra}")


def fmt(v, width=0, spec=",.0f"):
    return f"{v:{width}{spec}}" if v is not None else f"{'-':>{width}}"


def cpu_cell(f):
    return f"{f['cpu_of_cores']:.0%}" + (" (machine-bound)" if f["cpu_of_cores"] > 0.9 else "")


def write_series(fh, samples, X):
    """One gnuplot index: t, tok/s (3 s mean), limit, in flight, learned slots."""
    r = dict(rates(samples, X))
    n = 0
    for s in samples:
        if s["tokens"] is None:
            continue
        vals = [r.get(s["t"]), s["limit"], s["in_flight"], s.get("learned") or None]
        fh.write(f"{s['t']:.1f} " + " ".join("NaN" if v is None else f"{v:.0f}" for v in vals) + "\n")
        n += 1
    if not n:    # gnuplot does not count an empty block as an index
        fh.write("0 NaN NaN NaN NaN\n")
    fh.write("\n\n")


def plot(panels):
    """panels: (title, scale, gateway, auto samples, best fixed tok/s or None, [(label, samples)])."""
    dat = os.path.join(B.RESULTS, "concurrency-auto.dat")
    cmds, idx = [], 0
    with open(dat, "w") as fh:
        fh.write("# per index: seconds, output tok/s (simulated, 3 s mean), limit, in flight, learned slots\n")
        for title, X, gw, samples, best, others in panels:
            fh.write(f"# {title}: auto\n")
            write_series(fh, samples, X)
            i = idx
            idx += 1
            lines = [f'"{dat}" index {i} using 1:2 axes x1y1 with lines lw 2 lc rgb "#1f77b4" title "auto: tok/s"',
                     f'"" index {i} using 1:3 axes x1y2 with steps lw 2 lc rgb "#d62728" title "auto: limit"',
                     f'"" index {i} using 1:4 axes x1y2 with lines lw 1 lc rgb "#ff7f0e" title "auto: in flight"']
            if gw:
                lines.append(f'"" index {i} using 1:5 axes x1y2 with lines lw 1 dt 3 lc rgb "#2ca02c" '
                             f'title "learned slots"')
            if best:
                lines.append(f'{best:.0f} axes x1y1 with lines lw 1 dt 2 lc rgb "#1f77b4" '
                             f'title "best fixed: tok/s"')
            for label, s2 in others:
                fh.write(f"# {title}: {label}\n")
                write_series(fh, s2, X)
                lines.append(f'"" index {idx} using 1:2 axes x1y1 with lines lw 1 lc rgb "#7f7f7f" '
                             f'title "{label}: tok/s"')
                idx += 1
            cmds.append(f'set title "{title} (time x{X:g})"\nplot ' + ", \\\n     ".join(lines))
    rows = (len(panels) + 1) // 2
    B.gnuplot("concurrency-auto.gp", PNG=os.path.join(B.RESULTS, "concurrency-auto.png"), ROWS=rows,
              COLS=2 if len(panels) > 1 else 1, HEIGHT=340 * rows + 40, PANELS="\n".join(cmds),
              TITLE="infergate-bulk --concurrency auto: simulated output tokens/s and requests in flight")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(list(CASES) + ["seed"]),
                    help=f"which cases, in order [{','.join(list(CASES) + ['seed'])}]")
    ap.add_argument("--levels", default="", help="fixed concurrencies of every case [per case; none: auto only]")
    ap.add_argument("--budget", type=float, default=None,
                    help="wall seconds of each fixed run [per case: 8 direct, 15-22 through the gateway]")
    ap.add_argument("--auto-budget", type=float, default=None,
                    help="wall seconds of each auto run [per case: 20 direct, 42-130 through the gateway]")
    ap.add_argument("--count", type=int, default=160000,
                    help="corpus lines of a long sweep run [160000: more than any run here completes; "
                         f"runs of up to {SHORT_CORPUS // 1200} s take the first {SHORT_CORPUS:,}]")
    ap.add_argument("--seed-count", type=int, default=3000,
                    help="seed rehearsal: the sample's lines, run to the end [3000: about a minute at 48]")
    ap.add_argument("--seed-timeout", type=float, default=300, help="seed rehearsal: longest run, wall s [300]")
    ap.add_argument("--max-concurrency", type=int, default=4096, help="auto runs: --max-concurrency [4096]")
    args = ap.parse_args()
    cases = args.cases.split(",")
    unknown = [k for k in cases if k not in CASES and k != "seed"]
    if unknown:
        sys.exit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASES)}, seed")
    B.need(("gnuplot", "gnuplot-nox"))
    B.raise_nofile()
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"concurrency-auto-{os.getpid()}")
    t_start = time.monotonic()
    figs, rows, verdicts, panels, auto_of = [], [], [], [], {}
    for k in (k for k in cases if k in CASES):
        c = dict(CASES[k], name=k)
        levels = ([] if args.levels == "none" else [int(x) for x in args.levels.split(",")] if args.levels
                  else c["levels"])
        fb = args.budget or c["budget"]
        fixed = [run(c, lvl, args, workdir, fb, lines_for(fb, args))[0] for lvl in levels]
        ab = args.auto_budget or c["auto_budget"]
        auto, samples = run(c, "auto", args, workdir, ab, lines_for(ab, args))
        best = max((f for f in fixed if f["steady_tps"]), key=lambda f: f["steady_tps"], default=None)
        reach = next((t for t, v in rates(samples, c["scale"]) if best and v and v >= 0.95 * best["steady_tps"]),
                     None)
        auto["reached_95pct_of_best_s"] = reach
        auto_of[k] = auto
        figs += fixed + [auto]
        panels.append((f"{k}: {c['what']}", c["scale"], c["gateway"], samples,
                       best["steady_tps"] if best else None, []))
        for f in fixed + [auto]:
            held = ""
            if f["concurrency"] == "auto":
                ls = f.get("limit_steady") or {}
                held = (f"{ls.get('min', '?')}..{ls.get('max', '?')} ({f.get('state_final') or '?'}); "
                        f"95% at {fmt(reach, 0, '.0f')} s")
            q = f.get("inflight_over_learned_max")
            rows.append([k, f["concurrency"], fmt(f["steady_tps"]),
                         f"{f['steady_tps'] / best['steady_tps']:.2f}" if best and f["steady_tps"] else "-",
                         fmt(f["run_tps"]), f["in_flight_max"] or "-", held, fmt(q, 0, ".2f"),
                         fmt(f["latency_p50_sim_s"], 0, ".1f"), cpu_cell(f)])
        if best and auto["steady_tps"]:
            r = auto["steady_tps"] / best["steady_tps"]
            v = (f"{k}: auto {auto['steady_tps']:,.0f} tok/s = {r:.1%} of the best fixed ({best['concurrency']}: "
                 f"{best['steady_tps']:,.0f}): {'met' if r >= 0.95 else 'MISSED'} (>= 95%)")
            if c["gateway"]:
                q = auto.get("inflight_over_learned_max")
                v += (f"; in flight / learned slots at most {q:.2f}: {'met' if q <= 1.5 else 'MISSED'} (<= 1.5)"
                      if q is not None else "; in flight / learned slots: no steady sample with every slot learned")
            verdicts.append(v)
    seed = {}
    if "seed" in cases:
        c = dict(SEED, name="seed")
        f48, s48 = run(c, SEED_CONCURRENCY, args, workdir, None, args.seed_count)
        fa, sa = run(c, "auto", args, workdir, None, args.seed_count)
        figs += [f48, fa]
        panels.append((f"seed: seven b200-27b-mtp, {args.seed_count:,} lines to the end", c["scale"], True, sa,
                       None, [(f"--concurrency {SEED_CONCURRENCY}", s48)]))
        for f in (f48, fa):
            rows.append(["seed", f["concurrency"], fmt(f["steady_tps"]), "", fmt(f["run_tps"]),
                         f["in_flight_max"] or "-",
                         f"to the end in {f['wall_s']:.1f} s" if f["finished"] else "NOT FINISHED",
                         fmt(f.get("inflight_over_learned_max"), 0, ".2f"), fmt(f["latency_p50_sim_s"], 0, ".1f"),
                         cpu_cell(f)])
        if f48["finished"] and fa["finished"]:
            seed = {"lines": args.seed_count, "c48_s": f48["wall_s"], "auto_s": fa["wall_s"],
                    "completion_ratio": f48["wall_s"] / fa["wall_s"]}
            v = (f"seed: {args.seed_count:,} lines to the end: --concurrency 48 {f48['wall_s']:.1f} s, auto "
                 f"{fa['wall_s']:.1f} s (wall; x{c['scale']:g} simulated): completion time ratio "
                 f"**{seed['completion_ratio']:.2f}x** (run tok/s {fmt(f48['run_tps'])} against {fmt(fa['run_tps'])})")
            ref = auto_of.get("b200x7-gw")
            if ref and ref["steady_tps"] and f48["steady_tps"] and CASES["b200x7-gw"]["scale"] == c["scale"]:
                per_line = f48["output_tokens"] / f48["done"]
                t48 = SEED_LINES * per_line / f48["steady_tps"]
                ta = fa["wall_s"] * c["scale"] + (SEED_LINES - args.seed_count) * per_line / ref["steady_tps"]
                seed.update({"full_c48_sim_h": t48 / 3600, "full_auto_sim_h": ta / 3600, "full_ratio": t48 / ta})
                v += (f"; extrapolated to {SEED_LINES:,} lines at the steady rates (auto's from b200x7-gw"
                      + ("" if ref.get("state_final") in ("gateway", "holding", "probing") else
                         f", which was still {ref.get('state_final')}: a lower bound")
                      + f"): {t48 / 3600:.1f} against {ta / 3600:.2f} simulated hours, **{t48 / ta:.1f}x**")
            verdicts.append(v)
        else:
            verdicts.append("seed: a run did not finish within --seed-timeout")
    if not figs:
        return
    plot(panels)
    table = B.md_table(["case", "concurrency", "steady tok/s (sim)", "of best fixed", "run tok/s (sim)",
                        "in flight max", "auto: limit held (final state)", "in flight / learned slots",
                        "latency p50 (sim s)", "CPU of cores"], rows)
    retried = [f"{f['case']} c={f['concurrency']}: {f['retries']}" for f in figs if f["retries"]]
    ran_out = [f"{f['case']} c={f['concurrency']}" for f in figs if f["ran_out"]]
    scales = ", ".join(f"{k} x{CASES[k]['scale']:g}" for k in cases if k in CASES)
    notes = (f"Simulated time: wall / time scale ({scales}{', seed x%g' % SEED['scale'] if 'seed' in cases else ''}; "
             "the script's header says why). steady: from a third of the run to its end; run: the whole run. "
             f"Corpus `infergate-bulk generate --seed 1` ({args.count:,} lines, or its first {SHORT_CORPUS:,} for "
             f"short runs; seed: the first "
             f"{args.seed_count:,}), answers of 16..256 tokens, non-streamed. in flight / learned: bulk's "
             "in_flight over the sum of learned_slots of the backends that are up (GET /health/backends each "
             "second), the largest over the steady part. Plot: results/concurrency-auto.png.\n\n"
             + "\n".join(f"- {v}" for v in verdicts)
             + (f"\n\nRetried requests (connection errors or 5xx): {'; '.join(retried)}." if retried else "")
             + (f"\n\nCORPUS RAN OUT before the budget (raise --count): {', '.join(ran_out)}." if ran_out else "")
             + f"\n\nWhole bench: {(time.monotonic() - t_start) / 60:.1f} min.")
    B.record("concurrency-auto", "Concurrency auto against fixed concurrencies", B.command_line(), mach,
             {"runs": figs, "seed": seed, "verdicts": verdicts}, table, notes)


if __name__ == "__main__":
    main()
