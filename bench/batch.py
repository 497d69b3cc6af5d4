#!/usr/bin/env python3
"""Issue 20: the Batch API on the gateway against infergate-bulk, in one run.

Part "interactive" (priority.py's fleet: seven simulators of 4, 4, 8, 8, 16, 16, 32 slots,
50 tokens/s, a steady interactive client of streamed chat requests without a priority
header), each scenario on fresh simulators:
  idle        the interactive client alone (the reference TTFT)
  bulk-low    infergate-bulk --priority low --concurrency 4x the slots, alone (the reference
              throughput)
  batch       the same corpus as a batch (POST /v1/files, POST /v1/batches, poll), alone
  batch+chat  the batch with the interactive client after a warm-up
  batch+chat+reserve  the same with reserve_slots 3 on the 32-slot simulator (the setting with
              which the scheduler issue's target is met: priority.py's priority+reserve)
  bulk-low+chat+reserve  infergate-bulk in that same setting (its throughput is batch+chat+reserve's
              reference)
Targets: interactive TTFT p99 beside the batch <= 2x idle (the scheduler issue's target);
batch throughput within 5% of infergate-bulk at low over the same fleet.

Part "rehearsal": the 902,087-line corpus (bench/rehearsal.py's, kept in $IG_BENCH_TMP) over
seven fast simulators, once with infergate-bulk --concurrency 448 (the reference) and once as
a batch: upload, run, download, each timed; the gateway's peak RSS in both, infergate-bulk's
own (time -v); every custom_id once in the downloaded output.
Target: the gateway's RSS under 64 MB plus the bulk client's own figure.

Usage: python3 bench/batch.py [--parts interactive,rehearsal] [--requests M] [--count N]
       [--gateway-args "--workers 2"]   (rehearsal: more flags for both gateways)
Env: IG_BUILD (build dir, default ./build), IG_BENCH_TMP, IG_SKIP_DEPS=1.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
import priority as P  # noqa: E402  (its fleet, interactive client and bulk run)

FAST_SIMS = ["--tokens-per-second", "0", "--ttft-ms", "0", "--max-running", "1024"]


def upload(url, path):
    """POST /v1/files with curl (streamed from disk, as any client would): the file id."""
    out = subprocess.run(["curl", "-sS", "-F", "purpose=batch", "-F", f"file=@{path}", url + "/v1/files"],
                         capture_output=True, text=True, check=True).stdout
    f = json.loads(out)
    if "id" not in f:
        sys.exit(f"upload failed: {out[:500]}")
    return f["id"]


def create(url, file_id):
    st, body = B.http(url + "/v1/batches", {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                            "completion_window": "24h"})
    b = json.loads(body)
    if st != 200:
        sys.exit(f"batch create: {st} {b}")
    return b["id"]


def follow(url, bid, pid=None, every=0.2, limit_s=3600):
    """Polls until the batch ends: (its last object, peak gateway VmRSS kB sampled)."""
    t0, rss = time.time(), 0
    while True:
        st, body = B.http(f"{url}/v1/batches/{bid}")
        b = json.loads(body) if st == 200 else {}
        if pid:
            rss = max(rss, B.proc_status(pid)["VmRSS"])
        if b.get("status") in ("completed", "failed", "cancelled", "expired"):
            return b, rss
        if time.time() - t0 > limit_s:
            sys.exit(f"batch {bid} did not end in {limit_s} s: {b}")
        time.sleep(every)


def run_batch(url, corpus, gwp=None):
    t0 = time.time()
    fid = upload(url, corpus)
    t1 = time.time()
    bid = create(url, fid)
    b, rss = follow(url, bid, gwp.pid if gwp else None)
    t2 = time.time()
    n = b["request_counts"]["completed"]
    return {"id": bid, "status": b["status"], "ok": n, "errors": b["request_counts"]["failed"],
            "upload_s": t1 - t0, "wall_s": t2 - t1, "rps": n / (t2 - t1),
            "run_s": b["completed_at"] - b["in_progress_at"], "output_file_id": b["output_file_id"],
            "gw_rss_kb": rss}


# ------------------------------------------------------------------ interactive

def scenario(name, corpus, args, workdir):
    procs = B.Procs(os.path.join(workdir, name))
    sims = P.start_sims(procs)
    extra = ["--queue-size", "100000", "--data-dir", os.path.join(procs.workdir, "data")]
    if name.endswith("+reserve"):   # as priority.py's priority+reserve
        cfg = os.path.join(procs.workdir, "gateway.json")
        big = P.SLOTS.index(max(P.SLOTS))
        with open(cfg, "w") as f:
            json.dump({"backends": [dict({"url": u}, **({"reserve_slots": P.RESERVE} if i == big else {}))
                                    for i, u in enumerate(sims)]}, f)
        url, gwp = B.start_gateway(procs, sims, config=cfg, extra=extra)
    else:
        url, gwp = B.start_gateway(procs, sims, extra=extra)
    res, chats, t0 = {"scenario": name}, [], time.monotonic()
    if name == "idle":
        P.interactive(url, args.rate, args.window, chats, t0)
    elif name == "bulk-low":
        res["bulk"] = P.run_bulk(procs, url, corpus, args.requests, 4 * sum(P.SLOTS))
    elif name == "batch":
        res["bulk"] = run_batch(url, corpus)
    else:
        def chat():
            time.sleep(args.warmup)
            P.interactive(url, args.rate, args.window, chats, t0)
        t = threading.Thread(target=chat)
        t.start()
        if name.startswith("bulk-low"):   # the reference beside the same client, same settings
            res["bulk"] = P.run_bulk(procs, url, corpus, args.requests, 4 * sum(P.SLOTS))
        else:
            res["bulk"] = run_batch(url, corpus)
        t.join()
        if res["bulk"]["wall_s"] < args.warmup + args.window:
            B.log(f"{name}: the batch ended before the interactive window did: raise --requests")
    ttft = [x[1] for x in chats if x[1] is not None]
    res["chat"] = {"sent": len(chats), "ok": len(ttft), "p50": B.pct(ttft, 50), "p99": B.pct(ttft, 99)}
    procs.stop_all()
    B.log(f"{name}: chat {res['chat']}, bulk {res.get('bulk')}")
    return res


def interactive_part(args, mach):
    workdir = os.path.join(B.TMP, f"batch-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(args.requests), "--seed", "3",
                           "--output", corpus, "--max-tokens", str(P.BULK_TOKENS), "--model", "sim-model"],
                          stdout=subprocess.DEVNULL)
    runs = {n: scenario(n, corpus, args, workdir) for n in args.scenarios.split(",")}
    idle_p99 = runs["idle"]["chat"]["p99"] if "idle" in runs else float("nan")
    ref = runs["bulk-low"]["bulk"]["rps"] if "bulk-low" in runs else float("nan")
    rows = []
    for n, r in runs.items():
        c, b = r["chat"], r.get("bulk")
        rows.append([n, f"{c['ok']}/{c['sent']}" if c["sent"] else "-", f"{c['p50']:.0f}" if c["sent"] else "-",
                     f"{c['p99']:.0f}" if c["sent"] else "-",
                     f"{c['p99'] / idle_p99:.2f}" if c["sent"] and n != "idle" else "-",
                     f"{b['rps']:.1f}" if b else "-", f"{b['rps'] / ref:.3f}" if b else "-",
                     f"{b['errors']}" if b else "-"])
    table = B.md_table(["scenario", "chat ok/sent", "TTFT p50 ms", "TTFT p99 ms", "p99 / idle p99",
                        "lines/s", "/ bulk-low", "errors"], rows)
    verdict = []
    for n in ("batch+chat", "batch+chat+reserve"):
        if n in runs:
            r1 = runs[n]["chat"]["p99"] / idle_p99
            verdict.append(f"Target, {n}: interactive p99 beside the batch <= 2x idle: {r1:.2f}x "
                           f"({'met' if r1 <= 2 else 'MISSED'}).")
    for n in ("batch", "batch+chat", "batch+chat+reserve"):
        if n in runs:
            same = "bulk-low+chat+reserve" if n.endswith("+reserve") and "bulk-low+chat+reserve" in runs else None
            r2 = runs[n]["bulk"]["rps"] / (runs[same]["bulk"]["rps"] if same else ref)
            verdict.append(f"Target, {n}: throughput within 5% of infergate-bulk --priority low"
                           f"{' (' + same + ')' if same else ''}: {100 * r2:.1f}% "
                           f"({'met' if abs(r2 - 1) <= 0.05 or r2 > 1 else 'MISSED'}).")
    verdict = " ".join(verdict)
    notes = (f"priority.py's fleet: seven infergate-sim, slots {P.SLOTS}, {P.TPS} tokens/s, TTFT {P.TTFT_MS} ms; "
             f"{args.requests} chat lines of 16..{P.BULK_TOKENS} tokens; bulk-low: infergate-bulk --priority low "
             f"--concurrency {4 * sum(P.SLOTS)}; batch: the same file uploaded, POST /v1/batches, polled every "
             f"0.2 s (lines/s from the create to completed); interactive: {args.rate:g} streamed chat "
             f"requests/s for {args.window:g} s after {args.warmup:g} s. Everything on the same 2 cores.\n\n"
             + verdict)
    B.record("batch", "Batch API beside interactive requests", B.command_line(), mach,
             {n: r for n, r in runs.items()}, table, notes)
    print(verdict)


# -------------------------------------------------------------------- rehearsal

def rehearsal_part(args, mach):
    os.makedirs(B.TMP, exist_ok=True)
    bulk = B.binary("infergate-bulk")
    corpus = os.path.join(B.TMP, f"corpus-{args.count}.jsonl")
    if not os.path.exists(corpus):
        B.log(f"generating {corpus}")
        subprocess.check_call([bulk, "generate", "--count", str(args.count), "--seed", "1", "--output", corpus])
    # the Batch API needs the model in each line (no --model flag): a copy with it, made once
    with_model = corpus[:-len(".jsonl")] + "-model.jsonl"
    if not os.path.exists(with_model):
        B.log(f"writing {with_model}")
        with open(corpus) as fin, open(with_model + ".tmp", "w") as fout:
            for line in fin:
                o = json.loads(line)
                o["body"]["model"] = "sim-model"
                fout.write(json.dumps(o, separators=(",", ":")) + "\n")
        os.rename(with_model + ".tmp", with_model)
    fig = {}
    # the reference: infergate-bulk through the gateway, as bench/rehearsal.py runs it
    procs = B.Procs(os.path.join(B.TMP, f"batch-rehearsal-{os.getpid()}"))
    sims, _ = B.start_sims(procs, 7, FAST_SIMS)
    gw, gwp = B.start_gateway(procs, sims, extra=["--data-dir", os.path.join(procs.workdir, "data")]
                              + args.gateway_args.split())
    out = os.path.join(procs.workdir, "bulk-out.jsonl")
    timev = os.path.join(procs.workdir, "time-v.txt")
    B.log("infergate-bulk --concurrency 448")
    t0, rss = time.time(), 0
    p = procs.start("bulk", ["/usr/bin/time", "-v", "-o", timev, bulk, "--input", with_model, "--output", out,
                             "--url", gw, "--concurrency", "448", "--progress-interval-s", "30"])
    while p.poll() is None:
        time.sleep(1)
        rss = max(rss, B.proc_status(gwp.pid)["VmRSS"])
    fig["bulk"] = {"exit": p.returncode, "wall_s": time.time() - t0, "gw_rss_kb": rss,
                   "bulk_maxrss_kb": int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                                                   open(timev).read()).group(1))}
    procs.stop_all()
    os.unlink(out)
    # the batch, on fresh simulators and a fresh gateway
    sims, _ = B.start_sims(procs, 7, FAST_SIMS, name="bsim")
    gw, gwp = B.start_gateway(procs, sims, name="bgateway",
                              extra=["--data-dir", os.path.join(procs.workdir, "bdata")] + args.gateway_args.split())
    rss0 = B.proc_status(gwp.pid)["VmRSS"]
    B.log("the same corpus as a batch")
    r = run_batch(gw, with_model, gwp)
    dl = os.path.join(procs.workdir, "batch-out.jsonl")
    t = time.time()
    subprocess.run(["curl", "-sS", "-o", dl, f"{gw}/v1/files/{r['output_file_id']}/content"], check=True)
    r["download_s"] = time.time() - t
    r["gw_hwm_kb"] = max(B.proc_status(gwp.pid)["VmHWM"], r["gw_rss_kb"])
    r["gw_start_kb"] = rss0
    ids, lines = set(), 0
    with open(dl, "rb") as f:
        for line in f:
            lines += 1
            ids.add(json.loads(line)["custom_id"])
    r["output_lines"], r["unique_ids"] = lines, len(ids)
    os.unlink(dl)
    procs.stop_all()
    fig["batch"] = r
    b, k = fig["bulk"], fig["batch"]
    limit_kb = 64 * 1024 + b["bulk_maxrss_kb"]
    total = k["upload_s"] + k["wall_s"] + k["download_s"]
    rows = [["infergate-bulk --concurrency 448: wall", f"{b['wall_s']:.1f} s (exit {b['exit']})"],
            ["  gateway peak RSS (sampled) / bulk peak RSS", f"{b['gw_rss_kb'] / 1024:.1f} / "
             f"{b['bulk_maxrss_kb'] / 1024:.1f} MB"],
            ["batch: upload / run (create to completed) / download", f"{k['upload_s']:.1f} / {k['wall_s']:.1f} / "
             f"{k['download_s']:.1f} s = {total:.1f} s ({total / b['wall_s']:.2f}x infergate-bulk)"],
            ["  status, lines, unique ids", f"{k['status']}, {k['output_lines']:,}, {k['unique_ids']:,} "
             f"({'OK' if k['output_lines'] == k['unique_ids'] == args.count else 'MISMATCH'})"],
            ["  gateway RSS at start / peak", f"{k['gw_start_kb'] / 1024:.1f} / {k['gw_hwm_kb'] / 1024:.1f} MB"],
            ["  target: peak <= 64 MB + bulk's own", f"{k['gw_hwm_kb'] / 1024:.1f} <= {limit_kb / 1024:.1f} MB: "
             f"{'met' if k['gw_hwm_kb'] <= limit_kb else 'MISSED'}"]]
    table = B.md_table(["figure", "value"], rows)
    notes = (f"Seven `infergate-sim {' '.join(FAST_SIMS)}`; `infergate-bulk generate --count {args.count} --seed 1` "
             f"with \"model\" added to each body. The batch is uploaded with curl -F, created, polled every 0.2 s "
             f"and its output downloaded with curl.")
    B.record("batch-rehearsal", "902K rehearsal as a batch", B.command_line(), mach, fig, table, notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="interactive,rehearsal")
    ap.add_argument("--requests", type=int, default=2400, help="interactive part: corpus size [2400]")
    ap.add_argument("--rate", type=float, default=5, help="interactive requests/s [5]")
    ap.add_argument("--warmup", type=float, default=6, help="seconds of batch before the client starts [6]")
    ap.add_argument("--window", type=float, default=20, help="seconds of interactive load [20]")
    ap.add_argument("--count", type=int, default=902087, help="rehearsal part: corpus size [902087]")
    ap.add_argument("--gateway-args", default="",
                    help="rehearsal part: more flags for both gateways (e.g. --workers 2)")
    ap.add_argument("--scenarios", default="idle,bulk-low,batch,batch+chat,batch+chat+reserve,"
                    "bulk-low+chat+reserve",
                    help="interactive part's scenarios")
    args = ap.parse_args()
    mach = B.machine()
    parts = args.parts.split(",")
    if "interactive" in parts:
        interactive_part(args, mach)
    if "rehearsal" in parts:
        rehearsal_part(args, mach)


if __name__ == "__main__":
    main()
