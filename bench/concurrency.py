#!/usr/bin/env python3
"""Part 3: many streams held open at once through one gateway. Opens N streaming chat
completions through infergate to seven slow simulators (so they stay open), holds them,
samples the gateway's RSS (VmRSS, VmHWM), open fds and CPU, and checks that every stream
ends with status 200 and `data: [DONE]`.

The gateway needs two descriptors per stream (client socket, backend socket). With the
open-file hard limit at H (`ulimit -Hn`; raising it needs CAP_SYS_RESOURCE), one gateway
holds at most (H - reserve) / 2 streams: N is capped there and the cap is reported.

Usage: python3 bench/concurrency.py [--streams N] [--open-rate R] [--tokens T]
       [--tokens-per-second R] [--clients K]
Env: IG_BUILD (build dir, default ./build).
"""

import argparse
import multiprocessing
import os
import resource
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
import sse  # noqa: E402

RESERVE = 40   # listen socket, epoll, timerfd, signalfd, curl/MHD internals, stdio, probes


def client(url, n, rate, tokens, q):
    """One client process: n streams, opened at `rate` per second; reports counts."""
    B.raise_nofile()
    host, port = url[len("http://"):].split(":")
    streams = [sse.Stream(host, int(port), "/v1/chat/completions", sse.chat_body(tokens))
               for _ in range(n)]

    def tick(open_now, finished):
        q.put(("tick", os.getpid(), open_now, finished,
               sum(1 for s in streams if s.headers_done)))

    sse.run(streams, n, open_rate=rate, on_tick=tick, deadline=time.monotonic() + 600)
    errors = {}
    for s in streams:
        if s.error or s.status != 200 or not s.saw_done:
            k = s.error or (f"status {s.status}" if s.status != 200 else "no [DONE]")
            errors[k] = errors.get(k, 0) + 1
    q.put(("done", os.getpid(), n - sum(errors.values()), errors))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=10000, help="streams to hold [10000]")
    ap.add_argument("--open-rate", type=float, default=1000, help="new streams per second [1000]")
    ap.add_argument("--tokens", type=int, default=40, help="tokens per stream [40]")
    ap.add_argument("--tokens-per-second", type=int, default=1, help="pace of each stream [1]")
    ap.add_argument("--clients", type=int, default=2, help="client processes [2]")
    args = ap.parse_args()

    mach = B.machine()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    cap = (hard - RESERVE) // 2
    n = min(args.streams, cap)
    if n < args.streams:
        B.log(f"open-file hard limit {hard}: one gateway can hold {cap} streams, not "
              f"{args.streams}; running {n}")
    procs = B.Procs(os.path.join(B.TMP, f"concurrency-{os.getpid()}"))
    per_sim = n // 7 + 64
    sims, _ = B.start_sims(procs, 7, ["--tokens-per-second", str(args.tokens_per_second),
                                      "--ttft-ms", "0", "--output-tokens", str(args.tokens),
                                      "--max-running", str(per_sim)])
    gw, gwp = B.start_gateway(procs, sims, extra=["--max-connections", str(n + 64)])
    idle = B.proc_status(gwp.pid)
    B.log(f"gateway {gw} pid {gwp.pid}: idle VmRSS {idle['VmRSS']} kB; opening {n} streams "
          f"at {args.open_rate:.0f}/s from {args.clients} client processes")

    q = multiprocessing.Queue()
    shares = [n // args.clients + (1 if i < n % args.clients else 0) for i in range(args.clients)]
    workers = [multiprocessing.Process(target=client, args=(gw, k, args.open_rate / args.clients,
                                                            args.tokens, q)) for k in shares]
    for w in workers:
        w.start()
    state, results = {}, {}
    peak_open = peak_rss = peak_fds = 0
    t0 = time.time()
    c_prev, t_prev = B.cpu_seconds([gwp.pid]), time.time()
    samples = []
    while len(results) < len(workers):
        while not q.empty():
            m = q.get()
            if m[0] == "tick":
                state[m[1]] = m[2:]
            else:
                results[m[1]] = (m[2], m[3])
        time.sleep(0.5)
        open_now = sum(s[0] for s in state.values())
        headers = sum(s[2] for s in state.values())
        try:
            st = B.proc_status(gwp.pid)
            fds = len(os.listdir(f"/proc/{gwp.pid}/fd"))
        except FileNotFoundError:
            sys.exit("the gateway died; see its log in " + procs.workdir)
        c, t = B.cpu_seconds([gwp.pid]), time.time()
        cpu = 100 * (c - c_prev) / (t - t_prev)
        c_prev, t_prev = c, t
        samples.append((t - t0, open_now, st["VmRSS"], cpu))
        if open_now >= peak_open:
            peak_open = open_now
        peak_rss, peak_fds = max(peak_rss, st["VmRSS"]), max(peak_fds, fds)
        if int(t - t0) % 5 == 0 and t - t0 - int(t - t0) < 0.5:
            B.log(f"t={t - t0:5.1f}s open {open_now:6} (headers {headers:6}) gateway "
                  f"VmRSS {st['VmRSS'] / 1024:6.1f} MB fds {fds:6} cpu {cpu:5.1f}%")
        if time.time() - t0 > 900:
            sys.exit("no end after 900 s")
    for w in workers:
        w.join()
    end = B.proc_status(gwp.pid)
    ok = sum(r[0] for r in results.values())
    errors = {}
    for _, e in results.values():
        for k, v in e.items():
            errors[k] = errors.get(k, 0) + v
    # CPU while the streams are held: samples with at least 95% of the peak open.
    held = [s for s in samples if s[1] >= 0.95 * peak_open]
    cpu_held = sum(s[3] for s in held) / max(len(held), 1)
    per_stream = (end["VmHWM"] - idle["VmRSS"]) / max(peak_open, 1)
    fig = {"requested": args.streams, "ran": n, "nofile_hard": hard, "peak_open": peak_open,
           "ok": ok, "errors": errors, "rss_idle_kb": idle["VmRSS"], "rss_peak_kb": peak_rss,
           "hwm_kb": end["VmHWM"], "peak_fds": peak_fds, "cpu_held_pct": cpu_held,
           "kb_per_stream": per_stream, "held_seconds": len(held) * 0.5}
    rows = [["streams asked / run", f"{args.streams:,} / {n:,}"],
            ["peak streams open at once (client side)", f"{peak_open:,}"],
            ["completed with 200 and [DONE]", f"{ok:,}"],
            ["errors", sum(errors.values()) if errors else 0],
            ["gateway VmRSS idle", f"{idle['VmRSS'] / 1024:.1f} MB"],
            ["gateway VmHWM (peak RSS)", f"{end['VmHWM'] / 1024:.1f} MB"],
            ["per stream", f"{per_stream:.1f} kB"],
            ["gateway peak open fds", f"{peak_fds:,}"],
            ["gateway CPU while held", f"{cpu_held:.1f}% of one core "
             f"({peak_open * args.tokens_per_second:,} events/s)"],
            ["time held at >= 95% of peak", f"{len(held) * 0.5:.0f} s"]]
    table = B.md_table(["figure", "value"], rows)
    if errors:
        table += "\n\nErrors: " + ", ".join(f"{k}: {v}" for k, v in errors.items())
    notes = (f"Seven `infergate-sim --tokens-per-second {args.tokens_per_second} --ttft-ms 0 "
             f"--output-tokens {args.tokens} --max-running {per_sim}`; streams opened at "
             f"{args.open_rate:.0f}/s by {args.clients} client processes (bench/lib/sse.py), "
             f"each held about {args.tokens / args.tokens_per_second:.0f} s. Open-file hard "
             f"limit {hard} (raising it is not permitted here): one gateway can hold at most "
             f"({hard} - {RESERVE}) / 2 = {cap} streams.")
    B.record("concurrency", "Concurrent streams", B.command_line(), mach, fig, table, notes)


if __name__ == "__main__":
    main()
