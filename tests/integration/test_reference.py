#!/usr/bin/env python3
"""docs/reference/ is what the code would write: build-aux/gen-reference.sh
runs each program's hidden --help-markdown (its flag table: names, file keys,
defaults, metavars, help) into a temporary directory, and every file must
equal the checked-in one, so the reference cannot drift from the code (a
changed default, a new flag, a reworded help). `make docs-reference` writes
them."""
import difflib
import os
import subprocess
import tempfile

from harness import BUILDDIR, SRCDIR, binary, test, run

FILES = ("infergate.md", "infergate-bulk.md", "infergate-sim.md")


def generate(out):
    for name in ("infergate", "infergate-bulk", "infergate-sim"):
        binary(name)  # built, or a clear failure
    p = subprocess.run(["sh", os.path.join(SRCDIR, "build-aux", "gen-reference.sh"), BUILDDIR, out],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def differences(made_dir, checked_dir):
    """The files of checked_dir that differ from made_dir's, with a diff each."""
    out = []
    for f in FILES:
        with open(os.path.join(made_dir, f)) as a:
            made = a.read().splitlines(keepends=True)
        try:
            with open(os.path.join(checked_dir, f)) as b:
                checked = b.read().splitlines(keepends=True)
        except FileNotFoundError:
            out.append(f"docs/reference/{f} is missing")
            continue
        if made != checked:
            diff = "".join(difflib.unified_diff(checked, made, f"docs/reference/{f}", "the code's", n=0))
            out.append(diff[:3000])
    return out


@test
def the_checked_in_reference_is_what_the_code_writes():
    with tempfile.TemporaryDirectory() as d:
        generate(d)
        diffs = differences(d, os.path.join(SRCDIR, "docs", "reference"))
        assert not diffs, "docs/reference/ differs from the flag tables (run make docs-reference):\n" + "\n".join(diffs)


@test
def every_flag_of_help_is_in_the_reference():
    # the Markdown printer and --help walk the same table: the same flags
    import re
    for prog, argv in (("infergate", []), ("infergate-bulk", []), ("infergate-bulk", ["submit"]),
                       ("infergate-bulk", ["generate"]), ("infergate-bulk", ["merge"]), ("infergate-bulk", ["replay"]),
                       ("infergate-sim", [])):
        h = subprocess.run([binary(prog), *argv, "--help"], capture_output=True, text=True, timeout=10).stdout
        m = subprocess.run([binary(prog), *argv, "--help-markdown"], capture_output=True, text=True, timeout=10)
        assert m.returncode == 0, m
        in_help = set(re.findall(r"^  (--[a-z0-9-]+)", h, re.M))
        in_md = set(re.findall(r"^\| `(--[a-z0-9-]+)`", m.stdout, re.M))
        assert in_help and in_help == in_md, (prog, argv, in_help ^ in_md)


@test
def the_check_fails_on_a_changed_default():
    # the comparison itself can fail: a copy of the checked-in reference with
    # one default changed (the gateway's queue_size, 16384) is caught
    with tempfile.TemporaryDirectory() as made, tempfile.TemporaryDirectory() as doctored:
        generate(made)
        for f in FILES:
            with open(os.path.join(made, f)) as a, open(os.path.join(doctored, f), "w") as b:
                b.write(a.read())
        assert not differences(made, doctored)
        path = os.path.join(doctored, "infergate.md")
        with open(path) as f:
            text = f.read()
        row = "| `--queue-size` | `queue_size` | `16384` |"
        assert row in text, "the queue_size row is not where this test expects it"
        with open(path, "w") as f:
            f.write(text.replace(row, "| `--queue-size` | `queue_size` | `8192` |"))
        diffs = differences(made, doctored)
        assert len(diffs) == 1 and "16384" in diffs[0] and "8192" in diffs[0], diffs


run()
