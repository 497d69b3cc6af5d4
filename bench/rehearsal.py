#!/usr/bin/env python3
"""Part 4 and 6b: the 902K rehearsal. Generates the corpus (902,087 prompts, seed 1, once;
kept in $IG_BENCH_TMP), starts seven fast simulators and the gateway, runs infergate-bulk
at --concurrency 448 under /usr/bin/time -v, and reports wall time, req/s, the peak RSS of
the gateway (VmHWM) and of the bulk client (time -v), checks that the output holds every
custom_id exactly once, and plots completed requests/s over time from the progress file.

Usage: python3 bench/rehearsal.py [--count N] [--concurrency C] [--policy P]
Env: IG_BUILD (build dir, default ./build), IG_BENCH_TMP (corpus and outputs,
default /tmp/infergate-bench; about 1.5 GB for 902,087 lines).
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

SIM_ARGS = ["--tokens-per-second", "0", "--ttft-ms", "0", "--max-running", "1024"]


def count_ids(path):
    """(lines, unique custom_ids) of a Batch output file, parsing every line."""
    ids, lines = set(), 0
    with open(path, "rb") as f:
        for line in f:
            lines += 1
            ids.add(json.loads(line)["custom_id"])
    return lines, len(ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=902087)
    ap.add_argument("--concurrency", type=int, default=448)
    ap.add_argument("--policy", default="least-loaded", help="the gateway's policy [least-loaded]")
    args = ap.parse_args()

    mach = B.machine()
    os.makedirs(B.TMP, exist_ok=True)
    procs = B.Procs(os.path.join(B.TMP, f"rehearsal-{os.getpid()}"))
    bulk = B.binary("infergate-bulk")
    corpus = os.path.join(B.TMP, f"corpus-{args.count}.jsonl")
    gen_s = None
    if not os.path.exists(corpus):
        B.log(f"generating {corpus}")
        t = time.time()
        subprocess.check_call([bulk, "generate", "--count", str(args.count), "--seed", "1",
                               "--output", corpus])
        gen_s = time.time() - t
    sims, _ = B.start_sims(procs, 7, SIM_ARGS)
    gw, gwp = B.start_gateway(procs, sims, extra=["--policy", args.policy])
    rss_start = B.proc_status(gwp.pid)["VmRSS"]
    out = os.path.join(procs.workdir, "out.jsonl")
    progress = os.path.join(procs.workdir, "progress.json")
    summary = os.path.join(procs.workdir, "summary.json")
    timev = os.path.join(procs.workdir, "time-v.txt")
    argv = ["/usr/bin/time", "-v", "-o", timev, bulk, "--input", corpus, "--output", out,
            "--url", gw, "--model", "sim-model", "--concurrency", str(args.concurrency),
            "--progress-file", progress, "--summary-json", summary, "--progress-interval-s", "10"]
    B.log(f"running: {' '.join(argv[4:])}")
    t0 = time.time()
    p = procs.start("bulk", argv)
    series = []                # (seconds, done) from the progress file, once a second
    last = None
    rss_max = 0                # VmHWM is kept in per-CPU batches: take the larger of both
    while p.poll() is None:
        time.sleep(1)
        rss_max = max(rss_max, B.proc_status(gwp.pid)["VmRSS"])
        try:
            with open(progress) as f:
                pr = json.load(f)
        except (OSError, ValueError):
            continue
        done = pr.get("done", pr.get("completed", 0))
        if done != last:
            series.append((time.time() - t0, done))
            last = done
        if len(series) % 15 == 0:
            B.log(f"{done:,} done, gateway VmRSS {B.proc_status(gwp.pid)['VmRSS'] / 1024:.1f} MB")
        if time.time() - t0 > 3600:
            sys.exit("the rehearsal ran over an hour")
    wall = time.time() - t0
    gw_mem = B.proc_status(gwp.pid)
    gw_mem["VmHWM"] = max(gw_mem["VmHWM"], rss_max)
    with open(timev) as f:
        tv = f.read()
    bulk_rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv).group(1))
    with open(summary) as f:
        summ = json.load(f)
    B.log("checking the output")
    lines, unique = count_ids(out)
    errfile = out[:-len(".jsonl")] + ".errors.jsonl"
    errs = sum(1 for _ in open(errfile)) if os.path.exists(errfile) else 0

    dat = os.path.join(B.RESULTS, "rehearsal-throughput.dat")
    with open(dat, "w") as f:
        f.write("# seconds done req/s(over the previous sample)\n")
        prev = (0.0, 0)
        for t, d in series:
            f.write(f"{t:.1f} {d} {(d - prev[1]) / max(t - prev[0], 1e-9):.0f}\n")
            prev = (t, d)
    B.gnuplot("rehearsal.gp", DAT=dat, PNG=os.path.join(B.RESULTS, "rehearsal-throughput.png"),
              TITLE=f"{args.count:,} prompts, 7 sims, infergate, bulk --concurrency "
                    f"{args.concurrency}")
    rps = args.count / wall
    fig = {"count": args.count, "exit": p.returncode, "wall_s": wall, "rps": rps,
           "bulk_summary": summ, "bulk_maxrss_kb": bulk_rss, "gateway_hwm_kb": gw_mem["VmHWM"], "gateway_start_kb": rss_start, "policy": args.policy,
           "output_lines": lines, "unique_ids": unique, "error_lines": errs,
           "corpus_generate_s": gen_s}
    rows = [["wall time (bulk start to exit)", f"{wall:.1f} s ({wall / 60:.1f} min)"],
            ["requests/s", f"{rps:,.0f}"],
            ["bulk exit status", p.returncode],
            ["output lines / unique custom_id", f"{lines:,} / {unique:,} "
             f"({'OK' if lines == unique == args.count else 'MISMATCH'})"],
            ["errors-file lines", errs],
            ["gateway peak RSS (VmHWM, sampled VmRSS)", f"{gw_mem['VmHWM'] / 1024:.1f} MB"],
            ["gateway RSS growth (peak - at start)", f"{(gw_mem['VmHWM'] - rss_start) / 1024:.1f} MB "
             f"(policy {args.policy})"],
            ["bulk peak RSS (time -v)", f"{bulk_rss / 1024:.1f} MB"],
            ["bulk latency p50 / p99", f"{summ.get('latency_ms', {}).get('p50', '?')} / "
             f"{summ.get('latency_ms', {}).get('p99', '?')} ms"]]
    if gen_s:
        rows.append(["corpus generation", f"{gen_s:.1f} s"])
    table = B.md_table(["figure", "value"], rows)
    notes = (f"Seven `infergate-sim {' '.join(SIM_ARGS)}` (answers of 16..256 tokens chosen "
             f"by the prompt), the gateway with default settings, `infergate-bulk --concurrency "
             f"{args.concurrency}` on `infergate-bulk generate --count {args.count} --seed 1`. "
             f"Throughput over time: results/rehearsal-throughput.png.")
    B.record("rehearsal", "902K rehearsal", B.command_line(), mach, fig, table, notes)


if __name__ == "__main__":
    main()
