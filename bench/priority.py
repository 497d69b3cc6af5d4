#!/usr/bin/env python3
"""Issue 15: interactive requests beside a bulk run. Seven simulators of unequal batch slots
(4, 4, 8, 8, 16, 16, 32: 88 in all), an infergate-bulk run at class low with a concurrency of
4x the slots, and an interactive client at a steady rate (streamed chat completions without
a priority header, so class normal), measuring time to first token (TTFT).

Scenarios, each on fresh simulators:
  idle       the interactive client alone, through infergate (the reference TTFT)
  bulk       the bulk run alone, through infergate (the reference throughput)
  priority   both, through infergate (the defaults: scheduling priority and the headroom learned
             from the interactive traffic, headroom.max_percent 25)
  priority-alone    the same with --headroom-max-percent 0 (priority alone, as before it was learned)
  priority+reserve  priority alone with reserve_slots 3 on the 32-slot simulator (the hand-set number)
  priority-fixed    (on request) the same with the slot counts given, not learned
  fifo       both, through infergate with --scheduling fifo (arrival order)
  engine:priority   the defaults, on simulators started as SGLang with --enable-priority-scheduling
             (the queue by priority, a normal request preempting a low one when the slots are full):
             the gateway learns it from their /server_info, sends the class, and lets high and
             normal requests go headroom.overshoot (1) over a backend's slots
  engine:overshootN the same with --headroom-overshoot N (0: held back in the gateway's queue, the
             learned headroom kept, the class still sent)
  nginx      both, through nginx (least_conn, keep-alive: its best case; no queue of its own,
             so the simulators' FIFO queues hold the surplus)
The interactive client starts after a warm-up (the gateway learns each simulator's slot count
from its load reports during the first seconds) and stops before the bulk run ends.

Targets (issue 34, the defaults with no knob): interactive TTFT p99 under the bulk load <= 1.5x
the idle p99, and bulk throughput >= 97% of the bulk run alone (issue 15's were 2x and 95%).

Usage: python3 bench/priority.py [--requests M] [--rate R] [--warmup S] [--window S]
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
import benchlib as B  # noqa: E402
import sse  # noqa: E402

SLOTS = [4, 4, 8, 8, 16, 16, 32]
TPS = 50            # decode tokens/s of each request
TTFT_MS = 50
BULK_TOKENS = 128   # at most: the simulators answer 16..256 tokens chosen by the prompt
CHAT_TOKENS = 16
RESERVE = 3         # priority+reserve: slots of the 32-slot simulator kept from the bulk run


def start_sims(procs, engine_priority=False):
    args = [["--max-running", str(s), "--tokens-per-second", str(TPS), "--ttft-ms", str(TTFT_MS),
             "--output-tokens", "0"] + (["--enable-priority-scheduling"] if engine_priority else []) for s in SLOTS]
    sims, _ = B.start_sims(procs, len(SLOTS), args)
    return sims


def start_nginx(procs, backends):
    port = B.free_port()
    workdir = procs.workdir
    for d in ("client_body", "proxy_temp"):
        os.makedirs(os.path.join(workdir, d), exist_ok=True)
    servers = "\n".join(f"        server {u[len('http://'):]};" for u in backends)
    with open(os.path.join(B.BENCH, "conf", "nginx.conf.in")) as f:
        text = f.read()
    for k, v in {"WORKERS": 2, "DIR": workdir, "PORT": port, "SERVERS": servers}.items():
        text = text.replace(f"@{k}@", str(v))
    conf = os.path.join(workdir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(text)
    nginx = "nginx" if B.shutil.which("nginx") else "/usr/sbin/nginx"
    p = procs.start("nginx", [nginx, "-c", conf, "-e", os.path.join(workdir, "nginx-error.log")])
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/health", proc=p)
    return url


def interactive(url, rate, seconds, out, t0):
    """Streamed chat requests at `rate` per second for `seconds`; appends (start offset from t0,
    TTFT ms or None) to out."""
    host, port = url[len("http://"):].split(":")
    n = max(1, int(rate * seconds))
    streams = [sse.Stream(host, int(port), "/v1/chat/completions", sse.chat_body(CHAT_TOKENS, f"chat {i}"))
               for i in range(n)]
    sse.run(streams, max_open=n, open_rate=rate, deadline=time.monotonic() + seconds + 120)
    for s in streams:
        ok = s.status == 200 and s.events and not s.error
        out.append((s.t_send - t0 if s.t_send else None, (s.events[0] - s.t_send) * 1000 if ok else None))


def run_bulk(procs, url, corpus, m, conc):
    out = os.path.join(procs.workdir, "out.jsonl")
    summary = os.path.join(procs.workdir, "summary.json")
    p = procs.start("bulk", [B.binary("infergate-bulk"), "--input", corpus, "--output", out, "--url", url,
                             "--model", "sim-model", "--concurrency", str(conc), "--summary-json", summary,
                             "--progress-interval-s", "60", "--priority", "low"])
    p.wait()
    with open(summary) as f:
        s = json.load(f)
    return {"ok": s["ok"], "errors": s["errors"], "wall_s": s["wall_time_s"], "rps": s["ok"] / s["wall_time_s"]}


def scenario(name, corpus, args, workdir):
    procs = B.Procs(os.path.join(workdir, name.replace(":", "-")))
    engine = name.startswith("engine:")
    sims = start_sims(procs, engine)
    if name == "nginx":
        url = start_nginx(procs, sims)
    elif name in ("priority-fixed", "priority+reserve"):
        # (priority alone otherwise: a backend's reserve_slots turns the learned headroom off)
        # fixed: the slot counts given (max_inflight) instead of learned; reserve: learned, and
        # RESERVE slots of the largest simulator kept for interactive requests (reserve_slots)
        cfg = os.path.join(procs.workdir, "gateway.json")
        big = SLOTS.index(max(SLOTS))
        with open(cfg, "w") as f:
            json.dump({"queue_size": 100000, "backends": [
                dict({"url": u}, **({"max_inflight": s} if name == "priority-fixed" else
                                    {"reserve_slots": RESERVE} if i == big else {}))
                for i, (u, s) in enumerate(zip(sims, SLOTS))]}, f)
        url, _ = B.start_gateway(procs, sims, config=cfg)
    else:
        extra = ["--queue-size", "100000"] + (["--scheduling", "fifo"] if name == "fifo" else []) + \
            (["--headroom-max-percent", "0"] if name == "priority-alone" else []) + \
            (["--headroom-overshoot", name[len("engine:overshoot"):]] if name.startswith("engine:overshoot") else [])
        url, _ = B.start_gateway(procs, sims, extra=extra)
    res = {"scenario": name}
    chats = []
    t0 = time.monotonic()
    if name == "idle":
        interactive(url, args.rate, args.window, chats, t0)
    elif name == "bulk":
        res["bulk"] = run_bulk(procs, url, corpus, args.requests, 4 * sum(SLOTS))
    else:
        def chat():
            time.sleep(args.warmup)
            interactive(url, args.rate, args.window, chats, t0)
        t = threading.Thread(target=chat)
        t.start()
        if name != "nginx":
            def watch():
                time.sleep(args.warmup + args.window / 2)
                st, body = B.http(url + "/health/backends")
                if st == 200:
                    hb = json.loads(body)
                    res["mid_run"] = [(b.get("learned_slots"), b.get("reported_waiting"), b["inflight"])
                                      for b in hb["backends"]]
                    res["headroom"] = hb.get("models", {}).get("sim-model", {}).get("headroom")
                    res["over_slots"] = [(b.get("priority_scheduling") or {}).get("preempts") for b in hb["backends"]]
            threading.Thread(target=watch, daemon=True).start()
        res["bulk"] = run_bulk(procs, url, corpus, args.requests, 4 * sum(SLOTS))
        t.join()
        if res["bulk"]["wall_s"] < args.warmup + args.window:
            B.log(f"{name}: the bulk run ended before the interactive window did: raise --requests")
    ttft = [x[1] for x in chats if x[1] is not None]
    # after the interactive traffic's first 2 s: what a learned headroom keeps once it has seen
    # the traffic start (the first requests find every slot busy and wait for one to free)
    begin = 0 if name == "idle" else args.warmup
    steady = [x[1] for x in chats if x[1] is not None and x[0] is not None and x[0] >= begin + 2]
    res["chat"] = {"sent": len(chats), "ok": len(ttft), "p50": B.pct(ttft, 50), "p90": B.pct(ttft, 90),
                   "p99": B.pct(ttft, 99), "max": max(ttft) if ttft else float("nan"),
                   "p99_steady": B.pct(steady, 99) if steady else float("nan")}
    res["series"] = [(round(a, 3), round(b, 1)) for a, b in chats if a is not None and b is not None]
    procs.stop_all()
    B.log(f"{name}: chat {res['chat']}, bulk {res.get('bulk')}")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2400, help="bulk corpus size [2400]")
    ap.add_argument("--rate", type=float, default=5, help="interactive requests/s [5]")
    ap.add_argument("--warmup", type=float, default=6, help="seconds of bulk before the client starts [6]")
    ap.add_argument("--window", type=float, default=20, help="seconds of interactive load [20]")
    ap.add_argument("--scenarios", default="idle,bulk,priority,priority-alone,priority+reserve,fifo,nginx,"
                    "engine:priority,engine:overshoot0,engine:overshoot1,engine:overshoot4")
    args = ap.parse_args()
    if not os.environ.get("IG_SKIP_DEPS"):
        B.need(("nginx", "nginx-light"), ("gnuplot", "gnuplot-nox"))
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"priority-{os.getpid()}")
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(args.requests), "--seed", "3",
                           "--output", corpus, "--max-tokens", str(BULK_TOKENS)], stdout=subprocess.DEVNULL)
    runs = {n: scenario(n, corpus, args, workdir) for n in args.scenarios.split(",")}

    idle_p99 = runs["idle"]["chat"]["p99"] if "idle" in runs else float("nan")
    alone = runs["bulk"]["bulk"]["rps"] if "bulk" in runs else float("nan")
    rows = []
    for n, r in runs.items():
        c, b = r["chat"], r.get("bulk")
        rows.append([n, f"{c['ok']}/{c['sent']}" if c["sent"] else "-",
                     f"{c['p50']:.0f}" if c["sent"] else "-", f"{c['p99']:.0f}" if c["sent"] else "-",
                     f"{c['p99'] / idle_p99:.2f}" if c["sent"] and n != "idle" else "-",
                     f"{c['p99_steady'] / idle_p99:.2f}" if c["sent"] and n != "idle" else "-",
                     f"{b['rps']:.1f}" if b else "-", f"{b['rps'] / alone:.3f}" if b else "-",
                     f"{b['errors']}" if b else "-"])
    table = B.md_table(["scenario", "chat ok/sent", "TTFT p50 ms", "TTFT p99 ms", "p99 / idle p99",
                        "p99 after the first 2 s / idle",
                        "bulk req/s", "bulk / alone", "bulk errors"], rows)
    verdict = []
    if "priority" in runs and "idle" in runs and "bulk" in runs:
        p = runs["priority"]
        for n in ("priority", "priority-alone", "priority+reserve", "engine:priority", "engine:overshoot0",
                  "engine:overshoot1", "engine:overshoot4"):
            if n not in runs:
                continue
            r1 = runs[n]["chat"]["p99"] / idle_p99
            r2 = runs[n]["bulk"]["rps"] / alone
            r3 = runs[n]["chat"]["p99_steady"] / idle_p99
            verdict.append(f"Targets, {n}: interactive p99 under bulk <= 1.5x idle: {r1:.2f}x "
                           f"({'met' if r1 <= 1.5 else 'MISSED'}; after its first 2 s {r3:.2f}x); "
                           f"bulk >= 97% of alone: {100 * r2:.1f}% "
                           f"({'met' if r2 >= 0.97 else 'MISSED'})" +
                           (f"; learned headroom mid-run: {runs[n]['headroom']['slots']} slots "
                            f"({runs[n]['headroom']['why']})" if runs[n].get("headroom") and n == "priority"
                            else "") +
                           (f"; mid-run headroom learned {runs[n]['headroom']['slots']}, kept "
                            f"{runs[n]['headroom'].get('kept_slots')}" if runs[n].get("headroom") and n.startswith("engine:")
                            else "") + ".")
        for other in ("fifo", "nginx"):
            if other in runs:
                o = runs[other]
                verdict.append(f"{other}: interactive p99 {o['chat']['p99'] / idle_p99:.1f}x idle, "
                               f"bulk {100 * o['bulk']['rps'] / alone:.1f}% of alone; "
                               f"infergate priority's p99 is {o['chat']['p99'] / p['chat']['p99']:.1f}x lower.")
    notes = (f"Seven infergate-sim, slots {SLOTS} ({sum(SLOTS)} in all), {TPS} tokens/s, TTFT {TTFT_MS} ms; "
             f"bulk: {args.requests} chat requests of 16..{BULK_TOKENS} tokens (max_tokens {BULK_TOKENS}), infergate-bulk --priority low "
             f"--concurrency {4 * sum(SLOTS)}; interactive: {args.rate:g} streamed chat requests/s of "
             f"{CHAT_TOKENS} tokens, no priority header (normal), for {args.window:g} s after a "
             f"{args.warmup:g} s warm-up, raw-socket client (bench/lib/sse.py), TTFT = first SSE event. "
             "Everything on the same 2 cores.\n\n" + "\n".join(verdict))
    dat = os.path.join(B.RESULTS, "priority-ttft.dat")
    plotted = [(n, r) for n, r in runs.items() if r["series"]]
    with open(dat, "w") as f:
        for n, r in plotted:      # gnuplot does not count an empty block as an index
            f.write(f"# {n}\n")
            for t, v in r["series"]:
                f.write(f"{t} {v}\n")
            f.write("\n\n")
    try:
        B.gnuplot("priority.gp", DAT=dat, PNG=os.path.join(B.RESULTS, "priority-ttft.png"),
                  TITLE="interactive TTFT beside a bulk run (bench/priority.py)",
                  PLOTS=", ".join(f'"{dat}" index {i} using 1:2 with points pt 7 ps 0.6 title "{n}"'
                                  for i, (n, _) in enumerate(plotted)))
    except (OSError, subprocess.CalledProcessError, SystemExit) as e:
        B.log(f"no plot: {e}")
    B.record("priority", "Interactive beside bulk", B.command_line(), mach,
             {n: {k: v for k, v in r.items() if k != "series"} for n, r in runs.items()}, table, notes)


if __name__ == "__main__":
    main()
