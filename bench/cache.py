#!/usr/bin/env python3
"""Issue 17: routing that knows prefix caches and tokens, measured on simulators that batch
and cache like an engine. Seven `infergate-sim --profile h100-8b` (decode steps over the
batch, a KV budget, a prefix cache of 16-token blocks; --time-scale so a run of simulated
minutes takes seconds), three workloads, every policy plus nginx in one run:

- multi-turn: concurrent conversations of 5-10 turns over four shared system prompts of
  about 1,000 tokens; each turn sends the system prompt, the history and a new question,
  the next turn leaves when the answer is in (closed loop per conversation);
- bulk: distinct questions behind one shared system prompt, long-tailed answer lengths
  (max_tokens from a Pareto draw, 16..1024), a fixed number in flight;
- distinct: distinct prompts, nothing shared, the same number in flight;
- hot: half the multi-turn conversations, and a few hot ones that fan out (each round sends
  --fanout requests at once on the same history, as an agent does): where affinity alone
  overloads one server and the load guard should show.

Targets: round-robin, least-loaded, least-tokens, cache-aware (infergate), nginx least_conn,
and nginx `hash $http_x_conversation consistent` (what an nginx user does for affinity; the
client sends the conversation id, or for one-shot work the request's own id).

Figures per run (from the streamed answers: `stream_options.include_usage`):
output tokens per simulated second (tokens / (wall time x time scale)), cache hit rate
(cached / prompt tokens from usage.prompt_tokens_details), TTFT p50 / p99 (simulated ms:
wall x time scale), the tail (time from 99% of requests done to 100%), and for multi-turn the
history hit rate: of each turn's tokens past the shared system prompt, the share found cached.

Usage: python3 bench/cache.py [--scale X] [--kv-tokens N] [--conversations N] [--requests N]
       [--concurrency C] [--targets a,b,...] [--workloads a,b,...]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get).
"""

import argparse
import http.client
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

NSIMS = 7
TARGETS = ["round-robin", "least-loaded", "least-tokens", "cache-aware", "nginx-least_conn", "nginx-hash"]
WORKLOADS = ["multi-turn", "bulk", "distinct", "hot"]
WORDS = ("river stone valley lantern harbor signal forest engine window garden mountain kernel "
         "socket packet winter summer copper silver meadow canyon").split()


