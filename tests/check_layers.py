#!/usr/bin/env python3
"""Calls go down the layers of each program of src/, never up, never round.

A module is a .c file with the header of the same name beside it (or, for
src/common, in include/infergate/). Module A depends on module B when one of
A's files #includes B's header or names a function or variable that B's .c
defines (a call, or a callback taken by address), or a static inline function
of B's header. LAYERS below declares each program's modules from the top layer
down (for src/gateway, as docs/how-it-is-built.md draws them): a module may
depend on modules of its own layer or below and on the libraries (src/common,
src/batchfile), never on a layer above nor on another program; a module the table does not place fails
too, so a new file must be given its layer here. Within a layer, and across
all of them, the dependencies must not form a circle. Each failure is printed
with the symbol or include behind the edge, so the fix is visible.

Speaks TAP. Run by `make check`; by hand: python3 tests/check_layers.py [SRCDIR]
(SRCDIR defaults to IG_SRCDIR or the tree this file is in). The last tests run
the same checks over small trees with a circle and with a call up in them, so
this one can fail.
"""
import fnmatch
import os
import re
import sys
import tempfile

IDENT = re.compile(r"[A-Za-z_]\w*")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "defined"}
SHARED = {"gateway/gateway", "sim/sim"}  # a program's shared state's types: outside the layers

# Each program's modules, top layer first; names separated by spaces share a
# layer, and may be glob patterns (one file per routing policy: lb_*). A name
# with no file yet is fine (a module another branch adds). gateway.h, the
# shared state's types (struct ig_gw), is outside the layers: it declares no
# function, and every module may include it.
LAYERS = {
    "gateway": [
        "main",
        "boot",                                   # the process's setup (boot.c) beside the loops
        "reactor",                                # the loops
        "server admin reload discover notify",
        "batches_api",                            # the Batch API's HTTP side
        "batches",                                # its store and its tick
        "batches_lease",                          # across gateways: leases, fences, announcements
        "batches_check",                          # a batch's input, validated
        "batches_run",                            # its lines sent and answered
        "batch",                                  # one batch's record and its saving
        "files",                                  # the Files API and its store
        "proxy",                                  # the request's life: an exchange and its attempts
        "try_* watch_*",                          # its strategies (strategy.h) and observers (watch.h): one file each
        "strategy watch reply attempt",           # their interfaces; the answer's shared parts; one upstream try
        "exchange",                               # the exchange (struct ig_req) and its primitives
        "cluster idem_share",                     # what gateways share through Redis
        "relay admission dispatch",
        "metrics",                                # reads the scheduler's, the router's and the tables' state
        "scheduler",                              # who runs next
        "policy lb_*",                            # one file per routing policy
        "upstream health",
        "accesslog answer backend loadreport capacity ratelimit keyset respstore affinity clients cont idem headroom trace",
        "conf policy_list",                       # policy_list.h: the policies' table, which conf.c reads
        "routes servertls peer",                  # servertls: HTTPS for clients, peer: who a client is (trusted_proxies), which conf.c checks
        "rx event bio redis redis_link redismsg", # the reactors' shared parts, background I/O, Redis (its link's settings; its values checked)
    ],
    "bulk": [
        "main",
        "merge submit generate",
        "scheduler",
        "progress",
        "report",
        "autoconc stream",
        "bulk",
    ],
    "batchfile": [                                # Batch files: the gateway's and the bulk client's
        "corpus journal",
        "idset",
    ],
    "sim": [
        "main",
        "reactor",
        "server",
        "parse metrics",                          # a generation request's body; /metrics, load reports
        "pooling stored",                         # embeddings & co answered at once; stored Responses
        "engine",
        "wire",                                   # the bytes of answers
        "request kvcache text",
        "conf",
    ],
    "common": [
        "batchfile",                              # include/infergate/batchfile.h: src/batchfile's interface
        "flags httpd",
        "oaerror sse log",
        "buf list blockhash util",
    ],
}

# Calls up tolerated while a branch that removes them is under way, as
# {(from, to): "who removes it"}: reported, not failed, until the call is
# gone; then the entry must go too. Empty: every call goes down.
KNOWN = {}
LIBS = {"common", "batchfile"}  # the libraries every program may call


