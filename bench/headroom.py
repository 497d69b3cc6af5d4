#!/usr/bin/env python3
"""Issue 34: the learned headroom under a load that changes. bench/priority.py's fleet (seven
simulators, 4-32 slots, 88 in all) and bulk run (infergate-bulk at class low, 4x the slots in
flight), with no knob set; the interactive client (streamed chat, class normal) stepped
1 -> 5 -> 20 -> 5 requests/s, STEP seconds each, then stopped while the bulk run goes on.

Per step: interactive TTFT p99 against the idle p99 (measured first, on fresh simulators), the
bulk run's throughput against the bulk run alone (from the gateway's access log: low requests
ended per second), and the learned headroom (sampled from /health/backends every 0.5 s).
After the start and after the stop: how long until the interactive p99 over 2 s windows is
back under 1.5x idle (target <= 5 s), and until the bulk throughput over 2 s windows is back
to >= 99% of alone and the headroom 0 (target <= 10 s).

With --engine-priority the simulators run as SGLang with --enable-priority-scheduling (a normal
request preempts a low one when the slots are full): the gateway learns it, sends the class and
lets interactive requests go over a backend's slots (headroom.overshoot) instead of keeping
slots free.

Usage: python3 bench/headroom.py [--step S] [--rates 1,5,20,5] [--engine-priority]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402
import priority as P  # noqa: E402

WARMUP = 6.0
AFTER_STOP = 20.0


def access_log_ends(path, t0_wall):
    """(seconds since t0 when it ended, class) of each proxied request in the access log."""
    from datetime import datetime
    out = []
    with open(path) as f:
        for line in f:
            try:
                o = json.loads(line)
                ts = datetime.fromisoformat(o["time"].replace("Z", "+00:00")).timestamp()
            except (ValueError, KeyError):
                continue
            if "request_id" in o:
                out.append((ts - t0_wall, o.get("priority")))
    return out


def windows(points, start, end, width=2.0):
    """points (t, v) grouped into [start, end) windows of `width` s: list of (t0, [v...])."""
    w = []
    t = start
    while t < end - 1e-9:
        w.append((t, [v for (x, v) in points if t <= x < t + width]))
        t += width
    return w


def run(args, workdir, corpus):
    procs = B.Procs(os.path.join(workdir, "steps"))
    sims = P.start_sims(procs, args.engine_priority)
    alog = os.path.join(procs.workdir, "access.log")
    url, _ = B.start_gateway(procs, sims, extra=["--queue-size", "100000", "--access-log", alog])
    chats, heads = [], []
    t0 = time.monotonic()
    t0_wall = time.time()
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            st, body = B.http(url + "/health/backends")
            if st == 200:
                h = json.loads(body).get("models", {}).get("sim-model", {}).get("headroom") or {}
                heads.append((time.monotonic() - t0, h.get("kept_slots", h.get("slots", 0)),
                              h.get("arrivals_per_s", 0.0)))
            time.sleep(0.5)

    def chat():
        time.sleep(WARMUP)
        for rate in args.rates:
            P.interactive(url, rate, args.step, chats, t0)
    threading.Thread(target=sample, daemon=True).start()
    t = threading.Thread(target=chat)
    t.start()
    bulk = procs.start("bulk", [B.binary("infergate-bulk"), "--input", corpus, "--output",
                                os.path.join(procs.workdir, "out.jsonl"), "--url", url, "--model", "sim-model",
                                "--concurrency", str(4 * sum(P.SLOTS)), "--progress-interval-s", "60",
                                "--priority", "low"])
    t.join()
    t_stop = WARMUP + args.step * len(args.rates)
    time.sleep(max(0.0, t_stop + AFTER_STOP - (time.monotonic() - t0)))
    stop.set()
    if bulk.poll() is not None:
        B.log("the bulk run ended before the schedule did: raise --requests")
    ends = access_log_ends(alog, t0_wall)
    procs.stop_all()
    return chats, heads, ends, t_stop


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--step", type=float, default=30, help="seconds per step [30]")
    ap.add_argument("--rates", default="1,5,20,5", help="interactive requests/s per step [1,5,20,5]")
    ap.add_argument("--requests", type=int, default=8000, help="bulk corpus size [8000]")
    ap.add_argument("--engine-priority", action="store_true",
                    help="simulators with --enable-priority-scheduling (preempting)")
    args = ap.parse_args()
    args.rates = [float(x) for x in args.rates.split(",")]
    if not os.environ.get("IG_SKIP_DEPS"):
        B.need(("gnuplot", "gnuplot-nox"))
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"headroom-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(args.requests), "--seed", "3",
                           "--output", corpus, "--max-tokens", str(P.BULK_TOKENS)], stdout=subprocess.DEVNULL)
    # references, on fresh simulators: the interactive client alone at 5/s, the bulk run alone
    ns = argparse.Namespace(rate=5, window=20, warmup=6, requests=2400)
    small = os.path.join(workdir, "small.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", "2400", "--seed", "3",
                           "--output", small, "--max-tokens", str(P.BULK_TOKENS)], stdout=subprocess.DEVNULL)
    idle = P.scenario("idle", small, ns, workdir)
    alone = P.scenario("bulk", small, ns, workdir)
    idle_p99, alone_rps = idle["chat"]["p99"], alone["bulk"]["rps"]
    chats, heads, ends, t_stop = run(args, workdir, corpus)

    suffix = "-engine" if args.engine_priority else ""
    rows, fig = [], {"idle_p99_ms": idle_p99, "alone_rps": alone_rps, "steps": []}
    low_ends = [(t, 1) for t, c in ends if c == "low"]
    for i, rate in enumerate(args.rates):
        a, b = WARMUP + i * args.step, WARMUP + (i + 1) * args.step
        ttft = [v for (s, v) in chats if s is not None and v is not None and a <= s < b]
        p99 = B.pct(ttft, 99) if ttft else float("nan")
        steady = [v for (s, v) in chats if s is not None and v is not None and a + 2 <= s < b]
        bulk_rps = sum(1 for t, _ in low_ends if a <= t < b) / (b - a)
        hs = [h for (t, h, _) in heads if a <= t < b]
        rows.append([f"{rate:g}/s", f"{len(ttft)}", f"{p99:.0f}", f"{p99 / idle_p99:.2f}",
                     f"{B.pct(steady, 99) / idle_p99:.2f}" if steady else "-", f"{bulk_rps:.1f}",
                     f"{bulk_rps / alone_rps:.3f}", f"{min(hs) if hs else '-'}..{max(hs) if hs else '-'}"])
        fig["steps"].append({"rate": rate, "n": len(ttft), "p99_ms": p99, "p99_vs_idle": p99 / idle_p99,
                             "bulk_rps": bulk_rps, "bulk_vs_alone": bulk_rps / alone_rps,
                             "headroom_min": min(hs) if hs else None, "headroom_max": max(hs) if hs else None})
    # the start: 2 s windows of TTFT from the first interactive request
    pts = [(s, v) for (s, v) in chats if s is not None and v is not None]
    ws = windows(pts, WARMUP, WARMUP + args.step)
    bad = [w0 for (w0, vs) in ws if vs and B.pct(vs, 99) > 1.5 * idle_p99]
    start_s = (max(bad) + 2 - WARMUP) if bad else 0.0
    # the stop: when the headroom fell to 0, and the bulk run's throughput over the 10 s after
    # the stop and the 10 s after those (completions are bursty: 2 s windows of ~80 vary by
    # 10%, so 1% is read over 10 s)
    zero = [t for (t, h, _) in heads if t >= t_stop and h == 0]
    zero_s = (min(zero) - t_stop) if zero else None
    first10 = sum(1 for t, _ in low_ends if t_stop <= t < t_stop + 10) / 10.0
    next10 = sum(1 for t, _ in low_ends if t_stop + 10 <= t < t_stop + 20) / 10.0
    fig.update({"start_recovery_s": start_s, "stop_headroom_zero_s": zero_s,
                "stop_bulk_first_10s_vs_alone": first10 / alone_rps, "stop_bulk_next_10s_vs_alone": next10 / alone_rps})
    table = B.md_table(["interactive rate", "requests", "TTFT p99 ms", "p99 / idle", "p99 / idle after its first 2 s",
                        "bulk req/s", "bulk / alone", "headroom kept (slots)"], rows)
    notes = (("Simulators as SGLang with --enable-priority-scheduling (preempting); " if args.engine_priority
              else "") +
             f"bench/priority.py's fleet ({sum(P.SLOTS)} slots) and bulk run (class low, "
             f"--concurrency {4 * sum(P.SLOTS)}), the defaults (no reserve_slots, headroom learned); "
             f"interactive streamed chat of {P.CHAT_TOKENS} tokens at {', '.join(f'{r:g}' for r in args.rates)}/s, "
             f"{args.step:g} s each after a {WARMUP:g} s warm-up, then stopped for {AFTER_STOP:g} s. Idle TTFT p99 "
             f"{idle_p99:.0f} ms (5/s on an idle fleet), bulk alone {alone_rps:.1f} req/s; bulk per step from the "
             f"access log's low requests ended. Interactive start: the p99 over 2 s windows is under 1.5x idle "
             f"from {start_s:.0f} s after the first request (target <= 5 s). Interactive stop: the headroom is 0 "
             f"after {zero_s if zero_s is None else round(zero_s, 1)} s; the bulk run's throughput over the 10 s "
             f"after the stop {100 * first10 / alone_rps:.1f}% of alone, over the next 10 s "
             f"{100 * next10 / alone_rps:.1f}% (target: >= 99% within 10 s). "
             f"Plot: bench/results/headroom{suffix}.png.")
    dat = os.path.join(B.RESULTS, f"headroom{suffix}.dat")
    with open(dat, "w") as f:
        f.write("# headroom\n")
        for t, h, r in heads:
            f.write(f"{t:.2f} {h} {r:.2f}\n")
        f.write("\n\n# ttft\n")
        for s, v in pts:
            f.write(f"{s:.3f} {v:.1f}\n")
    try:
        B.gnuplot("headroom.gp", DAT=dat, PNG=os.path.join(B.RESULTS, f"headroom{suffix}.png"))
    except (OSError, subprocess.CalledProcessError, SystemExit) as e:
        B.log(f"no plot: {e}")
    B.log(table)
    B.log(notes)
    B.record("headroom", "Learned headroom under a changing load", B.command_line(), mach, fig, table, notes)


if __name__ == "__main__":
    main()
