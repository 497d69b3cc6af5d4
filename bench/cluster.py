#!/usr/bin/env python3
"""Several gateways as one: HAProxy (Debian's, roundrobin) in front of 4 gateways in front of 200
`infergate-sim`, and one Redis, everything on this machine. The same 4 gateways, side by side in
one run, without and with the `cluster` section:

- limits: a key at `rpm` 600 under more load than that (80 requests/s through HAProxy, spread
  over the 4), its bucket drained first, then answered in a measured minute (target: within 2% of
  600; without a cluster each gateway admits the key's whole limit, about 2,400);
- the sync's cost: each gateway's CPU over that minute, the same figure without a cluster beside
  it, with a keys file of 10,000 keys of which 1,000 get a trickle of requests (20/s in all, so
  the key sync carries about 1,000 active keys), and Redis's memory (INFO used_memory) after.

- priority (--parts priority): a bulk run at `low` (infergate-bulk, twice the fleet's slots in
  flight) through gateway A and 5 interactive streams/s (class normal) through gateway B, 200
  simulators of unequal slots (2, 4, 8 in turn); interactive TTFT p99 against its idle figure
  (target <= 2x) and bulk against the bulk run alone (target >= 95%), with and without the
  cluster, each reference measured in the same case;
- routing (--parts routing): LLM requests through HAProxy over the 4 gateways, 200 simulators of
  unequal slots and speeds (bench/routing.py's seven kinds in turn), one slowed tenfold halfway:
  throughput against the ideal (target >= 95%), and the most requests any simulator held
  (running and waiting, sampled each second) against its slots (target <= 1.0x).

Usage: python3 bench/cluster.py [--parts limits,priority,routing] [--gateways 4] [--backends 200]
       [--seconds 60] [--rate 80]
Env: IG_BUILD (build dir, default ./build), IG_SKIP_DEPS=1 (no apt-get), IG_BENCH_TMP.
"""

import argparse
import hashlib
import http.client
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as B  # noqa: E402

HAPROXY = """global
    nbthread 2
    maxconn 9000
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 2s
    timeout client 600s
    timeout server 600s
frontend fe
    bind 127.0.0.1:@PORT@
    default_backend be
backend be
    balance roundrobin
@SERVERS@
"""


def keys_file(path, n):
    """n keys: "team" at rpm 600, the rest at rpm 60 (their bearer tokens: k-0..k-(n-1))."""
    keys = [{"name": "team", "sha256": hashlib.sha256(b"k-team").hexdigest(), "rpm": 600}]
    for i in range(n - 1):
        keys.append({"name": f"user{i}", "sha256": hashlib.sha256(f"k-{i}".encode()).hexdigest(), "rpm": 60})
    with open(path, "w") as f:
        json.dump({"keys": keys}, f)


