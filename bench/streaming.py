#!/usr/bin/env python3
"""Part 2: what infergate adds to a stream. Time to first byte (TTFB: request sent ->
status line), time to first token event, and the gaps between SSE events, for the same
simulator reached directly and through the gateway, interleaved in rounds so that load
from elsewhere hits both alike. The simulator streams at a fixed pace (default 30 tokens
at 100 tokens/s, first token at once), so the gap a client sees is 10 ms plus whatever
the path adds.

Usage: python3 bench/streaming.py [--streams N] [--concurrent C] [--rounds R] [--reference DIR]
       [--tokens T] [--tokens-per-second R]
Env: IG_BUILD (build dir, default ./build).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
import sse  # noqa: E402


def one_round(url, n, concurrent, tokens):
    host, port = url[len("http://"):].split(":")
    streams = [sse.Stream(host, int(port), "/v1/chat/completions", sse.chat_body(tokens))
               for _ in range(n)]
    sse.run(streams, concurrent)
    return streams


def figures(streams, expect_events):
    ok = [s for s in streams if s.status == 200 and s.saw_done and not s.error]
    ttfb = [(s.t_first - s.t_send) * 1000 for s in ok]
    ttft = [(s.events[0] - s.t_send) * 1000 for s in ok if s.events]
    gaps = [(b - a) * 1000 for s in ok for a, b in zip(s.events[1:-2], s.events[2:-1])]
    short = sum(1 for s in ok if len(s.events) < expect_events)
    return {"streams": len(streams), "ok": len(ok), "short": short,
            "ttfb_p50": B.pct(ttfb, 50), "ttfb_p99": B.pct(ttfb, 99),
            "ttft_p50": B.pct(ttft, 50), "ttft_p99": B.pct(ttft, 99),
            "gap_p50": B.pct(gaps, 50), "gap_p99": B.pct(gaps, 99), "gaps": len(gaps)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=400, help="streams per target per round... total [400]")
    ap.add_argument("--concurrent", type=int, default=20, help="streams open at once [20]")
    ap.add_argument("--rounds", type=int, default=4, help="direct/gateway alternations [4]")
    ap.add_argument("--tokens", type=int, default=30, help="tokens per stream [30]")
    ap.add_argument("--tokens-per-second", type=int, default=100)
    ap.add_argument("--reference", metavar="DIR",
                    help="also the infergate of this build directory (an earlier commit), in the same rounds")
    args = ap.parse_args()
    ref_bin = os.path.join(os.path.abspath(args.reference), "infergate") if args.reference else None
    if ref_bin and not os.access(ref_bin, os.X_OK):
        sys.exit(f"--reference: {ref_bin} is not an executable infergate")

    mach = B.machine()
    procs = B.Procs(os.path.join(B.TMP, f"streaming-{os.getpid()}"))
    sims, _ = B.start_sims(procs, 1, ["--tokens-per-second", str(args.tokens_per_second),
                                      "--ttft-ms", "0", "--output-tokens", str(args.tokens),
                                      "--max-running", "1024"])
    gw, _ = B.start_gateway(procs, sims)
    targets = [("direct", sims[0]), ("infergate", gw)]
    if ref_bin:
        targets.append(("infergate@ref", B.start_gateway(procs, sims, name="gateway-ref", program=ref_bin)[0]))
    per = args.streams // args.rounds
    got = {name: [] for name, _ in targets}
    for _, url in targets:                                              # warm-up
        one_round(url, args.concurrent, args.concurrent, args.tokens)
    for r in range(args.rounds):
        for name, url in targets:
            got[name] += one_round(url, per, args.concurrent, args.tokens)
        B.log(f"round {r + 1}/{args.rounds} done")
    # role chunk + T tokens + finish chunk + [DONE]
    f = {k: figures(v, args.tokens + 3) for k, v in got.items()}
    d, g = f["direct"], f["infergate"]
    added = {k: g[k] - d[k] for k in ("ttfb_p50", "ttfb_p99", "ttft_p50", "ttft_p99",
                                      "gap_p50", "gap_p99")}
    rows = []
    for label, k in (("TTFB (status line)", "ttfb"), ("first token event", "ttft"),
                     ("gap between events", "gap")):
        for p in ("p50", "p99"):
            key = f"{k}_{p}"
            rows.append([f"{label} {p}", f"{d[key]:.3f}", f"{g[key]:.3f}", f"{added[key]:+.3f}"])
    header = ["ms", "direct", "infergate", "added by infergate"]
    if ref_bin:
        ref = f["infergate@ref"]
        added_ref = {k: ref[k] - d[k] for k in added}
        header.append("added by infergate@ref")
        keys = [f"{k}_{p}" for k in ("ttfb", "ttft", "gap") for p in ("p50", "p99")]
        for row, key in zip(rows, keys):
            row.append(f"{added_ref[key]:+.3f}")
    table = B.md_table(header, rows)
    table += (f"\n\nStreams complete ([DONE] seen, status 200): direct {d['ok']}/{d['streams']}, "
              f"infergate {g['ok']}/{g['streams']}; streams with fewer events than sent: "
              f"direct {d['short']}, infergate {g['short']}; gaps measured: {d['gaps']} / "
              f"{g['gaps']}.")
    notes = (f"One `infergate-sim --tokens-per-second {args.tokens_per_second} --ttft-ms 0 "
             f"--output-tokens {args.tokens}`; the gateway has it as its only backend. "
             f"{args.streams} streams per target, {args.concurrent} open at once, in "
             f"{args.rounds} alternating rounds; raw-socket client (bench/lib/sse.py), times "
             f"from the last request byte sent. A gap is the time between consecutive token "
             f"events (the role chunk and the end are left out); the simulator's pace is "
             f"{1000 / args.tokens_per_second:.0f} ms.")
    fig = {"direct": d, "infergate": g, "added": added}
    if ref_bin:
        fig["reference"] = {"binary": ref_bin, "figures": f["infergate@ref"], "added": added_ref}
        notes += f" infergate@ref: {ref_bin}, in front of the same simulator, in the same rounds."
    B.record("streaming", "Streaming overhead", B.command_line(), mach, fig, table, notes)


if __name__ == "__main__":
    main()
