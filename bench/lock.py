#!/usr/bin/env python3
"""The gateway's one lock, per request and per kind of request (issue 47, item 9): how many
times a request takes it, how long it is held and how often another reactor held it, read
from the gateway's own counters (infergate_lock_acquisitions_total,
infergate_lock_contended_total, infergate_lock_held_seconds_total: kept only with more than
one reactor, so every gateway here runs --workers 2).

Kinds, each `wrk -t1 -c8` for --duration seconds against seven unpaced simulators:
  chat      a small non-streamed chat completion (bench/lib/post.lua's body)
  stream    the same, streamed (16 SSE events and [DONE])
  keyed     chat with an API key of a keys file of 1,000 named keys with rpm/tpm limits
  refused   a model no backend serves: the gateway's own 404, never sent upstream

With --reference DIR, the infergate of another build directory (`git worktree add /tmp/ref
COMMIT`, built there) runs the same kinds in the same run, alternating --rounds times; the
table gives both and their ratio (medians of the rounds).

Usage: python3 bench/lock.py [--duration S] [--rounds N] [--reference DIR]
Env: IG_BUILD (build dir, default ./build).
"""

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402

SIM_ARGS = ["--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "16"]
CHAT = {"model": "sim-model", "messages": [{"role": "user", "content": "Say hello in one short sentence."}],
        "max_tokens": 16}
KINDS = {
    "chat": (CHAT, False),
    "stream": (dict(CHAT, stream=True), False),
    "keyed": (CHAT, True),
    "refused": (dict(CHAT, model="no-such-model"), False),
}
LOCK = ("infergate_lock_acquisitions_total", "infergate_lock_contended_total",
        "infergate_lock_held_seconds_total")


def lua(workdir, kind, body, key):
    path = os.path.join(workdir, f"{kind}.lua")
    with open(path, "w") as f:
        f.write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n')
        if key:
            f.write(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
        f.write(f"wrk.body = [[{json.dumps(body)}]]\n")
        f.write('function done(s, l, r)\n  io.write(string.format("IG_RESULT requests=%d status_errors=%d\\n",'
                ' s.requests, s.errors.status))\nend\n')
    return path


def run(url, script, seconds):
    out = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds}s", "-s", script, url + "/v1/chat/completions"],
                         capture_output=True, text=True, timeout=seconds + 60).stdout
    m = re.search(r"IG_RESULT requests=(\d+) status_errors=(\d+)", out)
    if not m:
        sys.exit("wrk printed no result:\n" + out)
    return int(m.group(1)), int(m.group(2))


def lock_now(url):
    m = B.metrics(url, LOCK)
    if not all(k in m for k in LOCK):
        sys.exit(f"{url}/metrics has no lock counters (is --workers 2 taken?)")
    return [m[k] for k in LOCK]


def measure(url, script, seconds):
    run(url, script, 1)  # warm-up
    before = lock_now(url)
    n, errs = run(url, script, seconds)
    after = lock_now(url)
    d = [a - b for a, b in zip(after, before)]
    return {"requests": n, "status_errors": errs, "takes": d[0] / n, "contended_pct": 100 * d[1] / max(d[0], 1),
            "held_us": d[2] * 1e6 / n}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=int, default=5, help="seconds per kind and round [5]")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (medians taken) [3]")
    ap.add_argument("--reference", help="build directory of the gateway to compare with")
    args = ap.parse_args()
    B.need(("wrk", "wrk"))
    mach = B.machine()
    workdir = os.path.join(B.TMP, f"lock-{os.getpid()}")
    procs = B.Procs(workdir)
    digests = [hashlib.sha256(f"bench-key-{i}".encode()).hexdigest() for i in range(1000)]
    keys = os.path.join(workdir, "keys.json")
    with open(keys, "w") as f:
        json.dump({"keys": [{"name": f"team-{i}", "sha256": d, "rpm": 1000000000, "tpm": 4000000000000}
                            for i, d in enumerate(digests)]}, f)
    try:
        sims, _ = B.start_sims(procs, 7, SIM_ARGS)
        gws = [("this", None)]
        if args.reference:
            ref = os.path.join(os.path.abspath(args.reference), "infergate")
            if not os.access(ref, os.X_OK):
                sys.exit(f"--reference: {ref} is not an executable infergate")
            gws.append(("ref", ref))
        urls = {}
        for name, prog in gws:
            urls[name], _ = B.start_gateway(procs, sims, ["--workers", "2", "--api-keys-file", keys],
                                            name=f"gateway-{name}", program=prog)
        # with keys, every kind but "keyed" would be refused 401: two gateways per build, one open
        for name, prog in gws:
            urls[name + "-open"], _ = B.start_gateway(procs, sims, ["--workers", "2"],
                                                      name=f"gateway-{name}-open", program=prog)
        scripts = {k: lua(workdir, k, body, "bench-key-500" if keyed else None)
                   for k, (body, keyed) in KINDS.items()}
        res = {(g, k): [] for g, _ in gws for k in KINDS}
        for r in range(args.rounds):
            for k, (_, keyed) in KINDS.items():
                for g, _ in gws:
                    m = measure(urls[g if keyed else g + "-open"], scripts[k], args.duration)
                    res[(g, k)].append(m)
                    B.log(f"round {r + 1} {g:4} {k:8} {m['requests']:>7} requests, {m['takes']:.2f} takes, "
                          f"{m['held_us']:.2f} us held, {m['contended_pct']:.1f}% contended")
    finally:
        procs.stop_all()
    med = {key: {f: statistics.median(x[f] for x in v) for f in ("takes", "held_us", "contended_pct", "requests")}
           for key, v in res.items()}
    rows, figures = [], {}
    for k in KINDS:
        t = med[("this", k)]
        row = [k, f"{t['takes']:.2f}", f"{t['held_us']:.2f}", f"{t['contended_pct']:.1f}%"]
        figures[k] = {"this": t}
        if args.reference:
            f = med[("ref", k)]
            figures[k]["ref"] = f
            row += [f"{f['takes']:.2f}", f"{f['held_us']:.2f}", f"{f['contended_pct']:.1f}%",
                    f"{t['takes'] / f['takes']:.2f}x / {t['held_us'] / f['held_us']:.2f}x"]
        rows.append(row)
    header = ["kind", "takes/req", "held µs/req", "contended"]
    if args.reference:
        header += ["ref takes/req", "ref held µs/req", "ref contended", "this/ref (takes / held)"]
    B.record("lock", "The lock per request", B.command_line(), mach, figures, B.md_table(header, rows),
             f"Medians of {args.rounds} rounds of {args.duration} s per kind; wrk -t1 -c8; --workers 2; "
             "seven unpaced simulators on the same two cores.")


if __name__ == "__main__":
    main()