def strip(text):
    """Comments, string and character literals and preprocessor lines out."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        elif c == "#" and (i == 0 or text[i - 1] == "\n"):
            # a directive, with its continuation lines
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    j = n
                    break
                if text[k - 1] != "\\":
                    j = k
                    break
                j = k + 1
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse(code, header):
    """(defined, used): names defined at file scope (functions with a body,
    variables; in a .c file only those that are not static, in a header only
    static inline functions) and the names used inside bodies and
    initializers. A prototype is the interface of the module that defines
    the function, not a use of it."""
    names, used, stmt, depth = set(), set(), [], 0
    carry = ""  # "static struct x {...} v[] = {": the head before the struct body
    for m in re.finditer(r"[{};]|[^{};]+", code):
        tok = m.group(0)
        if depth > 0 or (stmt and "=" in "".join(stmt)):
            used.update(IDENT.findall(tok))
        if tok == "{":
            if depth == 0:
                head = carry + "".join(stmt)
                carry = ""
                if "=" in head:  # initialised variable: int x[] = {...}
                    name = re.findall(r"(\w+)\s*(?:\[[^\]]*\]\s*)*=", head)
                    if name and not re.search(r"\bstatic\b", head) and not header:
                        names.add(name[-1])
                elif re.match(r"\s*(static\s+)?(const\s+)?(struct|enum|union)\b[^(]*$", head):
                    carry = "static " if re.search(r"\bstatic\b", head) else ""
                elif "(" in head and not re.match(r"\s*typedef\b", head):
                    name = re.findall(r"(\w+)\s*\(", head)
                    name = [x for x in name if x not in KEYWORDS]
                    is_static = re.search(r"\bstatic\b", head)
                    if name and ((header and is_static) or (not header and not is_static)):
                        names.add(name[0])
                stmt = []
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                stmt = []
        elif tok == ";":
            if depth == 0:
                head = carry + "".join(stmt)
                carry = ""
                if (not header and "(" not in head and not re.search(r"\b(static|extern|typedef)\b", head)
                        and not re.match(r"\s*(struct|enum|union)\s+\w+\s*$", head)):
                    name = re.findall(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", head)
                    if name:
                        names.add(name[-1])
                stmt = []
        elif depth == 0:
            stmt.append(tok)
    return names, used


def modules(srcdir):
    """{program: {module: [files]}} for src/*/ and include/infergate/."""
    progs = {}
    for prog in sorted(os.listdir(os.path.join(srcdir, "src"))):
        d = os.path.join(srcdir, "src", prog)
        if not os.path.isdir(d):
            continue
        mods = progs.setdefault(prog, {})
        for f in sorted(os.listdir(d)):
            if f.endswith((".c", ".h")):
                mods.setdefault(f[:-2], []).append(os.path.join(d, f))
    inc = os.path.join(srcdir, "include", "infergate")
    if os.path.isdir(inc):
        mods = progs.setdefault("common", {})
        for f in sorted(os.listdir(inc)):
            if f.endswith(".h"):
                mods.setdefault(f[:-2], []).append(os.path.join(inc, f))
    return progs


def graph(srcdir):
    """{node: {node: [reasons]}} over every module, nodes named prog/module."""
    progs = modules(srcdir)
    node_of_file, defs, uses, includes = {}, {}, {}, {}
    # A name resolves within its own program first, then in src/common.
    for prog, mods in progs.items():
        for mod, files in mods.items():
            for f in files:
                node_of_file[os.path.realpath(f)] = prog + "/" + mod
    for f, node in node_of_file.items():
        text = open(f, encoding="utf-8", errors="replace").read()
        defined, uses[f] = parse(strip(text), f.endswith(".h"))
        for name in defined:
            defs.setdefault((node.split("/")[0], name), node)
        incs = []
        for inc in INCLUDE.findall(text):
            for base in (os.path.dirname(f), os.path.join(srcdir, "include")):
                p = os.path.realpath(os.path.join(base, inc))
                if p in node_of_file:
                    incs.append((inc, node_of_file[p]))
                    break
        includes[f] = incs
    edges = {n: {} for n in set(node_of_file.values())}
    for f, node in node_of_file.items():
        for inc, target in includes[f]:
            # The shared state's header (struct ig_gw) declares no function:
            # including it, or what it includes, ties a file to no module.
            if target != node and node not in SHARED and target not in SHARED:
                edges[node].setdefault(target, []).append("%s includes %s" % (os.path.basename(f), inc))
        prog = node.split("/")[0]
        for name in sorted(uses[f]):
            target = defs.get((prog, name)) or defs.get(("common", name)) or defs.get(("batchfile", name))
            if target and target != node:
                edges[node].setdefault(target, []).append("%s uses %s()" % (os.path.basename(f), name))
    return edges


def circles(edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def explain(edges, comp):
    lines = []
    for a in comp:
        for b in sorted(edges[a]):
            if b in comp:
                lines.append("  %s -> %s  (%s)" % (a, b, edges[a][b][0]))
    return lines


def layer(layers, node):
    """The index of node's layer in its program's table, or None."""
    prog, mod = node.split("/", 1)
    for i, row in enumerate(layers.get(prog, [])):
        if any(fnmatch.fnmatchcase(mod, pat) for pat in row.split()):
            return i
    return None


def order(edges, layers, known, prog):
    """(problems, known_seen) for prog's modules: each problem a list of
    lines (the first says what, the rest why); known_seen the KNOWN entries
    of prog that are still edges."""
    problems, seen = [], set()
    for a in sorted(n for n in edges if n.startswith(prog + "/") and n not in SHARED):
        la = layer(layers, a)
        if la is None:
            problems.append(["%s is in no layer: give it one in LAYERS (tests/check_layers.py)" % a])
            continue
        for b in sorted(edges[a]):
            bprog = b.split("/")[0]
            why = ", ".join(edges[a][b][:3]) + (", ..." if len(edges[a][b]) > 3 else "")
            if (a, b) in known:
                seen.add((a, b))
                continue
            if bprog != prog:
                if bprog not in LIBS:
                    problems.append(["%s -> %s: another program (only src/common and src/batchfile are shared)" % (a, b),
                                     "  " + why])
                continue
            lb = layer(layers, b)
            if lb is not None and lb < la:
                problems.append(["%s -> %s: a call up (layer %d to layer %d)" % (a, b, la, lb), "  " + why])
    return problems, seen


def check(srcdir, layers, known):
    """TAP lines and the number of failures, one test per program."""
    edges = graph(srcdir)
    progs = sorted({n.split("/")[0] for n in edges})
    comps = circles(edges)
    out, failed = [], 0
    for prog in progs:
        mine = [c for c in comps if c[0].startswith(prog + "/")]
        problems, seen = order(edges, layers, known, prog)
        stale = sorted(k for k in known if k[0].startswith(prog + "/") and k not in seen)
        nmods = len([n for n in edges if n.startswith(prog + "/")])
        lines = []
        for c in mine:
            lines.append("circle: " + " <-> ".join(c))
            lines += explain(edges, c)
        for p in problems:
            lines += p
        for k in stale:
            lines.append("%s -> %s is listed in KNOWN but no longer there: take it out" % k)
        if lines:
            failed += 1
            out.append(("not ok", "src/%s: %d circle(s), %d call(s) up or unplaced module(s), %d stale exception(s)"
                        % (prog, len(mine), len(problems), len(stale)), lines))
        else:
            note = ["known, left to another branch of issue 31: %s -> %s (%s)" % (k[0], k[1], known[k])
                    for k in sorted(seen)]
            out.append(("ok", "src/%s: %d modules in %d layers, calls only down, no circle"
                        % (prog, nmods, len(layers.get(prog, []))), note))
    return out, failed


def plant(tmp, files):
    d = os.path.join(tmp, "src", "x")
    os.makedirs(d)
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)


def main():
    srcdir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "IG_SRCDIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    results, failed = check(srcdir, LAYERS, KNOWN)
    print("1..%d" % (len(results) + 2))
    n = 0
    for status, what, lines in results:
        n += 1
        print("%s %d - %s" % (status, n, what))
        for line in lines:
            print("# " + line)

    # The checks themselves. A tree whose a.c calls b.c, which calls back
    # into a.c through its header's inline function: a circle.
    with tempfile.TemporaryDirectory() as tmp:
        plant(tmp, {
            "a.h": "int a_f(void);\n",
            "a.c": '#include "a.h"\n#include "b.h"\nint a_f(void) { return b_g(); }\n',
            "b.h": "int b_g(void);\n",
            "b.c": '#include "b.h"\n#include "c.h"\nint b_g(void) { return c_h(); }\n',
            "c.h": '#include "a.h"\nstatic inline int c_h(void) { return a_f(); }\n',
            "d.c": '/* a_f() in a comment is not a call */ int d_f(void) { return 1; }\n',
        })
        found = circles(graph(tmp))
        n += 1
        if found == [["x/a", "x/b", "x/c"]]:
            print("ok %d - the check finds a circle a -> b -> c -> a, and only that" % n)
        else:
            failed += 1
            print("not ok %d - the check missed or misread a planted circle: %r" % (n, found))

    # A tree in three layers (top, mid, low) whose low module takes the top
    # one's function: no circle, but a call up; and a module the table does
    # not place, beside a table entry with no file.
    with tempfile.TemporaryDirectory() as tmp:
        plant(tmp, {
            "top.h": "int top_run(void);\n",
            "top.c": '#include "top.h"\nint top_run(void) { return 1; }\n',
            "mid.h": "int mid_step(void);\n",
            "mid.c": '#include "mid.h"\n#include "low.h"\nint mid_step(void) { return low_get(); }\n',
            "low.h": "int low_get(void);\n",
            "low.c": '#include "low.h"\nint top_run(void);\nint low_get(void) { return top_run != 0; }\n',
            "stray.c": "int stray_f(void) { return 0; }\n",
        })
        res, _ = check(tmp, {"x": ["top", "mid not_yet_written", "low"]}, {})
        lines = res[0][2] if res else []
        want = ["x/low -> x/top: a call up (layer 2 to layer 0)", "  low.c uses top_run()",
                "x/stray is in no layer: give it one in LAYERS (tests/check_layers.py)"]
        n += 1
        if res and res[0][0] == "not ok" and lines == want:
            print("ok %d - the check fails a planted call up (low -> top, naming top_run) and an unplaced module"
                  % n)
        else:
            failed += 1
            print("not ok %d - the check missed or misread a planted call up: %r" % (n, res))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
