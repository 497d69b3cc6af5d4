#!/usr/bin/env python3
"""Part 3: many streams held open at once, through infergate and through nginx. Opens N
streaming chat completions through infergate to seven slow simulators (so they stay open),
holds them, samples the gateway's RSS (VmRSS, VmHWM), open fds and CPU, and checks that
every stream ends with status 200 and `data: [DONE]`. Then the same N streams through nginx
(2 workers, bench/conf/nginx.conf.in as bench/proxy.py runs it: proxy_buffering off, the
same upstream keepalive) in front of the same seven simulators, sampling the sum over its
workers; the two side by side, with the ratio of their memory per stream.

Memory per stream = (peak VmHWM - idle VmRSS) / peak streams open; for nginx both are sums
over the workers (the master holds no stream), idle taken before the streams open.

A stream takes two descriptors (client socket, backend socket), in the gateway or in one
nginx worker. With the open-file hard limit at H (`ulimit -Hn`; raising it needs
CAP_SYS_RESOURCE), one gateway holds at most (H - reserve) / 2 streams: N is capped there,
for both targets, and the cap is reported. nginx gets worker_rlimit_nofile H and
worker_connections 2 N + 256 (at most H) per worker.

Usage: python3 bench/concurrency.py [--streams N] [--open-rate R] [--tokens T]
       [--tokens-per-second R] [--clients K] [--no-nginx] [--prompt-bytes N] [--reference DIR]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get).
"""

import argparse
import multiprocessing
import os
import resource
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
import sse  # noqa: E402
from proxy import start_nginx  # noqa: E402  (bench/proxy.py: one nginx config for both)

RESERVE = 200  # listen socket, epoll, timerfd, signalfd, curl internals, stdio, probes, and one
               # libmicrohttpd epoll fd per 64 client connections (156 at 9,900)
NGINX_WORKERS = 2


def prompt_text(nbytes):
    """A user message of about nbytes (the default: a one-line prompt)."""
    if not nbytes:
        return "Tell me a story."
    words = "the quick brown fox jumps over a lazy dog while seven servers answer ".split()
    out, size, i = [], 0, 0
    while size < nbytes:
        out.append(words[i % len(words)])
        size += len(out[-1]) + 1
        i += 1
    return " ".join(out)[:nbytes]


def client(url, n, rate, tokens, prompt_bytes, q):
    """One client process: n streams, opened at `rate` per second; reports counts."""
    B.raise_nofile()
    host, port = url[len("http://"):].split(":")
    body = sse.chat_body(tokens, prompt_text(prompt_bytes))
    streams = [sse.Stream(host, int(port), "/v1/chat/completions", body) for _ in range(n)]

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


def usage(pids):
    """VmRSS, VmHWM (kB) and open fds, each summed over pids; None when one has gone."""
    rss = hwm = fds = 0
    try:
        for pid in pids:
            st = B.proc_status(pid)
            rss, hwm = rss + st["VmRSS"], hwm + st["VmHWM"]
            fds += len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return None
    return rss, hwm, fds


