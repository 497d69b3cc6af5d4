#!/usr/bin/env python3
"""Part 1 and 6a: proxy overhead. requests/s and p50/p99 latency of small non-streamed chat
completions, with wrk, for: direct (one backend), infergate, nginx and HAProxy (each in
front of the same seven backends), in one run; then a sweep over connection counts and a
PNG plot of requests/s versus connections.

Backends: seven `infergate-sim --tokens-per-second 0 --ttft-ms 0 --output-tokens 16`
(about 80-90k requests/s each alone on this machine). They answer a real OpenAI body of
about 400 bytes, so every proxy does the work it does in production: parse a POST with a
JSON body, forward it, relay the answer. (nginx `return 200` would answer faster but would
not be an inference server; the point is the same backend behind every proxy.)

With --keys N [--keys-format json|lines], a second gateway ("infergate+keys") in front of the same backends checks a
JSON keys file of N named keys, each with rpm and tpm limits (high enough never to refuse),
and wrk sends one of them: the cost of key lookup, rate limiting, the x-ratelimit-* headers
and per-key accounting, against the open gateway in the same run.

With --pin, every proxy gets the same single core (taskset-style affinity: CPU 0) and the
load (wrk, the seven simulators) the other (CPU 1): nginx runs 1 worker, HAProxy nbthread 1,
infergate one reactor (one per core it may run on), so req/s and p99 compare the proxies with the same core each and
the load generator never competes with them.

With --reference DIR, a second gateway ("infergate@ref") runs the infergate binary of another
build directory (an earlier commit: `git worktree add /tmp/ref COMMIT`, built there) in front
of the same backends, and the two gateways' main runs alternate --rounds times: the medians and
their ratio say whether this commit is slower, measured side by side on the same machine.

With --tracing, two more gateways in front of the same backends: "infergate+trace" with
tracing on at ratio 1.0 (every request's server, queue and attempt spans exported over OTLP/HTTP
JSON to a collector, an nginx answering 200 at /v1/traces) and "infergate+trace-down" with the
collector's port closed (every export fails); their runs alternate --rounds times with the
plain gateway's, and the medians' ratios say what tracing costs a request and that a collector
that is gone does not slow one (issue 35: >= 0.97x).

Usage: python3 bench/proxy.py [--duration S] [--connections N] [--sweep 8,16,...]
       [--sweep-duration S] [--no-sweep] [--keys N] [--policy P] [--reference DIR [--rounds N]]
       [--pin] [--tracing [--rounds N]]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get).
"""

import argparse
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

PATH = "/v1/chat/completions"
SIM_ARGS = ["--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "16"]


def render(template, out, directives=None, **subst):
    """bench/conf/TEMPLATE with its @KEY@ placeholders filled in, written to out.
    directives {name: value}: new values for one-line directives the template sets
    (`name value;`), e.g. nginx's worker_connections; each must be there exactly once."""
    with open(os.path.join(B.BENCH, "conf", template)) as f:
        text = f.read()
    for k, v in subst.items():
        text = text.replace(f"@{k}@", str(v))
    for k, v in (directives or {}).items():
        text, count = re.subn(rf"(?m)^(\s*{re.escape(k)}\s+)[^;#\n]*;", rf"\g<1>{v};", text)
        if count != 1:
            sys.exit(f"{template}: directive {k} found {count} times, expected once")
    with open(out, "w") as f:
        f.write(text)
    return out


def start_nginx(procs, backends, workdir, workers, directives=None):
    """nginx from bench/conf/nginx.conf.in in front of backends; directives: see render
    (bench/concurrency.py raises worker_connections). Returns (url, master process)."""
    port = B.free_port()
    for d in ("client_body", "proxy_temp"):
        os.makedirs(os.path.join(workdir, d), exist_ok=True)
    servers = "\n".join(f"        server {u[len('http://'):]};" for u in backends)
    conf = render("nginx.conf.in", os.path.join(workdir, "nginx.conf"), directives,
                  WORKERS=workers, DIR=workdir, PORT=port, SERVERS=servers)
    nginx = "nginx" if B.shutil.which("nginx") else "/usr/sbin/nginx"
    p = procs.start("nginx", [nginx, "-c", conf, "-e", os.path.join(workdir, "nginx-error.log")])
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/health", proc=p)
    return url, p


def start_haproxy(procs, backends, workdir, workers):
    port = B.free_port()
    servers = "\n".join(f"    server s{i + 1} {u[len('http://'):]}" for i, u in enumerate(backends))
    conf = render("haproxy.cfg.in", os.path.join(workdir, "haproxy.cfg"), WORKERS=workers,
                  PORT=port, SERVERS=servers)
    haproxy = "haproxy" if B.shutil.which("haproxy") else "/usr/sbin/haproxy"
    p = procs.start("haproxy", [haproxy, "-db", "-f", conf])
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/health", proc=p)
    return url, p


def start_collector(procs, workdir):
    """An OTLP/HTTP receiver that takes every export and answers 200: nginx, one worker."""
    port = B.free_port()
    d = os.path.join(workdir, "collector")
    os.makedirs(os.path.join(d, "body"), exist_ok=True)
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{ access_log off; client_body_temp_path {d}/body; client_max_body_size 64m;
  server {{ listen 127.0.0.1:{port}; location /v1/traces {{ return 200 '{{}}'; }}
           location / {{ return 200 'ok'; }} }} }}