def pacer(url, key_of, rate, stop, counts, lock):
    """Sends requests at `rate` per second over keep-alive connections until stop; counts by
    (key kind, status)."""
    host, port = url[len("http://"):].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    i, t0 = 0, time.monotonic()
    while not stop.is_set():
        due = t0 + i / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        kind, key = key_of(i)
        i += 1
        try:
            conn.request("POST", "/v1/chat/completions", body,
                         {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
            r = conn.getresponse()
            r.read()
            st = r.status
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            st = 0
        with lock:
            counts[(kind, st)] = counts.get((kind, st), 0) + 1


def run_case(procs, name, sims, a, redis_url, keys_path, d):
    gws = []
    for g in range(a.gateways):
        extra = ["--api-keys-file", keys_path, "--health-interval-ms", "1000"]
        if redis_url:
            extra += ["--cluster-redis", redis_url, "--cluster-name", f"gw-{g}"]
        url, p = B.start_gateway(procs, sims, extra, name=f"{name}-gw{g}")
        gws.append((url, p))
    if redis_url:  # all joined
        deadline = time.time() + 15
        while time.time() < deadline:
            ok = all(json.loads(B.http(u + "/health/backends")[1]).get("cluster", {}).get("joined") and
                     len(json.loads(B.http(u + "/health/backends")[1])["cluster"]["members"]) == a.gateways
                     for u, _ in gws)
            if ok:
                break
            time.sleep(0.2)
    port = B.free_port()
    conf = HAPROXY.replace("@PORT@", str(port)).replace(
        "@SERVERS@", "\n".join(f"    server g{i} {u[len('http://'):]}" for i, (u, _) in enumerate(gws)))
    path = os.path.join(d, f"haproxy-{name}.cfg")
    with open(path, "w") as f:
        f.write(conf)
    hp = procs.start(f"haproxy-{name}", ["haproxy" if B.shutil.which("haproxy") else "/usr/sbin/haproxy",
                                         "-db", "-f", path])
    front = f"http://127.0.0.1:{port}"
    B.wait_http(front + "/health", proc=hp)
    lock = threading.Lock()
    # drain the team key's buckets first (the measured minute starts with them empty): 200/s for
    # 20 s empties 4 x 600 refilling at 4 x 10/s (alone) within 15 s
    stop, drain = threading.Event(), {}
    ts = [threading.Thread(target=pacer, args=(front, lambda i: ("team", "k-team"), 25.0, stop, drain, lock))
          for _ in range(8)]
    for t in ts:
        t.start()
    time.sleep(20)
    stop.set()
    for t in ts:
        t.join()
    # the measured minute: the team key at `rate`, and a trickle over 1,000 other keys
    counts, stop = {}, threading.Event()
    cpu0 = [B.cpu_seconds([p.pid]) for _, p in gws]
    t0 = time.monotonic()
    ts = [threading.Thread(target=pacer, args=(front, lambda i: ("team", "k-team"), a.rate / 4, stop, counts, lock))
          for _ in range(4)]
    ts.append(threading.Thread(target=pacer, args=(front, lambda i: ("trickle", f"k-{i % 1000}"), 20.0, stop,
                                                   counts, lock)))
    for t in ts:
        t.start()
    time.sleep(a.seconds)
    stop.set()
    for t in ts:
        t.join()
    wall = time.monotonic() - t0
    cpu = [B.cpu_seconds([p.pid]) - c for (_, p), c in zip(gws, cpu0)]
    synced = [json.loads(B.http(u + "/health/backends")[1]).get("cluster", {}).get("keys_synced") for u, _ in gws]
    answered = counts.get(("team", 200), 0)
    fig = {"case": name, "seconds": round(wall, 1), "team_answered": answered,
           "team_refused": counts.get(("team", 429), 0),
           "team_per_minute": round(answered * 60.0 / wall, 1),
           "trickle_answered": counts.get(("trickle", 200), 0), "errors": sum(v for (k, s), v in counts.items()
                                                                               if s not in (200, 429)),
           "gateway_cpu_pct": [round(100 * c / wall, 2) for c in cpu], "keys_synced": synced}
    procs.stop(hp)
    for _, p in gws:
        procs.stop(p)
    return fig


# ---- priority across gateways

P_SLOTS = [2, 4, 8]
P_TPS, P_TTFT_MS, P_TOKENS, P_CHAT_TOKENS = 50, 50, 64, 16


def gateways(procs, sims, n, redis_url, name, extra=()):
    gws = []
    for g in range(n):
        e = ["--health-interval-ms", "1000", "--queue-size", "100000", *extra]
        if redis_url:
            e += ["--cluster-redis", redis_url, "--cluster-name", f"{name}-{g}"]
        gws.append(B.start_gateway(procs, sims, e, name=f"{name}-gw{g}"))
    if redis_url:
        deadline = time.time() + 20
        while time.time() < deadline:
            cs = [json.loads(B.http(u + "/health/backends")[1]).get("cluster", {}) for u, _ in gws]
            if all(c.get("joined") and len(c.get("members", [])) == n for c in cs):
                break
            time.sleep(0.2)
    return gws


def fresh(workdir):
    """workdir, emptied of an earlier run's results (infergate-bulk would resume them)."""
    B.shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir, exist_ok=True)
    return workdir


def priority_case(name, redis_url, a, corpus, d):
    import priority as P   # bench/priority.py: its interactive client and bulk runner
    procs = B.Procs(os.path.join(d, f"priority-{name}"))
    slots = [P_SLOTS[i % len(P_SLOTS)] for i in range(a.backends)]
    args = [["--max-running", str(s), "--tokens-per-second", str(P_TPS), "--ttft-ms", str(P_TTFT_MS),
             "--output-tokens", "0"] for s in slots]
    sims, _ = B.start_sims(procs, a.backends, args)
    gws = gateways(procs, sims, a.gateways, redis_url, f"p{name}")
    ga, gb = gws[0][0], gws[1][0]
    time.sleep(3)        # the load reports state every simulator's slots
    conc = 2 * sum(slots)
    res = {"case": name}
    chats = []
    P.CHAT_TOKENS = P_CHAT_TOKENS
    P.interactive(gb, a.chat_rate, a.window, chats, time.monotonic())
    idle = [x[1] for x in chats if x[1] is not None]
    res["idle"] = {"sent": len(chats), "ok": len(idle), "p50": B.pct(idle, 50), "p99": B.pct(idle, 99)}
    procs.workdir = fresh(os.path.join(d, f"priority-{name}-alone"))
    res["bulk_alone"] = P.run_bulk(procs, ga, corpus, 0, conc)
    chats = []
    t0 = time.monotonic()

    def chat():
        time.sleep(a.warmup)
        P.interactive(gb, a.chat_rate, a.window, chats, t0)
    t = threading.Thread(target=chat)
    t.start()
    procs.workdir = fresh(os.path.join(d, f"priority-{name}-both"))
    res["bulk"] = P.run_bulk(procs, ga, corpus, 0, conc)
    t.join()
    both = [x[1] for x in chats if x[1] is not None]
    res["chat"] = {"sent": len(chats), "ok": len(both), "p50": B.pct(both, 50), "p99": B.pct(both, 99)}
    res["bulk_outlasted_chat"] = res["bulk"]["wall_s"] >= a.warmup + a.window
    procs.stop_all()
    B.log(f"priority {name}: {json.dumps(res)}")
    return res


def part_priority(a, mach, redis_url, d):
    corpus = os.path.join(d, "priority-corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(a.bulk_requests), "--seed", "3",
                           "--output", corpus, "--max-tokens", str(P_TOKENS)], stdout=subprocess.DEVNULL)
    runs = [priority_case(n, u, a, corpus, d) for n, u in (("alone", None), ("cluster", redis_url))]
    rows = []
    for r in runs:
        rows.append([r["case"], f"{r['idle']['p99']:.0f}", f"{r['chat']['p50']:.0f}", f"{r['chat']['p99']:.0f}",
                     f"{r['chat']['p99'] / r['idle']['p99']:.2f}", f"{r['chat']['ok']}/{r['chat']['sent']}",
                     f"{r['bulk_alone']['rps']:.1f}", f"{r['bulk']['rps']:.1f}",
                     f"{r['bulk']['rps'] / r['bulk_alone']['rps']:.3f}", r["bulk"]["errors"]])
    table = B.md_table(["gateways", "idle TTFT p99 ms (B)", "TTFT p50 ms beside bulk", "TTFT p99 ms beside bulk",
                        "p99 / idle", "chat ok/sent", "bulk alone req/s (A)", "bulk beside chat req/s",
                        "bulk / alone", "bulk errors"], rows)
    c = runs[-1]
    r1, r2 = c["chat"]["p99"] / c["idle"]["p99"], c["bulk"]["rps"] / c["bulk_alone"]["rps"]
    notes = (f"{a.backends} simulators, slots {P_SLOTS} in turn ({sum(P_SLOTS[i % 3] for i in range(a.backends))} in "
             f"all), {P_TPS} tokens/s, TTFT {P_TTFT_MS} ms; {a.gateways} gateways; bulk: {a.bulk_requests} chat "
             f"requests of 16..{P_TOKENS} tokens through gateway A (infergate-bulk --priority low, twice the slots in "
             f"flight); interactive: {a.chat_rate:g} streamed chat requests/s of {P_CHAT_TOKENS} tokens (class normal) "
             f"through gateway B for {a.window:g} s after {a.warmup:g} s of bulk; idle: the same client alone, bulk "
             f"alone: the same bulk run alone, each case on fresh simulators and gateways. Targets (cluster): "
             f"interactive p99 <= 2x idle: {r1:.2f}x ({'met' if r1 <= 2 else 'MISSED'}); bulk >= 95% of alone: "
             f"{100 * r2:.1f}% ({'met' if r2 >= 0.95 else 'MISSED'}).")
    B.record("cluster-priority", f"Priority across {a.gateways} gateways, with and without a cluster",
             B.command_line(), mach, {"runs": runs}, table, notes)