def hold(name, url, pids, n, args, workdir):
    """Opens n streams to url from args.clients client processes; samples the summed
    VmRSS/VmHWM/fds/CPU of pids every 0.5 s until every client has finished. Returns the
    figures (memory in kB, CPU in % of one core)."""
    idle = usage(pids)
    if idle is None:
        sys.exit(f"{name} died before the streams opened; see its log in {workdir}")
    B.log(f"{name} {url} pids {' '.join(map(str, pids))}: idle VmRSS {idle[0]} kB; opening "
          f"{n} streams at {args.open_rate:.0f}/s from {args.clients} client processes")
    q = multiprocessing.Queue()
    shares = [n // args.clients + (1 if i < n % args.clients else 0) for i in range(args.clients)]
    workers = [multiprocessing.Process(target=client, args=(url, k, args.open_rate / args.clients,
                                                            args.tokens, args.prompt_bytes, q))
               for k in shares]
    for w in workers:
        w.start()
    state, results = {}, {}
    peak_open = peak_rss = peak_fds = 0
    t0 = time.time()
    c_prev, t_prev = B.cpu_seconds(pids), time.time()
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
        u = usage(pids)
        if u is None:
            sys.exit(f"{name} died; see its log in {workdir}")
        rss, _, fds = u
        c, t = B.cpu_seconds(pids), time.time()
        cpu = 100 * (c - c_prev) / (t - t_prev)
        c_prev, t_prev = c, t
        samples.append((t - t0, open_now, rss, cpu))
        peak_open = max(peak_open, open_now)
        peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
        if int(t - t0) % 5 == 0 and t - t0 - int(t - t0) < 0.5:
            B.log(f"t={t - t0:5.1f}s open {open_now:6} (headers {headers:6}) {name} "
                  f"VmRSS {rss / 1024:6.1f} MB fds {fds:6} cpu {cpu:5.1f}%")
        if time.time() - t0 > 900:
            sys.exit("no end after 900 s")
    for w in workers:
        w.join()
    end = usage(pids)
    if end is None:
        sys.exit(f"{name} died; see its log in {workdir}")
    ok = sum(r[0] for r in results.values())
    errors = {}
    for _, e in results.values():
        for k, v in e.items():
            errors[k] = errors.get(k, 0) + v
    if errors:
        B.log(f"{name}: {sum(errors.values())} errors: "
              + ", ".join(f"{k}: {v}" for k, v in errors.items()))
    # CPU while the streams are held: samples with at least 95% of the peak open.
    held = [s for s in samples if s[1] >= 0.95 * peak_open]
    cpu_held = sum(s[3] for s in held) / max(len(held), 1)
    return {"peak_open": peak_open, "ok": ok, "errors": errors, "rss_idle_kb": idle[0],
            "rss_peak_kb": peak_rss, "hwm_kb": end[1], "peak_fds": peak_fds,
            "cpu_held_pct": cpu_held, "kb_per_stream": (end[1] - idle[0]) / max(peak_open, 1),
            "held_seconds": len(held) * 0.5}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=10000, help="streams to hold [10000]")
    ap.add_argument("--open-rate", type=float, default=1000, help="new streams per second [1000]")
    ap.add_argument("--tokens", type=int, default=40, help="tokens per stream [40]")
    ap.add_argument("--tokens-per-second", type=int, default=1, help="pace of each stream [1]")
    ap.add_argument("--clients", type=int, default=2, help="client processes [2]")
    ap.add_argument("--no-nginx", action="store_true", help="infergate only")
    ap.add_argument("--prompt-bytes", type=int, default=0,
                    help="size of each stream's prompt (0: a one-line prompt) [0]")
    ap.add_argument("--reference", metavar="DIR",
                    help="also the infergate of this build directory (an earlier commit), holding "
                         "the same streams after this one")
    args = ap.parse_args()
    ref_bin = os.path.join(os.path.abspath(args.reference), "infergate") if args.reference else None
    if ref_bin and not os.access(ref_bin, os.X_OK):
        sys.exit(f"--reference: {ref_bin} is not an executable infergate")

    if not args.no_nginx:
        B.need(("nginx", "nginx-light"))
    mach = B.machine()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    cap = (hard - RESERVE) // 2
    n = min(args.streams, cap)
    if n < args.streams:
        B.log(f"open-file hard limit {hard}: one gateway can hold {cap} streams, not "
              f"{args.streams}; running {n}")
    workdir = os.path.join(B.TMP, f"concurrency-{os.getpid()}")
    procs = B.Procs(workdir)
    per_sim = n // 7 + 64
    sims, _ = B.start_sims(procs, 7, ["--tokens-per-second", str(args.tokens_per_second),
                                      "--ttft-ms", "0", "--output-tokens", str(args.tokens),
                                      "--max-running", str(per_sim)])
    gw, gwp = B.start_gateway(procs, sims, extra=["--max-connections", str(n + 64)])
    ig = hold("infergate", gw, [gwp.pid], n, args, workdir)
    procs.stop(gwp)               # each target alone in front of the simulators
    ref = None
    if ref_bin:
        rgw, rgwp = B.start_gateway(procs, sims, extra=["--max-connections", str(n + 64)],
                                    name="gateway-ref", program=ref_bin)
        ref = hold("infergate@ref", rgw, [rgwp.pid], n, args, workdir)
        procs.stop(rgwp)

    ngx, wconns = None, min(hard, 2 * n + 256)
    if not args.no_nginx:
        ng, ngp = start_nginx(procs, sims, workdir, NGINX_WORKERS,
                              {"worker_rlimit_nofile": hard, "worker_connections": wconns})
        wpids = sorted(p for p in B.group_pids(ngp.pid) if p != ngp.pid)  # its workers
        if len(wpids) != NGINX_WORKERS:
            sys.exit(f"nginx master {ngp.pid}: {len(wpids)} workers, expected {NGINX_WORKERS}")
        ngx = hold("nginx", ng, wpids, n, args, workdir)
        version = subprocess.run([ngp.args[0], "-v"], capture_output=True,
                                 text=True).stderr.strip().split("/")[-1]
        ngx.update({"ran": n, "workers": NGINX_WORKERS, "worker_connections": wconns,
                    "worker_rlimit_nofile": hard, "version": version})

    fig = dict({"requested": args.streams, "ran": n, "nofile_hard": hard, "prompt_bytes": args.prompt_bytes}, **ig)
    targets = [("infergate", ig)] + ([("infergate@ref", ref)] if ref else []) + ([("nginx", ngx)] if ngx else [])
    if ref:
        fig["reference"] = dict(ref, binary=ref_bin)
    if ngx:
        fig["nginx"] = ngx
        fig["kb_per_stream_infergate_over_nginx"] = (ig["kb_per_stream"]
                                                     / max(ngx["kb_per_stream"], 1e-9))

    def row(label, f):
        return [label] + [f(r) for _, r in targets]
    rows = [row("streams asked / run", lambda r: f"{args.streams:,} / {n:,}"),
            row("peak streams open at once (client side)", lambda r: f"{r['peak_open']:,}"),
            row("completed with 200 and [DONE]", lambda r: f"{r['ok']:,}"),
            row("errors", lambda r: f"{sum(r['errors'].values()):,}"),
            row("VmRSS idle", lambda r: f"{r['rss_idle_kb'] / 1024:.1f} MB"),
            row("VmHWM (peak RSS)", lambda r: f"{r['hwm_kb'] / 1024:.1f} MB"),
            row("per stream", lambda r: f"{r['kb_per_stream']:.1f} kB"),
            row("peak open fds", lambda r: f"{r['peak_fds']:,}"),
            row("CPU while held", lambda r: f"{r['cpu_held_pct']:.1f}% of one core "
                f"({r['peak_open'] * args.tokens_per_second:,} events/s)"),
            row("time held at >= 95% of peak", lambda r: f"{r['held_seconds']:.0f} s")]
    header = (["figure", "infergate"] + (["infergate@ref"] if ref else [])
              + ([f"nginx ({NGINX_WORKERS} workers, summed)"] if ngx else []))
    table = B.md_table(header, rows)
    if ngx:
        table += (f"\n\nper stream: infergate / nginx = "
                  f"{fig['kb_per_stream_infergate_over_nginx']:.2f}")
    for t, r in targets:
        if r["errors"]:
            table += (f"\n\nErrors ({t}): "
                      + ", ".join(f"{k}: {v}" for k, v in r["errors"].items()))
    notes = (f"Seven `infergate-sim --tokens-per-second {args.tokens_per_second} --ttft-ms 0 "
             f"--output-tokens {args.tokens} --max-running {per_sim}`; streams opened at "
             f"{args.open_rate:.0f}/s by {args.clients} client processes (bench/lib/sse.py), "
             f"each with a prompt of {len(prompt_text(args.prompt_bytes))} bytes, "
             f"each held about {args.tokens / args.tokens_per_second:.0f} s. Open-file hard "
             f"limit {hard} (raising it is not permitted here): one gateway can hold at most "
             f"({hard} - {RESERVE}) / 2 = {cap} streams.")
    if ref:
        notes += f" infergate@ref: {ref_bin}, the same flags and streams, after this commit's gateway."
    if ngx:
        notes += (f" Then nginx {ngx['version']} alone (the gateway stopped) in front of the same "
                  f"simulators: {NGINX_WORKERS} workers, bench/conf/nginx.conf.in as "
                  f"bench/proxy.py runs it (least_conn, proxy_buffering off, keepalive 256 per "
                  f"worker to the simulators) with worker_connections {wconns} and "
                  f"worker_rlimit_nofile {hard}; its memory, fds and CPU are sums over the "
                  f"workers (VmRSS idle before the streams open, the sum of their VmHWM at the "
                  f"end), the same streams, the same cap. Per stream = (VmHWM - idle VmRSS) / "
                  f"peak open, for both.")
    B.record("concurrency", "Concurrent streams", B.command_line(), mach, fig, table, notes)


if __name__ == "__main__":
    main()
