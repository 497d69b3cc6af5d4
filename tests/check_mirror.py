#!/usr/bin/env python3
"""The unit tests mirror the code: src/<prog>/<m>.c has tests/unit/<prog>/test_<m>.c.

At any folder depth: src/P/a/b/m.c is tested by tests/unit/P/a/b/test_m.c (as
h2o's t/00unit mirrors lib/). A test that exists is also registered in
tests/Makemodule.am (a file the build does not know never runs).

A module may go without its own test only when EXEMPT below says why: either
it cannot be unit-tested usefully (a program's entry), or another named unit
test covers it (then that file must exist and name the module), or it is a
known gap of UNTESTED, the list that issue 47 (item 4) shrinks. An entry that
no longer matches a file, or whose module has its own test now, fails too:
the lists only shrink, and never lie.

Speaks TAP. Run by `make check`; by hand: python3 tests/check_mirror.py [SRCDIR]
(SRCDIR defaults to IG_SRCDIR or the tree this file is in). The last tests run
the same check over a small tree with a planted module that has no test, so
this one can fail.
"""
import fnmatch
import os
import re
import sys
import tempfile

# Modules without a test of their own, for good: {"prog/path.c" glob: why}.
# A reason that names a tests/unit/ file is checked: that file exists, and
# names the module (includes its .c or .h, or links its .c).
EXEMPT = {
    "*/main.c": "a program's entry (flags, signals, the loop): run by the integration tests, which start each program",
    "gateway/sched/lb_*.c": "one routing policy each behind struct ig_policy: tested together through policy.h "
                      "in tests/unit/gateway/sched/test_policy.c",
    "gateway/cluster/cluster_sync.c": "the cluster's Redis I/O (scripts, subscriptions, the outbox): its counts of refused "
                              "values in tests/unit/gateway/cluster/test_cluster.c, the rest against a real Redis in "
                              "tests/integration/test_cluster_redis.py and the fuzz targets fuzz_redis_*.c",
    "gateway/core/conf_parts.c": "the list of the modules' settings, in --help's order: registered and read whole by "
                            "tests/unit/gateway/conf/test_conf.c (conf_parts.h), whose tables and --help it checks",
}

# Known gaps (issue 47, item 4): modules with no unit test yet, each with what
# covers it today. Shrink this list: write tests/unit/<prog>/test_<m>.c and
# take its line out (the check fails while the line stays).
UNTESTED = {
}


def sources(srcdir):
    """Every src/<prog>/**.c, as paths relative to src/ ("gateway/a/m.c")."""
    out = []
    top = os.path.join(srcdir, "src")
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".c"):
                rel = os.path.relpath(os.path.join(root, f), top)
                if os.sep in rel:  # a file of a program, not of src/ itself
                    out.append(rel.replace(os.sep, "/"))
    return out


