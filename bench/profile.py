#!/usr/bin/env python3
"""Profiles of the gateway where a target is missed, reproducible with one command.

  python3 bench/profile.py cpu      perf record -g on the gateway under wrk (64 connections,
                                    seven fast simulators), then perf report (self time),
                                    plus a syscall count (strace -c), and system calls per
                                    request by call against one nginx worker's
  python3 bench/profile.py instructions [--reference DIR]
                                    callgrind: user-space instructions per request by
                                    library, of this build's gateway and another's (a count:
                                    two builds compare exactly on a noisy machine)
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
    return text + syscalls_per_request(procs, sims, gwp)


def syscalls_per_request(procs, sims, gwp):
    """System calls per request, by call, of the gateway and of one nginx worker
    (bench/conf/nginx.conf.in, worker_processes 1) under the same wrk load, one after the
    other. Requests counted from the writes: the gateway's sendmsg is its answer to the client
    (its request to the backend is a sendto); an nginx worker writes both with writev, two a
    request."""
    import re
    sys.path.insert(0, B.BENCH)
    from proxy import start_nginx
    B.need(("nginx", "nginx-light"))
    ng, ngp = start_nginx(procs, sims, procs.workdir, 1)
    time.sleep(0.5)
    worker = [p for p in B.group_pids(ngp.pid) if p != ngp.pid][0]
    gw = f"http://127.0.0.1:{gwp.args[gwp.args.index('--listen') + 1].split(':')[1]}"
    out, table = {}, []
    for name, url, pid, answer, per in (("infergate", gw, gwp.pid, "sendmsg", 1),
                                        ("nginx (1 worker)", ng, worker, "writev", 2)):
        w = subprocess.Popen(["wrk", "-t2", "-c64", "-d6s", "-s", os.path.join(B.BENCH, "lib", "post.lua"),
                              url + "/v1/chat/completions"], stdout=subprocess.DEVNULL)
        time.sleep(2)
        st = subprocess.run(["timeout", "-s", "INT", "2", "strace", "-c", "-p", str(pid)],
                            capture_output=True, text=True).stderr
        w.wait()
        calls = {}
        for line in st.splitlines():
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(\d+\s+)?(\w+)$", line)
            if m and m.group(3) != "total":
                calls[m.group(3)] = (int(m.group(1)), int(m.group(2) or 0))
        out[name] = (calls, max(calls.get(answer, (0, 0))[0] / per, 1))
    names = sorted({c for calls, _ in out.values() for c in calls})
    table.append("| call | " + " | ".join(out) + " |")
    table.append("|---|" + "---|" * len(out))
    for c in names:
        table.append(f"| {c} | " + " | ".join(
            f"{calls.get(c, (0, 0))[0] / n:.2f}" + (f" ({calls[c][1] / n:.2f} failed)" if calls.get(c, (0, 0))[1] else "")
            for calls, n in out.values()) + " |")
    table.append("| total | " + " | ".join(f"{sum(v[0] for v in calls.values()) / n:.2f}"
                                         for calls, n in out.values()) + " |")
    return "\n== system calls per request (strace -c, 2 s each, wrk -t2 -c64)\n" + "\n".join(table) + "\n"



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


def instructions_of(procs, sims, program, name, seconds):
    """Instructions (callgrind Ir, user space) per request of one gateway binary under
    `wrk -t1 -c8`, by library; returns (requests, {library: Ir}, callgrind_annotate text)."""
    import re
    port = B.free_port()
    out = os.path.join(procs.workdir, f"callgrind-{name}.out")
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", program,
            "--listen", f"127.0.0.1:{port}", "--log-level", "warn"]
    for s in sims:
        argv += ["--backend", s]
    gwp = procs.start(f"gateway-callgrind-{name}", argv)
    url = f"http://127.0.0.1:{port}"
    B.wait_http(url + "/health", proc=gwp, timeout=60,
                ok=lambda s, b: s == 200 and b'"healthy_backends":7' in b)
    post = os.path.join(B.BENCH, "lib", "post.lua")
    subprocess.run(["wrk", "-t1", "-c8", "-d2s", "-s", post, url + "/v1/chat/completions"],
                   capture_output=True)                               # warm-up, not counted
    subprocess.run(["callgrind_control", "-z", str(gwp.pid)], capture_output=True)
    w = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds}s", "-s", post, url + "/v1/chat/completions"],
                       capture_output=True, text=True).stdout
    n = int(re.search(r"(\d+) requests in", w).group(1))
    subprocess.run(["callgrind_control", "-d", str(gwp.pid)], capture_output=True)
    procs.stop(gwp, timeout=60)
    dumps = sorted(f for f in os.listdir(procs.workdir) if f.startswith(f"callgrind-{name}.out."))
    ann = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100",
                          os.path.join(procs.workdir, dumps[0])], capture_output=True, text=True).stdout
    by = {}
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*([\d.]+)%\)\s+(.*?)\s+\[(.*?)\]\s*$", line)
        if m and float(m.group(2)) < 99:
            lib = os.path.basename(m.group(4))
            by[lib] = by.get(lib, 0) + int(m.group(1).replace(",", ""))
    return n, by, ann


def instructions(args, procs):
    """Instructions per request (callgrind), this build's gateway and --reference's: a count,
    not a time, so two builds compare exactly on a noisy machine. Excludes the kernel."""
    B.need(("valgrind", "valgrind"), ("wrk", "wrk"))
    sims, _ = B.start_sims(procs, 7, ["--tokens-per-second", "0", "--ttft-ms", "0",
                                      "--output-tokens", "16"])
    builds = [("this", B.binary("infergate"))]
    if args.reference:
        builds.append(("ref", os.path.join(os.path.abspath(args.reference), "infergate")))
    figs, text = {}, ""
    for name, program in builds:
        n, by, ann = instructions_of(procs, sims, program, name, args.seconds)
        figs[name] = (n, by)
        text += f"== {name}: {program}, {n} requests\n" + "\n".join(ann.splitlines()[:60]) + "\n\n"
    libs = sorted({k for _, by in figs.values() for k in by}, key=lambda k: -figs["this"][1].get(k, 0))
    rows = [["library"] + [f"{name} (Ir per request)" for name, _ in builds]]
    for lib in libs + ["total"]:
        row = [lib]
        for name, _ in builds:
            n, by = figs[name]
            v = sum(by.values()) if lib == "total" else by.get(lib, 0)
            row.append(f"{v / n:,.0f}")
        rows.append(row)
    table = "\n".join(" | ".join(r) for r in rows)
    return table + "\n\n" + text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["cpu", "memory", "instructions"])
    ap.add_argument("--reference", metavar="DIR", help="instructions: also this build directory's gateway")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--streams", type=int, default=1000)
    args = ap.parse_args()
    mach = B.machine()
    procs = B.Procs(os.path.join(B.TMP, f"profile-{args.what}-{os.getpid()}"))
    text = {"cpu": cpu, "memory": memory, "instructions": instructions}[args.what](args, procs)
    path = os.path.join(B.RESULTS, f"profile-{args.what}.txt")
    with open(path, "w") as f:
        f.write(f"# {B.command_line()} at commit {mach['commit']}, {mach['date']}, "
                f"{mach['nproc']} x {mach['cpu']}, load {mach['load_before']}\n\n{text}")
    print(text)


if __name__ == "__main__":
    main()
