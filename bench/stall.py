#!/usr/bin/env python3
"""Issue 31: does disk work stall the gateway? Interactive TTFT beside an upload and a validation.

Seven infergate-sim (priority.py's slots, 50 tokens/s, a short TTFT) and one gateway with
data_dir; a client of streamed chat requests (class normal) at a steady rate, timed to the
first token:
  idle   the client alone (the reference)
  disk   the same client while a 1 GiB file is uploaded to /v1/files with curl, one upload
         after another (each deleted when stored), and while a 902,087-line batch validates:
         a batch of the rehearsal corpus is created, cancelled as soon as it leaves
         validating, and created again, for the whole window (its requests never run)
for this build and, with --reference DIR, for another build (f62086c's) after it, side by
side, each on fresh processes. Target (issue 31): TTFT p99 under disk <= 1.5x idle; at f62086c it was
11.5x with 300 MB uploads.

Usage: python3 bench/stall.py [--reference /tmp/ref/build] [--window 30] [--rate 10]
       [--workers 2] [--upload-mb 1024] [--count 902087]
Env: IG_BUILD (this build, default ./build), IG_BENCH_TMP (the corpus and the 1 GiB file).
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
import priority as P  # noqa: E402  (its fleet's slots and the interactive client)

TTFT_MS = 20


def start_sims(procs, build):
    args = [["--max-running", str(s), "--tokens-per-second", str(P.TPS), "--ttft-ms", str(TTFT_MS),
             "--output-tokens", "0"] for s in P.SLOTS]
    urls, ps = [], []
    for i, a in enumerate(args):
        port = B.free_port()
        ps.append(procs.start(f"sim{i + 1}", [os.path.join(build, "infergate-sim"), "--listen",
                                              f"127.0.0.1:{port}", "--log-level", "warn",
                                              "--seed", str(i + 1)] + a))
        urls.append(f"http://127.0.0.1:{port}")
    for u, p in zip(urls, ps):
        B.wait_http(u + "/health", proc=p)
    return urls


def upload(url, path, timeout=600):
    """POST /v1/files with curl, streamed from disk: (seconds, the File object or the error)."""
    t = time.time()
    out = subprocess.run(["curl", "-sS", "-m", str(timeout), "-F", "purpose=batch", "-F", f"file=@{path}",
                          url + "/v1/files"], capture_output=True, text=True).stdout
    try:
        return time.time() - t, json.loads(out)
    except ValueError:
        return time.time() - t, {"error": out[:200]}


def delete(url, fid):
    try:
        urllib.request.urlopen(urllib.request.Request(f"{url}/v1/files/{fid}", method="DELETE"), timeout=60).read()
    except OSError:
        pass


def disk_load(url, big, corpus_id, stop, fig, load):
    """Uploads of the big file one after another, and batches of the corpus kept validating,
    until stop is set."""
    def uploads():
        while not stop.is_set():
            secs, f = upload(url, big)
            if "id" in f:
                fig["uploads"].append(secs)
                delete(url, f["id"])
            else:
                fig["upload_errors"].append(str(f)[:200])
                time.sleep(0.5)

    def batches():
        while not stop.is_set():
            st, body = B.http(url + "/v1/batches", {"input_file_id": corpus_id,
                                                    "endpoint": "/v1/chat/completions",
                                                    "completion_window": "24h"}, timeout=60)
            if st != 200:
                fig["batch_errors"].append(f"{st} {body[:200]!r}")
                time.sleep(0.5)
                continue
            bid, t0 = json.loads(body)["id"], time.time()
            while not stop.is_set():
                st, body = B.http(f"{url}/v1/batches/{bid}", timeout=60)
                if st == 200 and json.loads(body)["status"] != "validating":
                    fig["validations"].append(time.time() - t0)
                    break
                time.sleep(0.1)
            B.http(f"{url}/v1/batches/{bid}/cancel", {}, timeout=60)

    ts = [threading.Thread(target=f) for f, on in ((uploads, "upload" in load), (batches, "validation" in load)) if on]
    for t in ts:
        t.start()
    return ts


def run_build(label, build, args, big, corpus):
    procs = B.Procs(os.path.join(B.TMP, f"stall-{os.getpid()}", label))
    sims = start_sims(procs, build)
    data = os.path.join(procs.workdir, "data")
    url, gwp = B.start_gateway(procs, sims, program=os.path.join(build, "infergate"),
                               extra=["--data-dir", data, "--workers", str(args.workers),
                                      # a batch that leaves validating sends one line at most before
                                      # it is cancelled: its requests are not what is measured
                                      "--batch-max-inflight", "1",
                                      "--files-max-bytes", str(4 << 30), "--queue-size", "100000"])
    secs, f = upload(url, corpus)
    if "id" not in f:
        sys.exit(f"{label}: the corpus upload failed: {f}")
    res = {"build": build, "corpus_upload_s": secs}
    for phase in ("idle", "disk"):
        chats, stop, fig = [], threading.Event(), {"uploads": [], "upload_errors": [], "validations": [],
                                                     "batch_errors": []}
        ts = disk_load(url, big, f["id"], stop, fig, args.load.split(",")) if phase == "disk" else []
        if ts:
            time.sleep(2)   # the upload and the first validation under way
        P.interactive(url, args.rate, args.window, chats, time.monotonic())
        stop.set()
        for t in ts:
            t.join()
        ttft = [x[1] for x in chats if x[1] is not None]
        res[phase] = dict(fig, sent=len(chats), ok=len(ttft), p50=B.pct(ttft, 50), p99=B.pct(ttft, 99),
                          max=max(ttft) if ttft else float("nan"))
        B.log(f"{label} {phase}: ok {len(ttft)}/{len(chats)} p50 {res[phase]['p50']:.0f} "
              f"p99 {res[phase]['p99']:.0f} ms; uploads {['%.1f' % s for s in fig['uploads']]}, "
              f"validations {['%.1f' % s for s in fig['validations']]}")
    procs.stop_all()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", help="another build directory (f62086c's), measured the same way")
    ap.add_argument("--window", type=float, default=30, help="seconds of interactive load per phase [30]")
    ap.add_argument("--rate", type=float, default=10, help="interactive requests/s [10]")
    ap.add_argument("--workers", type=int, default=2, help="the gateway's reactors [2]")
    ap.add_argument("--upload-mb", type=int, default=1024, help="size of the uploaded file [1024]")
    ap.add_argument("--count", type=int, default=902087, help="lines of the batch's corpus [902087]")
    ap.add_argument("--load", default="upload,validation", help="the disk phase's work [upload,validation]")
    args = ap.parse_args()
    mach = B.machine()
    os.makedirs(B.TMP, exist_ok=True)
    big = os.path.join(B.TMP, f"upload-{args.upload_mb}mb.bin")
    if not os.path.exists(big) or os.path.getsize(big) != args.upload_mb << 20:
        with open(big, "wb") as f:   # its pages come from the page cache: the gateway's writes are measured
            chunk = os.urandom(1 << 20)
            for _ in range(args.upload_mb):
                f.write(chunk)
    corpus = os.path.join(B.TMP, f"corpus-{args.count}-model.jsonl")
    if not os.path.exists(corpus):   # as bench/batch.py makes it
        raw = os.path.join(B.TMP, f"corpus-{args.count}.jsonl")
        if not os.path.exists(raw):
            subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(args.count), "--seed",
                                   "1", "--output", raw])
        with open(raw) as fin, open(corpus + ".tmp", "w") as fout:
            for line in fin:
                o = json.loads(line)
                o["body"]["model"] = "sim-model"
                fout.write(json.dumps(o, separators=(",", ":")) + "\n")
        os.rename(corpus + ".tmp", corpus)
    builds = [("this", B.BUILD)] + ([("reference", os.path.abspath(args.reference))] if args.reference else [])
    runs = {label: run_build(label, build, args, big, corpus) for label, build in builds}
    rows = []
    for label, r in runs.items():
        i, d = r["idle"], r["disk"]
        up = d["uploads"]
        rows.append([label, f"{i['ok']}/{i['sent']}", f"{i['p99']:.0f}", f"{d['ok']}/{d['sent']}",
                     f"{d['p50']:.0f}", f"{d['p99']:.0f}", f"{d['max']:.0f}", f"{d['p99'] / i['p99']:.2f}x",
                     f"{len(up)} ({sum(up) / len(up):.1f} s each)" if up else "0",
                     f"{len(d['validations'])} ({sum(d['validations']) / len(d['validations']):.1f} s each)"
                     if d["validations"] else "0 (still validating at the end)"])
    table = B.md_table(["build", "idle ok", "idle p99 ms", "disk ok", "disk p50 ms", "disk p99 ms",
                        "disk max ms", "p99 / idle p99", "1 GiB uploads done", "902K validations done"], rows)
    r = runs["this"]
    ratio = r["disk"]["p99"] / r["idle"]["p99"]
    notes = (f"Seven infergate-sim (slots {P.SLOTS}, {P.TPS} tokens/s, TTFT {TTFT_MS} ms), the gateway with "
             f"--workers {args.workers} and --data-dir; interactive: {args.rate:g} streamed chat requests/s "
             f"({P.CHAT_TOKENS} tokens) for {args.window:g} s per phase; disk: a {args.upload_mb} MiB file "
             f"uploaded with curl -F again and again (each deleted when stored) and batches of the "
             f"{args.count:,}-line corpus created and cancelled as soon as they leave validating, from 2 s "
             f"before the window to its end (--batch-max-inflight 1: the cancelled batches send next to nothing). Everything on the same {mach['nproc']} cores.\n\n"
             f"Target: TTFT p99 beside the disk work <= 1.5x idle: {ratio:.2f}x "
             f"({'met' if ratio <= 1.5 else 'MISSED'}).")
    B.record("stall", "Interactive TTFT beside an upload and a validation", B.command_line(), mach, runs, table,
             notes)


if __name__ == "__main__":
    main()