# ---- routing across gateways

R_TOKENS, R_TTFT_MS = 50, 20
# bench/routing.py's seven kinds with a quarter of the slots (200 of them at routing.py's size would
# ask 5,000 requests/s of these 2 cores: the figure would be the machine's, not the routing's)
R_SIMS = [(8, 100), (8, 50), (4, 100), (4, 50), (2, 100), (8, 25), (2, 50)]


def r_capacity(slots, tps, ttft_ms):
    return slots / (ttft_ms / 1000 + R_TOKENS / tps)


def sample_holding(sims, slots, worst, lasting, stop):
    """The most requests each simulator held (running and waiting) against its slots, each second
    (worst), and the most it held beyond them in two samples in a row (lasting): a request counts
    as waiting from its arrival to the simulator's next step, as SGLang's does, so one sent the
    moment another finished is seen waiting for a step; a queue that lasts is oversubscription."""
    over = [0] * len(sims)
    while not stop.is_set():
        for i, u in enumerate(sims):
            st, body = B.http(u + "/sim/state", timeout=2)
            if st == 200:
                s = json.loads(body)
                held = s["num_running_reqs"] + s["num_waiting_reqs"]
                worst[i] = max(worst[i], held / slots[i])
                now_over = max(0, held - slots[i])
                lasting[i] = max(lasting[i], min(now_over, over[i]))
                over[i] = now_over
        stop.wait(1.0)


