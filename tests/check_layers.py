#!/usr/bin/env python3
"""No two files of src/ may depend on each other in a circle.

A module is a .c file with the header of the same name beside it (or, for
src/common, in include/infergate/). Module A depends on module B when one of
A's files #includes B's header or names a function or variable that B's .c
defines (a call, or a callback taken by address), or a static inline function
of B's header. Within each program (src/common, src/gateway, src/bulk,
src/sim) the dependencies must form layers: a circle fails the test, printed
with the symbol or include behind every edge on it, so the fix is visible.

Speaks TAP. Run by `make check`; by hand: python3 tests/check_layers.py [SRCDIR]
(SRCDIR defaults to IG_SRCDIR or the tree this file is in). The last test runs
the same check over a small tree with a circle in it, so this one can fail.
"""
import os
import re
import sys
import tempfile

IDENT = re.compile(r"[A-Za-z_]\w*")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "defined"}
SHARED = "gateway/gateway"


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
    """{node: {node: reason}} over every module, nodes named prog/module."""
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
            if target != node and SHARED not in (node, target):
                edges[node].setdefault(target, "%s includes %s" % (os.path.basename(f), inc))
        prog = node.split("/")[0]
        for name in sorted(uses[f]):
            target = defs.get((prog, name)) or defs.get(("common", name))
            if target and target != node:
                edges[node].setdefault(target, "%s uses %s()" % (os.path.basename(f), name))
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
                lines.append("  %s -> %s  (%s)" % (a, b, edges[a][b]))
    return lines


def main():
    srcdir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "IG_SRCDIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    edges = graph(srcdir)
    progs = sorted({n.split("/")[0] for n in edges})
    print("1..%d" % (len(progs) + 1))
    failed = 0
    comps = circles(edges)
    for i, prog in enumerate(progs, 1):
        mine = [c for c in comps if c[0].startswith(prog + "/")]
        nmods = len([n for n in edges if n.startswith(prog + "/")])
        if mine:
            failed += 1
            print("not ok %d - src/%s: %d module(s) in a circle" % (i, prog, sum(map(len, mine))))
            for c in mine:
                print("# circle: " + " <-> ".join(c))
                for line in explain(edges, c):
                    print("#" + line)
        else:
            print("ok %d - src/%s: %d modules, no circle" % (i, prog, nmods))

    # The check itself: a tree whose a.c calls b.c, which calls back into a.c
    # through its header's inline function, must be reported.
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "src", "x")
        os.makedirs(d)
        files = {
            "a.h": "int a_f(void);\n",
            "a.c": '#include "a.h"\n#include "b.h"\nint a_f(void) { return b_g(); }\n',
            "b.h": "int b_g(void);\n",
            "b.c": '#include "b.h"\n#include "c.h"\nint b_g(void) { return c_h(); }\n',
            "c.h": '#include "a.h"\nstatic inline int c_h(void) { return a_f(); }\n',
            "d.c": '/* a_f() in a comment is not a call */ int d_f(void) { return 1; }\n',
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        found = circles(graph(tmp))
        n = len(progs) + 1
        if found == [["x/a", "x/b", "x/c"]]:
            print("ok %d - the check finds a circle a -> b -> c -> a, and only that" % n)
        else:
            failed += 1
            print("not ok %d - the check missed or misread a planted circle: %r" % (n, found))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