""")
    nginx = "nginx" if B.shutil.which("nginx") else "/usr/sbin/nginx"
    p = procs.start("collector", [nginx, "-c", conf, "-e", os.path.join(d, "error.log")])
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/", proc=p)
    return url


def wrk(url, conns, seconds, threads, key=None, headers=()):
    """One wrk run; returns a dict of figures (req/s, latencies in ms, errors).
    headers: more request headers ("Name: value"), e.g. bench/tls.py's
    "Connection: close"."""
    env = {**os.environ, **({"IG_BENCH_KEY": key} if key else {})}
    argv = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency",
            "-s", os.path.join(B.BENCH, "lib", "post.lua")]
    for h in headers:
        argv += ["-H", h]
    out = subprocess.run(argv + [url + PATH], capture_output=True, text=True, timeout=seconds + 60, env=env).stdout
    m = re.search(r"IG_RESULT (.*)", out)
    if not m:
        sys.exit("wrk printed no result:\n" + out)
    f = {k: int(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = (f["errors_connect"] + f["errors_read"] + f["errors_write"] + f["errors_timeout"]
              + (int(non2xx.group(1)) if non2xx else 0))
    return {"rps": f["requests"] / (f["duration_us"] / 1e6), "p50_ms": f["p50_us"] / 1000,
            "p99_ms": f["p99_us"] / 1000, "max_ms": f["max_us"] / 1000,
            "requests": f["requests"], "errors": errors}


def measure(target, url, pgid, conns, seconds, threads, key=None):
    wrk(url, conns, 1, threads, key)                 # warm-up: connections, caches
    pids = B.group_pids(pgid)
    c0, t0 = B.cpu_seconds(pids), time.time()
    r = wrk(url, conns, seconds, threads, key)
    r["cpu_pct"] = 100 * (B.cpu_seconds(pids) - c0) / (time.time() - t0)
    r["target"], r["conns"] = target, conns
    B.log(f"{target:9} c={conns:<4} {r['rps']:>9.0f} req/s  p50 {r['p50_ms']:.2f} ms  "
          f"p99 {r['p99_ms']:.2f} ms  cpu {r['cpu_pct']:.0f}%  errors {r['errors']}")
    return r


def keys_file(workdir, n, fmt):
    """A keys file of n keys, JSON (named, with generous limits) or one digest per line
    (the format before named keys); returns (path, one key)."""
    import hashlib
    import json
    digests = [hashlib.sha256(f"bench-key-{i}".encode()).hexdigest() for i in range(n)]
    path = os.path.join(workdir, "keys." + fmt)
    with open(path, "w") as f:
        if fmt == "json":
            json.dump({"keys": [{"name": f"team-{i}", "sha256": d, "rpm": 1000000000, "tpm": 4000000000000}
                                for i, d in enumerate(digests)]}, f)
        else:
            f.write("".join(d + "\n" for d in digests))
    return path, f"bench-key-{n // 2}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=10, help="seconds per main run [10]")
    ap.add_argument("--connections", type=int, default=64, help="connections of the main run [64]")
    ap.add_argument("--sweep", default="8,16,32,64,128,256", help="connection counts of the plot")
    ap.add_argument("--sweep-duration", type=int, default=5, help="seconds per sweep point [5]")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--wrk-threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--policy", default="least-loaded", help="the gateway's policy [least-loaded]")
    ap.add_argument("--keys", type=int, default=0,
                    help="also a gateway with a keys file of N keys with limits (0: not run)")
    ap.add_argument("--keys-format", choices=("json", "lines"), default="json",
                    help="json: named keys with rpm and tpm; lines: digests only, no limits")
    ap.add_argument("--reference", metavar="DIR",
                    help="also the infergate of this build directory, alternating with this one's")
    ap.add_argument("--rounds", type=int, default=5, help="with --reference or --tracing: alternations [5]")
    ap.add_argument("--tracing", action="store_true",
                    help="gateways with tracing on (ratio 1.0) and with the collector down, against off")
    ap.add_argument("--pin", action="store_true",
                    help="proxies on CPU 0 (one worker each), wrk and simulators on CPU 1")
    args = ap.parse_args()
    ref_bin = None
    if args.reference:
        ref_bin = os.path.join(os.path.abspath(args.reference), "infergate")
        if not os.access(ref_bin, os.X_OK):
            sys.exit(f"--reference: {ref_bin} is not an executable infergate")

    B.need(("wrk", "wrk"), ("nginx", "nginx-light"), ("haproxy", "haproxy"))
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"proxy-{os.getpid()}")
    procs = B.Procs(workdir)
    workers = os.cpu_count() or 2
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2:
            sys.exit("--pin needs two CPUs (0 and 1) this process may use")
        workers = 1

    def cores(which):
        """With --pin, what starts next (and its children) runs on these CPUs."""
        if args.pin:
            os.sched_setaffinity(0, which)

    cores({1})
    sims, _ = B.start_sims(procs, 7, SIM_ARGS)
    cores({0})
    gw_url, gw = B.start_gateway(procs, sims, extra=["--policy", args.policy])
    ng_url, ng = start_nginx(procs, sims, workdir, workers)
    ha_url, ha = start_haproxy(procs, sims, workdir, workers)
    cores({1})                                      # wrk, from here on
    direct = procs.procs[0]  # the first simulator, alone
    targets = [("direct", sims[0], direct.pid, None), ("infergate", gw_url, gw.pid, None),
               ("nginx", ng_url, ng.pid, None), ("haproxy", ha_url, ha.pid, None)]
    if args.keys:
        path, key = keys_file(workdir, args.keys, args.keys_format)
        cores({0})
        gk_url, gk = B.start_gateway(procs, sims, ["--api-keys-file", path], name="gateway-keys")
        cores({1})
        targets.insert(2, ("infergate+keys", gk_url, gk.pid, key))
    B.log(f"backends {' '.join(sims)}; gateway {gw_url}, nginx {ng_url}, haproxy {ha_url}")

    main_runs = {t: measure(t, u, pg, args.connections, args.duration, args.wrk_threads, key)
                 for t, u, pg, key in targets}
    ref_table, ref_figs = "", {}
    if ref_bin:
        cores({0})
        rf_url, rf = B.start_gateway(procs, sims, extra=["--policy", args.policy], name="gateway-ref",
                                     program=ref_bin)
        cores({1})
        pairs = []
        for _ in range(args.rounds):
            pairs.append((measure("infergate", gw_url, gw.pid, args.connections, args.duration, args.wrk_threads),
                          measure("infergate@ref", rf_url, rf.pid, args.connections, args.duration,
                                  args.wrk_threads)))

        def med(v):
            v = sorted(v)
            return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
        ref_figs = {"reference": args.reference, "rounds": args.rounds,
                    "rps": [[a["rps"], b["rps"]] for a, b in pairs],
                    "p99_ms": [[a["p99_ms"], b["p99_ms"]] for a, b in pairs]}
        for k in ("rps", "p99_ms"):
            ref_figs[f"median_{k}"] = [med([a[k] for a, _ in pairs]), med([b[k] for _, b in pairs])]
            ref_figs[f"{k}_this_over_ref"] = ref_figs[f"median_{k}"][0] / ref_figs[f"median_{k}"][1]
        ref_table = "\n\n" + B.md_table(
            ["round", "infergate req/s", "infergate@ref req/s", "infergate p99 ms", "infergate@ref p99 ms"],
            [[str(i + 1), f"{a['rps']:,.0f}", f"{b['rps']:,.0f}", f"{a['p99_ms']:.2f}", f"{b['p99_ms']:.2f}"]
             for i, (a, b) in enumerate(pairs)] +
            [["median", f"{ref_figs['median_rps'][0]:,.0f}", f"{ref_figs['median_rps'][1]:,.0f}",
              f"{ref_figs['median_p99_ms'][0]:.2f}", f"{ref_figs['median_p99_ms'][1]:.2f}"],
             ["this / ref", f"{ref_figs['rps_this_over_ref']:.3f}", "", f"{ref_figs['p99_ms_this_over_ref']:.3f}", ""]])

    trace_table, trace_figs = "", {}
    if args.tracing:
        cores({0})
        col = start_collector(procs, workdir)
        tr_url, tr = B.start_gateway(procs, sims, extra=["--policy", args.policy, "--tracing-endpoint",
                                                        col + "/v1/traces", "--tracing-sample-ratio", "1"],
                                     name="gateway-trace")
        down = f"http://127.0.0.1:{B.free_port()}/v1/traces"      # nothing listens there
        td_url, td = B.start_gateway(procs, sims, extra=["--policy", args.policy, "--tracing-endpoint", down,
                                                        "--tracing-sample-ratio", "1"], name="gateway-trace-down")
        cores({1})
        trios = []
        for _ in range(args.rounds):
            trios.append((measure("infergate", gw_url, gw.pid, args.connections, args.duration, args.wrk_threads),
                          measure("infergate+trace", tr_url, tr.pid, args.connections, args.duration,
                                  args.wrk_threads),
                          measure("infergate+trace-down", td_url, td.pid, args.connections, args.duration,
                                  args.wrk_threads)))

        def median(v):
            v = sorted(v)
            return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
        names = ("infergate", "infergate+trace", "infergate+trace-down")
        trace_figs = {"rounds": args.rounds, "runs": [[r["rps"] for r in t] for t in trios]}
        for k in ("rps", "p99_ms", "cpu_pct"):
            trace_figs[f"median_{k}"] = {n: median([t[i][k] for t in trios]) for i, n in enumerate(names)}
        mr = trace_figs["median_rps"]
        trace_figs["rps_trace_over_off"] = mr["infergate+trace"] / mr["infergate"]
        trace_figs["rps_down_over_off"] = mr["infergate+trace-down"] / mr["infergate"]
        # the cost per request: the difference of the mean time a request takes of the gateway's
        # CPU (its CPU share over its req/s), traced against not
        cpu_us = {n: trace_figs["median_cpu_pct"][n] / 100 / mr[n] * 1e6 for n in names}
        trace_figs["cpu_us_per_request"] = cpu_us
        trace_table = "\n\nTracing (" + str(args.rounds) + " alternating rounds, medians):\n\n" + B.md_table(
            ["gateway", "req/s", "p99 ms", "CPU", "CPU µs per request", "req/s / tracing off"],
            [[n, f"{mr[n]:,.0f}", f"{trace_figs['median_p99_ms'][n]:.2f}",
              f"{trace_figs['median_cpu_pct'][n]:.0f}%", f"{cpu_us[n]:.1f}", f"{mr[n] / mr['infergate']:.3f}"]
             for n in names])
        exported = B.metrics(tr_url, ("infergate_trace_spans_exported_total", "infergate_trace_spans_dropped_total"))
        failed = B.metrics(td_url, ("infergate_trace_spans_failed_total", "infergate_trace_spans_dropped_total"))
        trace_figs["collector_up"] = exported
        trace_figs["collector_down"] = failed
        trace_table += (f"\n\nSpans: collector up {exported}; collector down {failed}.")

    sweep = []
    if not args.no_sweep:
        for c in [int(x) for x in args.sweep.split(",")]:
            for t, u, pg, key in targets:
                sweep.append(measure(t, u, pg, c, args.sweep_duration, args.wrk_threads, key))

    ig, ngx, hap = main_runs["infergate"], main_runs["nginx"], main_runs["haproxy"]
    rows = [[t, f"{r['rps']:,.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}",
             f"{r['cpu_pct']:.0f}%", f"{r['rps'] / max(r['cpu_pct'], 1) * 100:,.0f}",
             r["errors"]] for t, r in main_runs.items()]
    table = B.md_table(["target", "req/s", "p50 ms", "p99 ms", "CPU (proxy/backend)",
                        "req per CPU-s", "errors"], rows)
    ratios = {"rps_infergate_over_nginx": ig["rps"] / ngx["rps"],
              "rps_infergate_over_haproxy": ig["rps"] / hap["rps"],
              "p99_infergate_over_nginx": ig["p99_ms"] / ngx["p99_ms"],
              "p99_infergate_over_haproxy": ig["p99_ms"] / hap["p99_ms"]}
    table += "\n\n" + B.md_table(
        ["ratio", "vs nginx", "vs HAProxy"],
        [["req/s infergate / other", f"{ratios['rps_infergate_over_nginx']:.2f}",
          f"{ratios['rps_infergate_over_haproxy']:.2f}"],
         ["p99 infergate / other", f"{ratios['p99_infergate_over_nginx']:.2f}",
          f"{ratios['p99_infergate_over_haproxy']:.2f}"]])
    if args.keys:
        gk = main_runs["infergate+keys"]
        ratios["rps_keys_over_open"] = gk["rps"] / ig["rps"]
        ratios["p99_keys_over_open"] = gk["p99_ms"] / ig["p99_ms"]
        table += "\n\n" + B.md_table(
            ["ratio", f"infergate with {args.keys:,} keys ({args.keys_format}) / open infergate"],
            [["req/s", f"{ratios['rps_keys_over_open']:.3f}"], ["p99", f"{ratios['p99_keys_over_open']:.3f}"]])
    notes = (f"wrk -t{args.wrk_threads} -c{args.connections} -d{args.duration}s with "
             f"bench/lib/post.lua (one-message chat body, 16-token answer); backends: seven "
             f"`infergate-sim {' '.join(SIM_ARGS)}` (direct = the first one alone). nginx "
             f"{workers} workers, HAProxy nbthread {workers} (configs in bench/conf/); infergate "
             f"one reactor per core it may run on ({workers}). CPU = the target's processes "
             f"(user+system) during the run; " + (
                 "pinned (--pin): each proxy alone on CPU 0, wrk and the simulators on CPU 1."
                 if args.pin else f"everything, wrk included, shares {workers} cores."))
    if sweep:
        dat = os.path.join(B.RESULTS, "proxy-sweep.dat")
        conns = sorted({r["conns"] for r in sweep})
        with open(dat, "w") as f:
            f.write("# connections direct infergate nginx haproxy (requests/s)\n")
            for c in conns:
                byt = {r["target"]: r["rps"] for r in sweep if r["conns"] == c}
                f.write(f"{c} {byt['direct']:.0f} {byt['infergate']:.0f} {byt['nginx']:.0f} "
                        f"{byt['haproxy']:.0f}\n")
        B.gnuplot("proxy-sweep.gp", DAT=dat, PNG=os.path.join(B.RESULTS, "proxy-sweep.png"),
                  TITLE=f"req/s vs connections ({workers} cores, wrk -t{args.wrk_threads}, "
                        f"{args.sweep_duration} s per point)")
        srows = []
        for c in conns:
            byt = {r["target"]: r for r in sweep if r["conns"] == c}
            srows.append([c] + [f"{byt[t]['rps']:,.0f} / {byt[t]['p99_ms']:.1f}"
                                for t in ("direct", "infergate", "nginx", "haproxy")])
        table += "\n\nSweep (req/s / p99 ms), plot in results/proxy-sweep.png:\n\n" + B.md_table(
            ["connections", "direct", "infergate", "nginx", "haproxy"], srows)
    if args.tracing:
        table += trace_table
        notes += (" infergate+trace: --tracing-sample-ratio 1 to an nginx collector answering 200; "
                  "infergate+trace-down: the same to a closed port; alternating with infergate after the main runs.")
    if ref_bin:
        table += ref_table
        notes += (f" infergate@ref: {ref_bin}, the same flags and backends; the two gateways' runs alternate "
                  f"{args.rounds} times after the main runs.")
    B.record("proxy", "Proxy overhead", B.command_line(), mach,
             {"main": main_runs, "ratios": ratios, "sweep": sweep, "reference": ref_figs, "tracing": trace_figs,
              "pinned": args.pin,
              "proxy_workers": workers}, table, notes)


if __name__ == "__main__":
    main()
