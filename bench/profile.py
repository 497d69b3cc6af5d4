#!/usr/bin/env python3
"""Profiles of the gateway where a target is missed, reproducible with one command.

  python3 bench/profile.py cpu      perf record -g on the gateway under wrk (64 connections,
                                    seven fast simulators), then perf report (self time),
                                    plus a syscall count (perf trace -s or strace -c)
  python3 bench/profile.py memory   valgrind massif (malloc heap) on the gateway holding N
                                    streams; top allocation sites at the peak (what is
                                    not heap, such as libmicrohttpd's mmap'd connection
                                    pools, is RSS minus this)

Writes the reports to $IG_BENCH_TMP/profile-*/ and their heads to results/profile-*.txt.
Env: IG_BUILD (build dir, default ./build).
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib as B  # noqa: E402
import sse  # noqa: E402


def cpu(args, procs):
    B.need(("wrk", "wrk"), ("perf", "linux-perf"))
    sims, _ = B.start_sims(procs, 7, ["--tokens-per-second", "0", "--ttft-ms", "0",
                                      "--output-tokens", "16"])
    gw, gwp = B.start_gateway(procs, sims)
    data = os.path.join(procs.workdir, "perf.data")
    wrk = procs.start("wrk", ["wrk", "-t2", f"-c{args.connections}", f"-d{args.seconds + 4}s",
                              "-s", os.path.join(B.BENCH, "lib", "post.lua"),
                              gw + "/v1/chat/completions"],
                      stdout=open(os.path.join(procs.workdir, "wrk.txt"), "w"))
    time.sleep(2)
    subprocess.run(["perf", "record", "-F", "999", "-g", "-p", str(gwp.pid), "-o", data,
                    "--", "sleep", str(args.seconds)], stderr=subprocess.DEVNULL, check=True)
    # syscalls: how many per request, and which
    st = subprocess.run(["timeout", "-s", "INT", "2", "strace", "-c", "-f", "-p", str(gwp.pid)],
                        capture_output=True, text=True).stderr
    wrk.wait()
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio",
                          "--percent-limit", "1.5", "-g", "none", "--sort", "dso,symbol"],
                         capture_output=True, text=True).stdout
    callers = subprocess.run(["perf", "report", "-i", data, "--children", "--stdio",
                              "--percent-limit", "4", "-g", "none", "--sort", "symbol"],
                             capture_output=True, text=True).stdout
    with open(os.path.join(procs.workdir, "wrk.txt")) as f:
        wrk_out = f.read()
    text = ("== wrk\n" + wrk_out + "\n== perf report --no-children (self time)\n" + rep +
            "\n== perf report --children (inclusive)\n" + callers + "\n== strace -c (2 s)\n" + st)
    return text


def memory(args, procs):
    B.need(("valgrind", "valgrind"))
    sims, _ = B.start_sims(procs, 7, ["--tokens-per-second", "1", "--ttft-ms", "0",
                                      "--output-tokens", "20", "--max-running", "2000"])
    port = B.free_port()
    out = os.path.join(procs.workdir, "massif.out")
    argv = ["valgrind", "--tool=massif", "--depth=12", f"--massif-out-file={out}",
            B.binary("infergate"), "--listen", f"127.0.0.1:{port}", "--log-level", "warn"]
    for s in sims:
        argv += ["--backend", s]
    gwp = procs.start("gateway-massif", argv)
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/health", proc=gwp, timeout=60,
                ok=lambda s, b: s == 200 and b'"healthy_backends":7' in b)
    streams = [sse.Stream("127.0.0.1", port, "/v1/chat/completions", sse.chat_body())
               for _ in range(args.streams)]
    sse.run(streams, args.streams, open_rate=200, deadline=time.monotonic() + 120)
    ok = sum(1 for s in streams if s.saw_done)
    procs.stop(gwp, timeout=60)
    rep = subprocess.run(["ms_print", "--threshold=2", out], capture_output=True, text=True).stdout
    # keep the graph and the peak snapshot's tree
    lines = rep.splitlines()
    import re
    m = re.search(r"(\d+) \(peak\)", rep)
    row = [i for i, l in enumerate(lines) if m and re.match(rf"\s+{m.group(1)}\s", l)]
    head = "\n".join(lines[:40])
    tree = "\n".join(l for l in lines[row[0]:row[0] + 120]
                     if "???" not in l) if row else ""
    return f"{ok}/{args.streams} streams completed under massif\n\n{head}\n...\n{tree}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["cpu", "memory"])
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--streams", type=int, default=1000)
    args = ap.parse_args()
    mach = B.machine()
    procs = B.Procs(os.path.join(B.TMP, f"profile-{args.what}-{os.getpid()}"))
    text = cpu(args, procs) if args.what == "cpu" else memory(args, procs)
    path = os.path.join(B.RESULTS, f"profile-{args.what}.txt")
    with open(path, "w") as f:
        f.write(f"# {B.command_line()} at commit {mach['commit']}, {mach['date']}, "
                f"{mach['nproc']} x {mach['cpu']}, load {mach['load_before']}\n\n{text}")
    print(text)


if __name__ == "__main__":
    main()
