#!/usr/bin/env python3
"""Issue 48: infergate's policies and nginx judged on a production trace, replayed open loop.
The Mooncake conversation trace (12,031 requests of one hour of Kimi's conversation service,
with arrival times, input and output lengths and the 512-token prefix blocks they share;
../shared/data/README.md) is replayed with `infergate-bulk replay` through eight
`infergate-sim --profile h100-8b` (decode steps over the batch, a KV budget of 420,000
tokens, a prefix cache; --time-scale so a run of simulated minutes takes less wall time)
behind each target, fresh simulators for each (speed, target), all targets in one run:

  least-loaded, cache-aware, least-tokens, session
                      infergate with `--policy X`, its defaults otherwise (the trace has no
                      session id, user or key: session falls back to least-loaded for
                      every request)
  cache-aware-events  cache-aware on the engines' own KV events (issue 49): each simulator
                      publishes its prefix cache's stores and evictions (`--kv-events`, vLLM's
                      format, with a replay socket), the gateway subscribes (`backends[].
                      kv_events`) and weighs the prefix each engine holds (the exact index);
                      the gateway's own count says, at each request's start, the longest
                      prefix any engine held (the oracle: the simulators' caches read at each
                      pick) and the one the chosen backend held
  nginx-round-robin   nginx, no balancing directive (its default)
  nginx-least_conn    nginx least_conn (the reference: every TTFT is also a ratio to its own)

Each request leaves at its trace time (minus the window's start), divided by --speed (arrivals
that many times as dense) and by --time-scale (simulated time runs that much faster than the
clock), whatever the answers do; every figure is in simulated time. Per (speed, target), from
the replay's summary: TTFT mean/p90/p99 and TPOT p90 (ms), the cached share (cached / prompt
tokens from the answers' usage), the window's reuse bound (the share of its prompt tokens in
blocks seen before in the window: no router caches more, whatever a cache can hold) and the
cached share against it, goodput (the share of requests within --slo-ttft-ms and
--slo-tpot-ms), errors and late sends. From the per-request file: the busiest backend's share
of the requests and, of the requests whose prompt shares at least half its blocks with an
earlier one's, the share sent to the backend that one ran on (the affinity a cache needs; 1/8
by chance) and how much of the shared prefix was still cached there (what the simulator's KV
budget kept). And an oracle's cached share, estimated offline on the window (eight LRU caches
of --kv-tokens in the trace's blocks, each request sent where its longest cached prefix is):
the fair yardstick the reuse bound is the ceiling above (../shared/data/README.md). The
cache-aware run at the first speed also draws the replay's own plot (results/trace-replay.png,
shown in docs/bulk-runs.md). The replay counts a send late past 5 ms of wall clock behind its time; a run
where over 1% of the sends left more than --late-warn-ms (100 simulated ms) behind is flagged:
the client machine, not the fleet, set the pace and its figures are wrong; the script warns
and says so in the results.

Speeds (--speeds 5,6, the defaults): measured with nginx least_conn on this window at
--time-scale 1.5 (2 cores, 2026-12-07), TTFT mean / p99 and goodput: 3x 336 / 1,784 ms, 98.6%
(the first 300 s); 4x 363 / 1,818 ms, 98.0% (the same); 5x 446 / 2,364 ms, 96.8% in one run and
642 / 8,561 ms, 93.4% in another; 5.5x 1,916 / 14,777 ms, 67.9%; 6x 4,730 / 25,088 ms, 41.1%
and 4,505 / 19,145 ms, 47.5%; 8x 6,352 / 19,881 ms, 38.1% (the first 300 s). Up to 4x
least_conn is close to idle (a 12,000-token prompt alone takes about 200 ms to prefill) and
little tells the policies apart. 5x is where least_conn is busy but not drowning: queues form
in the bursts and drain between them (TTFT p99 five to thirteen times the mean, TPOT p90 38 ms
against 18 at 3x). 6x, the denser one, is past the knee: with next to nothing cached (5% of
prompt tokens), prefill takes about half of each simulator's time (a rough count) and the
decodes, slowed by contexts of 12,000 tokens, need more requests running than the KV budget
holds, so queues grow for good; what a policy finds cached is what keeps it under. So close to
the knee one run differs from the next by a third or more (least-loaded and session, the same
policy here, 442 and 692 ms at 5x in one run): compare within a run, and rerun before
concluding.

The window (--start 1200 --duration 600, trace seconds): the wall clock, not the trace, is the
limit on two cores that carry eight simulators, the gateway and the client. Each run takes
duration / (speed x time-scale) of wall clock plus a drain; six targets at 5x and 6x of a
600 s window take about 18 minutes at --time-scale 1.5. The hour's minutes 1200..1800 have
its mean arrival rate (3.44/s against 3.40/s) and mean lengths (11,924 tokens in, 341 out,
against 12,035 and 343); the first minutes are lighter and longer. A window's reuse bound
(26.7% of prompt tokens here) is below the whole hour's (36.6% of blocks): the earlier turns of conversations running at
the window's start lie outside it. --time-scale 1.5 keeps the wall-clock rate at 6x near 31
requests/s (prompts of about 48 KB), with the trace's bursts above it; the 8x run above
(40/s) still sent on time (late p99 11 ms), faster was not tried.

Usage: python3 bench/trace.py [--speeds 5,6] [--time-scale X] [--start S] [--duration S]
       [--targets a,b,...] [--slo-ttft-ms N] [--slo-tpot-ms N] [--trace FILE] [--results DIR]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get), IG_BENCH_TMP (where the
per-request files and logs go).
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

NSIMS = 8
TARGETS = ["least-loaded", "cache-aware", "cache-aware-events", "least-tokens", "session", "nginx-round-robin",
           "nginx-least_conn"]
EVENTS = "cache-aware-events"  # cache-aware on the simulators' own KV events (the exact index)
REFERENCE = "nginx-least_conn"
BLOCK_TOKENS = 512      # tokens per hash id: Mooncake's, the replay's --block-tokens default
TRACE = os.path.join(B.REPO, "..", "shared", "data", "mooncake-conversation-trace.jsonl")

# nginx as bench/cache.py runs it, with room for the trace's prompts (up to about 500 KB) kept
# in memory rather than spilled to temporary files, the gateway's idle limit (600 s) rather
# than nginx's 60 s for a backend that queues a request before its first token, and the
# upstream's address in the header where the replay reads the gateway's backend.
NGINX_CONF = """daemon off;
master_process on;
worker_processes 2;
pid @DIR@/nginx.pid;
error_log @DIR@/nginx-error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    client_body_temp_path @DIR@/client_body;
    proxy_temp_path @DIR@/proxy_temp;
    client_max_body_size 32m;
    client_body_buffer_size 1m;
    upstream backends {
@BALANCE@
@SERVERS@
        keepalive 256;
    }
    server {
        listen 127.0.0.1:@PORT@ reuseport;
        location / {
            proxy_pass http://backends;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 600s;
            add_header X-Infergate-Backend $upstream_addr always;
        }
    }
}
"""


def start_nginx(procs, sims, balance):
    """nginx in front of sims; balance: a directive ("least_conn") or "" (round-robin)."""
    port = B.free_port()
    d = procs.workdir
    for sub in ("client_body", "proxy_temp"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    conf = NGINX_CONF.replace("@DIR@", d).replace("@PORT@", str(port))
    conf = conf.replace("@BALANCE@", f"        {balance};" if balance else "        # round-robin")
    conf = conf.replace("@SERVERS@", "\n".join(f"        server {u[len('http://'):]};" for u in sims))
    path = os.path.join(d, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    nginx = "nginx" if B.shutil.which("nginx") else "/usr/sbin/nginx"
    p = procs.start("nginx", [nginx, "-c", path, "-e", os.path.join(d, "nginx-error.log")])
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/health", proc=p)
    return url


def backends(path, blocks):
    """Of the per-request file (blocks: the trace's hash ids by line number): the busiest
    backend's share of the requests (1/8 is even), and of the requests whose prompt shares at
    least half its blocks with an earlier one's, the share sent to the backend that earlier one
    ran on (the last to share that longest prefix; by chance 1/8) and the share of those shared
    tokens found cached when sent there. (None, None, None) when the answers name no backend."""
    with open(path) as f:
        reqs = sorted((json.loads(line) for line in f), key=lambda r: r["index"])
    counts = {}
    for r in reqs:
        if r.get("backend"):
            counts[r["backend"]] = counts.get(r["backend"], 0) + 1
    if not counts:
        return None, None, None
    trie, last = {}, {}        # (node, block id) -> node; node -> the last request through it
    shared = same = same_tokens = same_cached = 0
    for r in reqs:
        ids = blocks.get(r["line"], [])
        node, depth, prev = 0, 0, None
        while depth < len(ids) and (node, ids[depth]) in trie:
            node = trie[(node, ids[depth])]
            prev = last[node]
            depth += 1
        if prev is not None and depth * 2 >= len(ids):
            shared += 1
            if prev.get("backend") and prev["backend"] == r.get("backend"):
                same += 1
                same_tokens += min(depth * BLOCK_TOKENS, r["prompt_tokens"] or 0)
                same_cached += r["cached_tokens"] or 0
        node = 0
        for b in ids:
            node = trie.setdefault((node, b), len(trie) + 1)
            last[node] = r
    follow = same / shared if shared else None
    return (max(counts.values()) / sum(counts.values()), follow,
            min(1.0, same_cached / same_tokens) if same_tokens else None)


def lru_oracle(rows, nsims, kv_tokens, block=512):
    """The cached share an oracle router would reach on the window (an estimate, offline): each
    simulator's cache an LRU of `kv_tokens` tokens in the trace's blocks; each request goes to the
    simulator holding its longest cached prefix of more than the first block (which every request
    of this trace shares), else to the one given the fewest of the last 64 requests. Optimistic:
    the requests running on a simulator hold KV of their own, which this leaves to the cache."""
    import collections
    caches = [collections.OrderedDict() for _ in range(nsims)]
    used = [0] * nsims
    recent = collections.deque(maxlen=64)
    total = cached = 0
    for t in rows:
        ids, n, size = t["hash_ids"], len(t["hash_ids"]), t["input_length"]
        best = []
        for c in caches:
            k = 0
            while k < n and ids[k] in c:
                k += 1
            best.append(k)
        m = max(best)
        load = collections.Counter(recent)
        cands = [b for b in range(nsims) if best[b] == m] if m > 1 else list(range(nsims))
        b = min(cands, key=lambda x: load[x])
        recent.append(b)
        total += size
        cached += min(best[b] * block, size)
        c = caches[b]
        for i, x in enumerate(ids):
            if x in c:
                c.move_to_end(x)
            else:
                c[x] = block if i < n - 1 else size - block * (n - 1)
                used[b] += c[x]
        while used[b] > kv_tokens:
            used[b] -= c.popitem(last=False)[1]
    return cached / total if total else 0.0


def replay(procs, url, target, speed, args, blocks, plot=None):
    """`infergate-bulk replay` of the window through url, open loop at `speed`; its summary and
    wall time, and backends()' figures from its per-request file (plot: the replay's picture
    there too). Exits when the replay fails; warns when the client set the pace."""
    name = f"{speed:g}x-{target}"
    out = os.path.join(procs.workdir, "requests.jsonl")
    summary = os.path.join(procs.workdir, "summary.json")
    argv = [B.binary("infergate-bulk"), "replay", "--input", args.trace, "--output", out,
            "--summary-json", summary, "--url", url, "--speed", f"{speed:g}",
            "--time-scale", f"{args.time_scale:g}", "--slo-ttft-ms", str(args.slo_ttft_ms),
            "--slo-tpot-ms", str(args.slo_tpot_ms), "--progress-interval-s", "60"]
    if args.start:
        argv += ["--start", f"{args.start:g}"]
    if args.duration:
        argv += ["--duration", f"{args.duration:g}"]
    if plot:
        argv += ["--plot", plot]
    t0 = time.monotonic()
    p = procs.start("replay", argv + args.replay_args.split())
    rc = p.wait()
    wall = time.monotonic() - t0
    if rc not in (0, 1) or not os.path.exists(summary):
        sys.exit(f"{name}: infergate-bulk replay exited {rc}; see {procs.workdir}/replay.log")
    with open(summary) as f:
        s = json.load(f)
    if s["late_ms"]["p99"] > args.late_warn_ms:
        B.log(f"WARNING: {speed:g}x {target}: {s['late']} of {s['sent']} sends late, p99 "
              f"{s['late_ms']['p99']:,.0f} ms: the client machine set the pace, not the fleet")
    busiest, follow, kept = backends(out, blocks)
    return {"target": target, "speed": speed, "wall_s": wall, "summary": s, "busiest_backend_share": busiest,
            "prefix_followed": follow, "prefix_kept": kept, "requests_file": out}


def measure(target, speed, args, workdir, blocks):
    name = f"{speed:g}x-{target}"
    procs = B.Procs(os.path.join(workdir, name))
    try:
        sim_args = ["--profile", "h100-8b", "--time-scale", f"{args.time_scale:g}"] + args.sim_args.split()
        events = target == EVENTS
        if events:
            # each simulator publishes its prefix cache's stores and evictions (vLLM's format)
            ports = [(B.free_port(), B.free_port()) for _ in range(NSIMS)]
            sims, _ = B.start_sims(procs, NSIMS, [sim_args + ["--kv-events", f"tcp://127.0.0.1:{p}",
                                                              "--kv-events-replay", f"tcp://127.0.0.1:{r}"]
                                                  for p, r in ports])
        else:
            sims, _ = B.start_sims(procs, NSIMS, sim_args)
        if target.startswith("nginx-"):
            url = start_nginx(procs, sims, "least_conn" if target == "nginx-least_conn" else "")
        elif events:
            conf = os.path.join(procs.workdir, "gateway.json")
            with open(conf, "w") as f:
                json.dump({"backends": [{"url": u, "kv_events": f"tcp://127.0.0.1:{p}",
                                         "kv_events_replay": f"tcp://127.0.0.1:{r}"}
                                        for u, (p, r) in zip(sims, ports)]}, f)
            url, _ = B.start_gateway(procs, sims, config=conf,
                                     extra=["--policy", "cache-aware"] + args.gateway_args.split())
        else:
            url, _ = B.start_gateway(procs, sims, extra=["--policy", target] + args.gateway_args.split())
        plot = os.path.join(B.RESULTS, "trace-replay.png") if target == "cache-aware" and speed == args.plot_speed \
            else None  # the picture a replay draws, for docs/bulk-runs.md
        fig = replay(procs, url, target, speed, args, blocks, plot)
        s, wall, follow, kept = fig["summary"], fig["wall_s"], fig["prefix_followed"], fig["prefix_kept"]
        if events:
            # the gateway's own count: at each request's start, the longest prefix any engine held
            # (its index: the simulators' caches as their events told, an oracle's pick) and the one
            # the chosen backend held, and how the events went
            st, body = B.http(url + "/health/backends", timeout=10)
            h = json.loads(body or b"{}") if st == 200 else {}
            ex = (h.get("gateway") or {}).get("cache_aware_exact") or {}
            fig["exact"] = ex
            fig["kv_events"] = [b.get("kv_events") for b in h.get("backends", [])]
            if ex.get("prompt_tokens"):
                B.log(f"{speed:g}x {target}: at each start the engines held {ex['best_tokens'] / ex['prompt_tokens']:.1%} "
                      f"of the prompt tokens at best (the oracle), the chosen one "
                      f"{ex['chosen_tokens'] / ex['prompt_tokens']:.1%}; events "
                      f"{sum(k['events'] for k in fig['kv_events'] if k)} in "
                      f"{sum(k['batches'] for k in fig['kv_events'] if k)} batches, gaps "
                      f"{sum(k['gaps'] for k in fig['kv_events'] if k)}, malformed "
                      f"{sum(k['malformed'] for k in fig['kv_events'] if k)}")
        B.log(f"{speed:g}x {target:17} TTFT mean {s['ttft_ms']['mean']:,.0f} p90 {s['ttft_ms']['p90']:,.0f} "
              f"p99 {s['ttft_ms']['p99']:,.0f} ms  TPOT p90 {s['tpot_ms']['p90']:,.1f} ms  "
              f"cached {s['cached_share']:.1%} (bound {s['reuse_bound']:.1%})  "
              f"goodput {s['goodput']['share']:.1%}  " + (f"to its prefix's backend {follow:.0%} (cached there "
              f"{fmt(kept, '.0%')})  " if follow is not None else "") + f"errors {s['errors']}  late {s['late']} "
              f"(p99 {s['late_ms']['p99']:,.0f} ms)  {wall:.0f} s wall")
        return fig
    finally:
        procs.stop_all()


def bound_of(figs):
    return figs[0]["summary"].get("reuse_bound") or 0


def fmt(v, spec=",.0f"):
    return "-" if v is None else format(v, spec)


def replay_options(ap):
    """The options of the window, its replay, the simulators and the gateway (also bench/pd.py's)."""
    ap.add_argument("--trace", default=TRACE,
                    help="the Mooncake trace [../shared/data/mooncake-conversation-trace.jsonl next to the repo]")
    ap.add_argument("--time-scale", type=float, default=1.5,
                    help="simulated time per wall second, the simulators' and the replay's [1.5: at 6x the "
                         "window's 3.44 requests/s become 31/s of wall clock, about what the 2 cores carry "
                         "with the fleet's work; the figures are simulated time either way]")
    ap.add_argument("--start", type=float, default=1200,
                    help="window start, trace seconds [1200: the hour's mean rate and lengths]")
    ap.add_argument("--duration", type=float, default=600,
                    help="window length, trace seconds; 0 = to the end [600: six targets at 5x and 6x in "
                         "about 18 minutes of wall clock]")
    ap.add_argument("--slo-ttft-ms", type=int, default=2000,
                    help="goodput: time to first token at most this, simulated ms [2000: the replay's default]")
    ap.add_argument("--slo-tpot-ms", type=int, default=100,
                    help="goodput: time per output token at most this, simulated ms [100: the replay's default]")
    ap.add_argument("--late-warn-ms", type=float, default=100,
                    help="flag a run whose sends' lateness has a p99 above this, simulated ms: over 1%% of its "
                         "requests left that far behind their time, so the client machine set the pace [100: a "
                         "few ms late (the replay counts a send late past 5 ms of wall clock) change nothing]")
    ap.add_argument("--gateway-args", default="", help="more flags for infergate (e.g. cache-aware's guard)")
    ap.add_argument("--sim-args", default="", help="more flags for the simulators (e.g. --kv-tokens N)")
    ap.add_argument("--replay-args", default="", help="more flags for infergate-bulk replay")


def read_window(args):
    """The trace's hash ids by line number (for backends()), the window's rows and its length in
    trace seconds (--duration, or less where the trace ends)."""
    blocks, last_s, window = {}, 0, []
    with open(args.trace) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                o = json.loads(line)
                blocks[n] = o.get("hash_ids", [])
                last_s = max(last_s, o["timestamp"] / 1000)
                if args.start * 1000 <= o["timestamp"] and (not args.duration or
                                                            o["timestamp"] < (args.start + args.duration) * 1000):
                    window.append(o)
    return blocks, window, min(args.duration or last_s - args.start, last_s - args.start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--speeds", default="5,6",
                    help="arrival speed-ups, one run of every target each [5,6: at 5 nginx least_conn is busy "
                         "but not drowning, at 6 it is past the knee; at 1-4 every target is nearly idle]")
    replay_options(ap)
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--kv-tokens", type=int, default=420000,
                    help="the simulators' KV budget, for the oracle's estimate [420000: h100-8b's]")
    ap.add_argument("--results", default=B.RESULTS,
                    help="where trace.md, trace.jsonl, trace.dat and trace.png go [bench/results]")
    args = ap.parse_args()
    speeds = [float(s) for s in args.speeds.split(",")]
    args.plot_speed = speeds[0]
    targets = args.targets.split(",")
    for t in targets:
        if t not in TARGETS:
            sys.exit(f"--targets: unknown target '{t}' (one of {', '.join(TARGETS)})")
    if not os.path.exists(args.trace):
        sys.exit(f"--trace: {args.trace} not found")
    B.RESULTS = os.path.abspath(args.results)
    if any(t.startswith("nginx-") for t in targets):
        B.need(("nginx", "nginx-light"))
    B.binary("infergate-bulk")
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"trace-{os.getpid()}")

    blocks, window, span = read_window(args)
    oracle = lru_oracle(window, NSIMS, args.kv_tokens, BLOCK_TOKENS)
    B.log(f"the window's LRU oracle (an estimate, offline): {oracle:.1%} of prompt tokens cached")
    est = sum(span / (s * args.time_scale) for s in speeds) * len(targets)
    B.log(f"{len(targets)} targets x speeds {args.speeds}, window {args.start:g}+{span:g} s at time scale "
          f"{args.time_scale:g}: about {est / 60:.0f} minutes of replay plus the drains; files in {workdir}")
    figs = [measure(t, s, args, workdir, blocks) for s in speeds for t in targets]

    tables, late_runs = [], []
    for s in speeds:
        runs = [f for f in figs if f["speed"] == s]
        ref = next((f["summary"]["ttft_ms"]["mean"] for f in runs if f["target"] == REFERENCE), None)
        sm = runs[0]["summary"]
        rows = []
        for f in runs:
            x = f["summary"]
            bound = x.get("reuse_bound")
            late = f"{x['late']}" + (f" (p99 {x['late_ms']['p99']:,.0f}, max {x['late_ms']['max']:,.0f} ms)"
                                     if x["late"] else "")
            if x["late_ms"]["p99"] > args.late_warn_ms:
                late_runs.append(f"{s:g}x {f['target']}")
                late += " !"
            spread, follow = f["busiest_backend_share"], f["prefix_followed"]
            rows.append([f["target"], fmt(x["ttft_ms"]["mean"]),
                         f"{x['ttft_ms']['mean'] / ref:.2f}" if ref else "-",
                         fmt(x["ttft_ms"]["p90"]), fmt(x["ttft_ms"]["p99"]), fmt(x["tpot_ms"]["p90"], ",.1f"),
                         f"{x['cached_share']:.1%}", f"{bound:.1%}" if bound is not None else "-",
                         f"{x['cached_share'] / bound:.2f}" if bound else "-",
                         f"{x['cached_share'] / oracle:.2f}" if oracle else "-",
                         f"{x['goodput']['share']:.1%}", x["errors"], late,
                         f"{spread:.1%}" if spread is not None else "-",
                         f"{follow:.0%}" if follow is not None else "-"])
        rate = sm["requests"] * s / span
        head = (f"Speed {s:g}x: {sm['requests']} requests, {rate:.1f}/s of simulated time "
                f"({rate * args.time_scale:.1f}/s of wall clock).")
        tables.append(head + "\n\n" + B.md_table(
            ["target", "TTFT mean ms", f"vs {REFERENCE}", "TTFT p90 ms", "TTFT p99 ms", "TPOT p90 ms",
             "cached share", "reuse bound", "cached / bound", "cached / oracle", "goodput", "errors", "late sends",
             "busiest backend", "to its prefix's backend"], rows))
    table = "\n\n".join(tables)

    notes = (f"Eight `infergate-sim --profile h100-8b --time-scale {args.time_scale:g}"
             f"{' ' + args.sim_args if args.sim_args else ''}` per run, fresh for each (speed, target); infergate "
             f"with `--policy X`{' ' + args.gateway_args if args.gateway_args else ''} and its defaults otherwise "
             f"(session: the trace has no session id, so it falls back to least-loaded); nginx 2 workers, "
             f"keepalive 256, no balancing directive (round-robin) or least_conn. "
             f"`infergate-bulk replay` of {os.path.basename(args.trace)}, window {args.start:g} s + {span:g} s, "
             f"`--speed S --time-scale {args.time_scale:g}`: open loop, each request at its trace time / speed; "
             f"every figure in simulated time (wall x {args.time_scale:g}). Goodput: TTFT <= {args.slo_ttft_ms} ms "
             f"and TPOT <= {args.slo_tpot_ms} ms. Cached share: cached / prompt tokens (the answers' usage); "
             f"reuse bound: the share of the window's prompt tokens in blocks seen before in the window (the "
             f"ceiling of any cache, {bound_of(figs):.1%} here); oracle: the cached share an oracle router "
             f"would reach on the window with {NSIMS} LRU caches of {args.kv_tokens:,} tokens in the trace's "
             f"blocks, each request sent where its longest cached prefix (past the first block, which every "
             f"request shares) is, else to the one given the fewest of the last 64 requests: {oracle:.1%}, an "
             f"estimate computed offline and optimistic (the simulators' running requests hold KV of their "
             f"own, left to the cache here). Busiest backend: its share of the requests (12.5% is even). To its prefix's "
             f"backend: of the requests whose prompt shares at least half its blocks with an earlier request's, "
             f"the share sent where that one ran (12.5% by chance; the run's figures in trace.jsonl also say how "
             f"much of that prefix was still cached there: prefix_kept). "
             f"Client, gateway and simulators on the same 2 cores.")
    if len(figs) == len(speeds) * len(targets):
        dat = os.path.join(B.RESULTS, "trace.dat")
        os.makedirs(B.RESULTS, exist_ok=True)
        by = {(f["speed"], f["target"]): f["summary"] for f in figs}
        with open(dat, "w") as f:
            # one row per target; per speed: TTFT mean, TTFT p90, cached share (%)
            f.write("target " + " ".join(f'"TTFT mean {s:g}x" "TTFT p90 {s:g}x" "cached {s:g}x"'
                                         for s in speeds) + "\n")
            for t in targets:
                f.write(t + " " + " ".join(f"{by[(s, t)]['ttft_ms']['mean']:.0f} {by[(s, t)]['ttft_ms']['p90']:.0f} "
                                           f"{100 * by[(s, t)]['cached_share']:.1f}" for s in speeds) + "\n")
        bound = by[(speeds[0], targets[0])].get("reuse_bound") or 0
        B.gnuplot("trace.gp", DAT=dat, PNG=os.path.join(B.RESULTS, "trace.png"), NSPEEDS=len(speeds),
                  NTARGETS=len(targets), BOUND=f"{100 * bound:.1f}",
                  TITLE=f"Mooncake conversation trace ({args.start:g}+{span:g} s) through eight h100-8b "
                        f"simulators, per target and speed")
        notes += " Plot: results/trace.png."
    if late_runs:
        notes += (f"\n\n**Late sends** (over 1% of the sends more than {args.late_warn_ms:g} ms behind their time, "
                  f"marked !) in: {', '.join(late_runs)}. "
                  f"There the client machine, not the fleet, set the pace: those figures are wrong. "
                  f"Rerun with a smaller --time-scale.")

    B.record("trace", "Routing on the Mooncake conversation trace", B.command_line(), mach,
             {"speeds": speeds, "time_scale": args.time_scale, "start": args.start, "duration": span,
              "lru_oracle": oracle,
              "slo_ttft_ms": args.slo_ttft_ms, "slo_tpot_ms": args.slo_tpot_ms, "runs": figs}, table, notes)
    if late_runs:
        B.log(f"WARNING: late sends in {', '.join(late_runs)}: the client machine set the pace; "
              f"those figures are wrong")


if __name__ == "__main__":
    main()