def routing_case(name, redis_url, a, corpus, d):
    procs = B.Procs(os.path.join(d, f"routing-{name}"))
    kinds = [R_SIMS[i % len(R_SIMS)] for i in range(a.backends)]
    args = [["--max-running", str(s), "--tokens-per-second", str(r), "--ttft-ms", str(R_TTFT_MS),
             "--output-tokens", str(R_TOKENS)] for s, r in kinds]
    sims, _ = B.start_sims(procs, a.backends, args)
    gws = gateways(procs, sims, a.gateways, redis_url, f"r{name}")
    port = B.free_port()
    conf = HAPROXY.replace("@PORT@", str(port)).replace(
        "@SERVERS@", "\n".join(f"    server g{i} {u[len('http://'):]}" for i, (u, _) in enumerate(gws)))
    path = os.path.join(procs.workdir, "haproxy.cfg")
    with open(path, "w") as f:
        f.write(conf)
    hp = procs.start("haproxy", ["haproxy" if B.shutil.which("haproxy") else "/usr/sbin/haproxy", "-db", "-f", path])
    front = f"http://127.0.0.1:{port}"
    B.wait_http(front + "/health", proc=hp)
    time.sleep(3)
    slots = [s for s, _ in kinds]
    worst, lasting, stop = [0.0] * len(sims), [0] * len(sims), threading.Event()
    sampler = threading.Thread(target=sample_holding, args=(sims, slots, worst, lasting, stop))
    sampler.start()
    out, progress, summary = (os.path.join(procs.workdir, x) for x in ("out.jsonl", "progress.json", "summary.json"))
    for f in (out, progress, summary, out + ".errors.jsonl"):     # an earlier run's: not resumed
        if os.path.exists(f):
            os.unlink(f)
    conc = sum(slots) + sum(slots) // 8
    p = procs.start("bulk", [B.binary("infergate-bulk"), "--input", corpus, "--output", out, "--url", front,
                             "--model", "sim-model", "--concurrency", str(conc), "--progress-file", progress,
                             "--summary-json", summary, "--progress-interval-s", "60"])
    slow = 2    # a 4-slot, 100 tok/s one (as bench/routing.py's third): its requests then take 5 s
    t0, t_fault = time.time(), None
    while p.poll() is None:
        time.sleep(0.2)
        try:
            with open(progress) as f:
                done = json.load(f).get("done", 0)
        except (OSError, ValueError):
            continue
        if t_fault is None and done >= a.route_requests // 2:
            B.http(sims[slow] + "/sim/fault", {"mode": "slow"})
            t_fault = time.time() - t0
    stop.set()
    sampler.join()
    with open(summary) as f:
        s = json.load(f)
    procs.stop_all()
    res = {"case": name, "done": s["ok"], "errors": s["errors"], "wall_s": s["wall_time_s"],
           "rps": s["ok"] / s["wall_time_s"], "fault_at_s": t_fault, "concurrency": conc,
           "most_held_vs_slots": max(worst), "backends_over_slots": sum(1 for w in worst if w > 1.0),
           "most_lasting_excess": max(lasting), "backends_with_lasting_excess": sum(1 for x in lasting if x > 0),
           "latency_max_ms": s.get("latency_ms", {}).get("max") if isinstance(s.get("latency_ms"), dict) else None}
    B.log(f"routing {name}: {json.dumps(res)}")
    return res, kinds, slow