def text(rng, nbytes):
    out, n = [], 0
    while n < nbytes:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


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
    upstream backends {
        @BALANCE@;
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
        }
    }
}
"""


def start_nginx(procs, sims, balance):
    port = B.free_port()
    d = procs.workdir
    for sub in ("client_body", "proxy_temp"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    conf = NGINX_CONF.replace("@DIR@", d).replace("@PORT@", str(port)).replace("@BALANCE@", balance)
    conf = conf.replace("@SERVERS@", "\n".join(f"        server {u[len('http://'):]};" for u in sims))
    path = os.path.join(d, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    nginx = "nginx" if B.shutil.which("nginx") else "/usr/sbin/nginx"
    p = procs.start("nginx", [nginx, "-c", path, "-e", os.path.join(d, "nginx-error.log")])
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/health", proc=p)
    return url


def one(url, body, conv):
    """One streamed chat completion: (ttft_s, prompt, cached, completion, text) or None."""
    host, port = url[len("http://"):].split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=600)
    t0 = time.monotonic()
    try:
        c.request("POST", "/v1/chat/completions", json.dumps(body),
                  {"Content-Type": "application/json", "X-Conversation": conv})
        r = c.getresponse()
        if r.status != 200:
            r.read()
            return None
        ttft, usage, parts = None, None, []
        while True:
            line = r.readline()
            if not line:
                break
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            if ttft is None:
                ttft = time.monotonic() - t0
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                parts.append(ch.get("delta", {}).get("content") or "")
        if not usage:
            return None
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return ttft, usage["prompt_tokens"], cached, usage["completion_tokens"], "".join(parts)
    except OSError:
        return None
    finally:
        c.close()


def body(messages, max_tokens):
    return {"model": "sim-model", "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}}


def run_all(ths):
    """Starts the threads, waits for them; returns when they started (monotonic)."""
    t0 = time.monotonic()
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return t0


SYSTEMS = [text(random.Random(100 + i), 4000) for i in range(4)]   # about 1,000 tokens each


class Recorder:
    """The results and finish times of a run's requests, added from many threads."""

    def __init__(self):
        self.results, self.finish, self.lock = [], [], threading.Lock()

    def add(self, res, system=None):
        """res from one(), its text dropped; with the system prompt of a conversation, the
        prompt's tokens as the simulator counts them (role, text, 2 separators) appended."""
        if res:
            res = res[:4] + (((len("system") + len(system) + 2 + 3) // 4,) if system else ())
        with self.lock:
            self.results.append(res)
            self.finish.append(time.monotonic())


def conversation(url, ci, rec):
    """One chat of 5-10 turns over one of the shared system prompts."""
    r = random.Random(ci)
    msgs = [{"role": "system", "content": SYSTEMS[ci % 4]}]
    for t in range(r.randint(5, 10)):
        msgs.append({"role": "user", "content": f"[{ci}.{t}] " + text(r, 200)})
        res = one(url, body(msgs, 64), f"conv-{ci}")
        rec.add(res, SYSTEMS[ci % 4])
        # the answer, as received, is the next turn's history (what a chat client does)
        msgs.append({"role": "assistant", "content": res[4] if res else text(r, 250)})


def run_multi_turn(url, args, rng):
    rec = Recorder()
    t0 = run_all([threading.Thread(target=conversation, args=(url, i, rec)) for i in range(args.conversations)])
    return rec.results, rec.finish, t0


def run_hot(url, args, rng):
    """Half the multi-turn conversations, plus a few hot ones: each round of a hot conversation
    sends `fanout` requests at once on the same history (an agent fanning out), waits for them,
    and goes on with one of the answers."""
    rec = Recorder()

    def hot(hi):
        r = random.Random(10000 + hi)
        msgs = [{"role": "system", "content": SYSTEMS[hi % 4]}]
        for t in range(6):
            out = [None] * args.fanout

            def fan(j):
                q = msgs + [{"role": "user", "content": f"[hot {hi}.{t}.{j}] " + text(random.Random(j), 200)}]
                out[j] = one(url, body(q, 64), f"hot-{hi}")
                rec.add(out[j], SYSTEMS[hi % 4])
            run_all([threading.Thread(target=fan, args=(j,)) for j in range(args.fanout)])
            msgs.append({"role": "user", "content": f"[hot {hi}.{t}.0] " + text(random.Random(0), 200)})
            msgs.append({"role": "assistant", "content": out[0][4] if out[0] else text(r, 250)})

    ths = [threading.Thread(target=conversation, args=(url, i, rec)) for i in range(args.conversations // 2)]
    ths += [threading.Thread(target=hot, args=(i,)) for i in range(args.hot)]
    return rec.results, rec.finish, run_all(ths)


def run_oneshot(url, args, rng, shared):
    system = text(random.Random(7), 8000) if shared else None
    jobs = []
    for i in range(args.requests):
        r = random.Random(1000 + i)
        q = f"[{i}] " + text(r, 800 if shared else 8800)
        msgs = ([{"role": "system", "content": system}] if shared else []) + [{"role": "user", "content": q}]
        # long-tailed lengths (Pareto, alpha 1.2) for bulk, fixed for distinct
        mt = min(1024, int(16 * r.paretovariate(1.2))) if shared else 128
        jobs.append((msgs, mt, f"req-{i}"))
    rec = Recorder()
    lock = threading.Lock()
    it = iter(jobs)

    def worker():
        while True:
            with lock:
                job = next(it, None)
            if job is None:
                return
            rec.add(one(url, body(job[0], job[1]), job[2]))

    t0 = run_all([threading.Thread(target=worker) for _ in range(args.concurrency)])
    return rec.results, rec.finish, t0


def measure(target, workload, args, workdir):
    procs = B.Procs(os.path.join(workdir, f"{workload}-{target}"))
    try:
        sim_args = ["--profile", "h100-8b", "--time-scale", str(args.scale), "--kv-tokens", str(args.kv_tokens)]
        sims, _ = B.start_sims(procs, NSIMS, sim_args)
        if target.startswith("nginx"):
            url = start_nginx(procs, sims, "least_conn" if target == "nginx-least_conn"
                              else "hash $http_x_conversation consistent")
        else:
            url, _ = B.start_gateway(procs, sims, extra=["--policy", target, "--load-source", "gateway"]
                                     + args.gateway_args.split())
        rng = random.Random(1)
        if workload == "multi-turn":
            results, finish, t0 = run_multi_turn(url, args, rng)
        elif workload == "hot":
            results, finish, t0 = run_hot(url, args, rng)
        else:
            results, finish, t0 = run_oneshot(url, args, rng, shared=workload == "bulk")
        wall = max(finish) - t0 if finish else float("nan")
        ok = [r for r in results if r]
        prompt = sum(r[1] for r in ok)
        cached = sum(r[2] for r in ok)
        out = sum(r[3] for r in ok)
        ttft = [r[0] * args.scale * 1000 for r in ok]
        fin = sorted(finish)
        tail = (fin[-1] - fin[int(0.99 * (len(fin) - 1))]) * args.scale if len(fin) > 1 else 0
        # multi-turn: of the tokens past the shared system prompt (the conversation's own
        # history), the share found cached: what only routing by conversation can win
        own = sum(r[1] - r[4] for r in ok if len(r) > 4)
        own_cached = sum(max(0, r[2] - r[4]) for r in ok if len(r) > 4)
        fig = {"target": target, "workload": workload, "requests": len(results), "failed": len(results) - len(ok),
               "history_hit_rate": own_cached / own if own else None,
               "sim_seconds": wall * args.scale, "out_tps": out / (wall * args.scale),
               "hit_rate": cached / prompt if prompt else 0.0,
               "ttft_p50_ms": B.pct(ttft, 50), "ttft_p99_ms": B.pct(ttft, 99), "tail_s": tail}
        hh = f" (history {fig['history_hit_rate']:.1%})" if fig["history_hit_rate"] is not None else ""
        B.log(f"{workload:10} {target:17} {fig['out_tps']:8,.0f} tok/s  hit {fig['hit_rate']:.1%}{hh}  "
              f"TTFT p50 {fig['ttft_p50_ms']:,.0f} p99 {fig['ttft_p99_ms']:,.0f} ms  tail {tail:.1f} s  "
              f"failed {fig['failed']}")
        return fig
    finally:
        procs.stop_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1,
                    help="simulated time per wall second [1: above it the client and the simulators share the "
                         "2 cores with the fleet's work, and simulated time stretches]")
    ap.add_argument("--kv-tokens", type=int, default=60000,
                    help="each simulator's KV budget [60000: the working set of the multi-turn chats does "
                         "not fit one server's cache, as on a busy real fleet]")
    ap.add_argument("--conversations", type=int, default=224, help="multi-turn conversations at once [224]")
    ap.add_argument("--requests", type=int, default=1500, help="bulk and distinct requests [1500]")
    ap.add_argument("--concurrency", type=int, default=224, help="bulk and distinct in flight [224]")
    ap.add_argument("--hot", type=int, default=4, help="hot: conversations that fan out [4]")
    ap.add_argument("--fanout", type=int, default=48, help="hot: requests at once per round [48]")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--gateway-args", default="", help="more flags for infergate (e.g. cache-aware's guard)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    B.need(("nginx", "nginx-light"))
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"cache-{os.getpid()}")
    figs = []
    for w in args.workloads.split(","):
        for t in args.targets.split(","):
            figs.append(measure(t, w, args, workdir))
    rows = []
    for w in args.workloads.split(","):
        base = next((f for f in figs if f["workload"] == w and f["target"] == "least-loaded"), None)
        for f in (f for f in figs if f["workload"] == w):
            rel = f"{f['out_tps'] / base['out_tps']:.2f}" if base else "-"
            hit = (f"{f['hit_rate'] / base['hit_rate']:.1f}x" if base and base["hit_rate"] > 0 else "-")
            hh = f" ({f['history_hit_rate']:.1%})" if f.get("history_hit_rate") is not None else ""
            rows.append([w, f["target"], f"{f['out_tps']:,.0f}", rel, f"{f['hit_rate']:.1%}{hh}", hit,
                         f"{f['ttft_p50_ms']:,.0f}", f"{f['ttft_p99_ms']:,.0f}", f"{f['tail_s']:.1f}",
                         f["failed"]])
    table = B.md_table(["workload", "target", "output tok/s", "vs least-loaded", "hit rate (history)",
                        "hit vs least-loaded", "TTFT p50 ms", "TTFT p99 ms", "tail s (99%->100%)", "failed"],
                       rows)
    notes = (f"Seven `infergate-sim --profile h100-8b --time-scale {args.scale:g} --kv-tokens {args.kv_tokens}` "
             f"(figures in simulated time: "
             f"wall x {args.scale:g}); infergate with `--load-source gateway`; nginx 2 workers. multi-turn: "
             f"{args.conversations} conversations of 5-10 turns (64-token answers) over 4 system prompts of "
             f"4,000 bytes; bulk: {args.requests} questions of 800 bytes behind one 8,000-byte system prompt, "
             f"max_tokens Pareto(1.2) x 16 up to 1024, {args.concurrency} in flight; distinct: {args.requests} "
             f"prompts of 8,800 bytes, 128 tokens, {args.concurrency} in flight; hot: {args.conversations // 2} "
             f"conversations and {args.hot} hot ones of 6 rounds of {args.fanout} requests at once. "
             f"Client: Python threads, "
             f"streamed requests with include_usage; everything on the same 2 cores.")
    by = {(f["workload"], f["target"]): f for f in figs}
    targets = args.targets.split(",")
    if all((w, t) in by for w in WORKLOADS[:3] for t in targets):
        dat = os.path.join(B.RESULTS, "cache.dat")
        with open(dat, "w") as f:
            f.write("# target hit_mt hist_mt hit_bulk ttft50_mt ttft99_mt ttft50_bulk ttft99_bulk "
                    "ttft50_distinct ttft99_distinct\n")
            for t in targets:
                m, b, d = by[("multi-turn", t)], by[("bulk", t)], by[("distinct", t)]
                f.write(f"{t} {100 * m['hit_rate']:.1f} {100 * (m['history_hit_rate'] or 0):.1f} "
                        f"{100 * b['hit_rate']:.1f} {m['ttft_p50_ms']:.0f} {m['ttft_p99_ms']:.0f} "
                        f"{b['ttft_p50_ms']:.0f} {b['ttft_p99_ms']:.0f} {d['ttft_p50_ms']:.0f} "
                        f"{d['ttft_p99_ms']:.0f}\n")
        B.gnuplot("cache.gp", DAT=dat, PNG=os.path.join(B.RESULTS, "cache.png"),
                  TITLE="prompt cache hit rate and TTFT per policy (seven h100-8b simulators)")
        notes += " Plot: results/cache.png."
    B.record("cache", "Cache-aware and least-tokens routing", B.command_line(), mach, {"runs": figs}, table, notes)


if __name__ == "__main__":
    main()