def part_of(srcdir, rel):
    """A part of a module (tests/check_layers.py's PARTS: trace_conf.c, the
    tracing's settings, is a part of trace): "P/a/m.c" of its module, whose
    test is its test; None for a module of its own."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import check_layers
    d, f = os.path.split(rel)
    owner = check_layers.PARTS.get(rel.split("/")[0], {}).get(f[:-2])
    return os.path.join(d, owner + ".c") if owner else None


def test_of(rel, srcdir=None):
    """"P/a/b/m.c" -> "tests/unit/P/a/b/test_m.c" (a part's: its module's)."""
    owner = part_of(srcdir, rel) if srcdir else None
    d, f = os.path.split(owner or rel)
    return "tests/unit/%s/test_%s" % (d, f)


def match(table, rel):
    for pat in table:
        if fnmatch.fnmatchcase(rel, pat):
            return pat
    return None


def names_module(srcdir, reason, rel, pat):
    """The tests/unit/ file a reason names, and whether it names the module
    (its text says <m>.c or <m>.h, or the entry's pattern; or its
    tests/Makemodule.am sources list src/<rel>): (path or None, ok)."""
    m = re.search(r"tests/unit/\S+\.c", reason)
    if not m:
        return None, True
    path = os.path.join(srcdir, m.group(0))
    if not os.path.isfile(path):
        return m.group(0), False
    stem = os.path.splitext(os.path.basename(rel))[0]
    text = open(path, encoding="utf-8", errors="replace").read()
    if stem + ".c" in text or stem + ".h" in text or pat.split("/")[-1] in text:
        return m.group(0), True
    mk = os.path.join(srcdir, "tests", "Makemodule.am")
    mktext = open(mk, encoding="utf-8", errors="replace").read() if os.path.isfile(mk) else ""
    var = re.sub(r"[^A-Za-z0-9]", "_", m.group(0)[:-2]) + "_SOURCES"
    srcs = re.search(r"^%s\s*=((?:.*\\\n)*.*)" % re.escape(var), mktext, re.M)
    return m.group(0), bool(srcs and ("src/" + rel) in srcs.group(1))


def check(srcdir, exempt, untested):
    """TAP results [(status, what, lines)] and the number of failures."""
    srcs = sources(srcdir)
    mk = os.path.join(srcdir, "tests", "Makemodule.am")
    mktext = open(mk, encoding="utf-8", errors="replace").read() if os.path.isfile(mk) else ""
    progs = sorted({s.split("/")[0] for s in srcs})
    out, failed = [], 0
    used_exempt, used_untested = set(), set()
    for prog in progs:
        mine = [s for s in srcs if s.startswith(prog + "/")]
        lines, notes, tested = [], [], 0
        for rel in mine:
            test = test_of(rel, srcdir)
            has = os.path.isfile(os.path.join(srcdir, test))
            pe, pu = match(exempt, rel), match(untested, rel)
            if has:
                tested += 1
                if test[:-2] not in mktext:
                    lines.append("%s exists but tests/Makemodule.am does not register %s: it never runs"
                                 % (test, test[:-2]))
                if pu:
                    used_untested.add(pu)
                    lines.append("src/%s has %s now: take \"%s\" out of UNTESTED (tests/check_mirror.py)"
                                 % (rel, test, pu))
                elif pe and "*" not in pe:
                    used_exempt.add(pe)
                    lines.append("src/%s has %s now: take \"%s\" out of EXEMPT (tests/check_mirror.py)"
                                 % (rel, test, pe))
                elif pe:
                    used_exempt.add(pe)
                continue
            if pe:
                used_exempt.add(pe)
                named, ok = names_module(srcdir, exempt[pe], rel, pe)
                if not ok:
                    lines.append("src/%s is exempt as tested in %s, but that file is missing or does not "
                                 "name the module" % (rel, named))
                continue
            if pu:
                used_untested.add(pu)
                notes.append("no unit test yet (UNTESTED): src/%s -- %s" % (rel, untested[pu]))
                continue
            lines.append("src/%s has no %s: write it (and register it in tests/Makemodule.am), or say in "
                         "EXEMPT (tests/check_mirror.py) why it needs none" % (rel, test))
        if lines:
            failed += 1
            out.append(("not ok", "src/%s: %d file(s), %d without a test or a reason" % (prog, len(mine), len(lines)),
                        lines))
        else:
            out.append(("ok", "src/%s: %d file(s), %d with their own test, %d exempt, %d known gaps"
                        % (prog, len(mine), tested,
                           len(mine) - tested - len(notes), len(notes)), notes))
    stale = ["EXEMPT \"%s\" matches no file of src/ without a test: take it out" % p
             for p in exempt if p not in used_exempt and not p.startswith("*/")]
    stale += ["UNTESTED \"%s\" matches no file of src/: take it out" % p
              for p in untested if p not in used_untested]
    if stale:
        failed += 1
        out.append(("not ok", "%d stale exemption(s)" % len(stale), stale))
    else:
        out.append(("ok", "every exemption names a file that is there", []))
    return out, failed


def plant(tmp, files):
    for name, text in files.items():
        p = os.path.join(tmp, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)


def main():
    srcdir = sys.argv[1] if len(sys.argv) > 1 else os.environ.get(
        "IG_SRCDIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    results, failed = check(srcdir, EXEMPT, UNTESTED)

    # The check itself, over a tree in folders: src/x/a.c and src/x/net/io/b.c
    # have their mirrored tests; src/x/net/c.c has none (its test_c.c sits one
    # folder too high, which does not count); src/x/main.c is exempt.
    with tempfile.TemporaryDirectory() as tmp:
        plant(tmp, {
            "src/x/a.c": "int a;\n",
            "src/x/main.c": "int main(void) { return 0; }\n",
            "src/x/net/io/b.c": "int b;\n",
            "src/x/net/c.c": "int c;\n",
            "tests/unit/x/test_a.c": "",
            "tests/unit/x/net/io/test_b.c": "",
            "tests/unit/x/test_c.c": "",
            "tests/Makemodule.am": "TESTS += tests/unit/x/test_a tests/unit/x/net/io/test_b tests/unit/x/test_c\n",
        })
        res, nfail = check(tmp, {"*/main.c": "the entry"}, {})
        want = [("not ok", ["src/x/net/c.c has no tests/unit/x/net/test_c.c: write it (and register it in "
                            "tests/Makemodule.am), or say in EXEMPT (tests/check_mirror.py) why it needs none"]),
                ("ok", [])]
        got = [(s, lines) for s, _, lines in res]
        if got == want and nfail == 1:
            results.append(("ok", "the check fails a planted module without a test (src/x/net/c.c, its test "
                            "one folder too high) and passes its mirrored, exempt and nested neighbours", []))
        else:
            failed += 1
            results.append(("not ok", "the check missed or misread a planted module without a test", [repr(res)]))

        # Its test written but not registered, and stale entries in both lists.
        plant(tmp, {"tests/unit/x/net/test_c.c": ""})
        res, nfail = check(tmp, {"*/main.c": "the entry", "x/gone.c": "a module since removed"},
                           {"x/net/c.c": "was a gap"})
        got = [(s, lines) for s, _, lines in res]
        want = [("not ok", ["tests/unit/x/net/test_c.c exists but tests/Makemodule.am does not register "
                            "tests/unit/x/net/test_c: it never runs",
                            "src/x/net/c.c has tests/unit/x/net/test_c.c now: take \"x/net/c.c\" out of UNTESTED "
                            "(tests/check_mirror.py)"]),
                ("not ok", ["EXEMPT \"x/gone.c\" matches no file of src/ without a test: take it out"])]
        if got == want and nfail == 2:
            results.append(("ok", "the check fails an unregistered test and stale exemptions", []))
        else:
            failed += 1
            results.append(("not ok", "the check missed an unregistered test or a stale exemption", [repr(res)]))

    print("1..%d" % len(results))
    for n, (status, what, lines) in enumerate(results, 1):
        print("%s %d - %s" % (status, n, what))
        for line in lines:
            print("# " + line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