def part_routing(a, mach, redis_url, d):
    corpus = os.path.join(d, "routing-corpus.jsonl")
    subprocess.check_call([B.binary("infergate-bulk"), "generate", "--count", str(a.route_requests), "--seed", "2",
                           "--output", corpus], stdout=subprocess.DEVNULL)
    runs = []
    for n, u in (("alone", None), ("cluster", redis_url)):
        r, kinds, slow = routing_case(n, u, a, corpus, d)
        runs.append(r)
    caps = [r_capacity(s, t, R_TTFT_MS) for s, t in kinds]
    c_before = sum(caps)
    c_after = c_before - caps[slow] + r_capacity(kinds[slow][0], kinds[slow][1] / 10, R_TTFT_MS * 10)
    ideal_t = (a.route_requests / 2) / c_before + (a.route_requests / 2) / c_after
    ideal = a.route_requests / ideal_t
    rows = [[r["case"], f"{r['done']:,}", r["errors"], f"{r['wall_s']:.1f}", f"{r['rps']:.1f}",
             f"{100 * r['rps'] / ideal:.1f}%", f"{r['most_held_vs_slots']:.2f}x", r["backends_over_slots"],
             r["most_lasting_excess"], r["backends_with_lasting_excess"]]
            for r in runs]
    rows.append(["ideal", f"{a.route_requests:,}", "", f"{ideal_t:.1f}", f"{ideal:.1f}", "100%", "1.00x", 0, 0, 0])
    table = B.md_table(["gateways", "done", "errors", "wall s", "req/s", "of ideal",
                        "most held by a simulator / its slots", "simulators ever over",
                        "most beyond its slots, 2 samples in a row", "simulators so"], rows)
    c = runs[-1]
    notes = (f"{a.backends} simulators of bench/routing.py's seven kinds in turn (slots x tokens/s: {R_SIMS}; "
             f"{R_TOKENS} tokens, TTFT {R_TTFT_MS} ms), {sum(s for s, _ in kinds)} slots, ideal {c_before:.0f} req/s "
             f"({c_after:.0f} once simulator {slow + 1} is slowed tenfold, at half the run); {a.route_requests:,} "
             f"prompts through HAProxy (roundrobin) in front of {a.gateways} gateways, infergate-bulk --concurrency "
             f"{c['concurrency']} (the slots and an eighth); each simulator's running and waiting requests sampled "
             f"each second. Targets (cluster): >= 95% of ideal: {100 * c['rps'] / ideal:.1f}% "
             f"({'met' if c['rps'] / ideal >= 0.95 else 'MISSED'}); most held <= 1.0x its slots: "
             f"{c['most_held_vs_slots']:.2f}x ({'met' if c['most_held_vs_slots'] <= 1.0 else 'MISSED'}; a request "
             f"sent the moment another ended counts as waiting until the simulator's next step, hence the "
             f"two-sample column: requests beyond the slots that lasted a second).")
    B.record("cluster-routing", f"Routing over {a.backends} backends through {a.gateways} gateways, with and "
             "without a cluster", B.command_line(), mach, {"ideal_rps": ideal, "runs": runs}, table, notes)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gateways", type=int, default=4)
    ap.add_argument("--backends", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=float, default=80, help="the team key's requests per second, offered")
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--parts", default="limits,priority,routing")
    ap.add_argument("--bulk-requests", type=int, default=24000, help="priority: the bulk corpus")
    ap.add_argument("--chat-rate", type=float, default=5, help="priority: interactive streams/s")
    ap.add_argument("--warmup", type=float, default=6)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--route-requests", type=int, default=40000, help="routing: the corpus")
    a = ap.parse_args()
    parts = a.parts.split(",")
    B.need(("haproxy", "haproxy"), ("redis-server", "redis-server"))
    B.raise_nofile()
    mach = B.machine()
    d = os.path.join(B.TMP, "cluster")
    procs = B.Procs(d)
    rport = B.free_port()
    redis = procs.start("redis", ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                  "--appendonly", "no", "--dir", d])
    time.sleep(0.5)
    redis_url = f"redis://127.0.0.1:{rport}"
    if "priority" in parts:
        part_priority(a, mach, redis_url, d)
    if "routing" in parts:
        part_routing(a, mach, redis_url, d)
    if "limits" not in parts:
        procs.stop(redis)
        return
    keys_path = os.path.join(d, "keys.json")
    keys_file(keys_path, a.keys)
    B.log(f"starting {a.backends} simulators")
    sims, _ = B.start_sims(procs, a.backends, ["--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4"])
    figs = []
    for name, url in (("alone", None), ("cluster", redis_url)):
        B.log(f"{name}: {a.gateways} gateways, {a.seconds:.0f} s")
        f = run_case(procs, name, sims, a, url, keys_path, d)
        B.log(json.dumps(f))
        figs.append(f)
    info = subprocess.run(["redis-cli", "-p", str(rport), "INFO", "memory"], capture_output=True, text=True).stdout
    used = next((int(l.split(":")[1]) for l in info.splitlines() if l.startswith("used_memory:")), 0)
    dbsize = subprocess.run(["redis-cli", "-p", str(rport), "DBSIZE"], capture_output=True, text=True).stdout.strip()
    procs.stop(redis)
    rows = []
    for f in figs:
        rows.append([f["case"], f"{f['team_per_minute']:.0f}", f"{f['team_per_minute'] / 600:.3f}",
                     f["team_refused"], f["trickle_answered"], f["errors"],
                     " / ".join(f"{c:.1f}%" for c in f["gateway_cpu_pct"])])
    table = B.md_table(["gateways", "team key answered per minute (rpm 600)", "of 600", "429s",
                        "trickle answered", "errors", "each gateway's CPU"], rows)
    notes = (f"{a.gateways} gateways behind HAProxy (roundrobin), {a.backends} simulators, {a.keys} keys in the "
             f"keys file; the team key offered {a.rate:.0f} requests/s, its buckets drained first (200/s for 20 s), then "
             f"{a.seconds:.0f} s measured; a trickle of 20 requests/s over 1,000 other keys (rpm 60 each; the last "
             f"key sync of each gateway carried {figs[-1]['keys_synced']} keys: those active in the last seconds "
             f"somewhere). Redis "
             f"after the cluster run: used_memory {used / 1e6:.2f} MB, {dbsize} keys. Target (cluster): the team key "
             "within 2% of 600 a minute.")
    B.record("cluster", f"{a.gateways} gateways, with and without a cluster", B.command_line(), mach,
             {"cases": figs, "redis_used_memory": used, "redis_keys": dbsize}, table, notes)


if __name__ == "__main__":
    main()
