#!/usr/bin/env python3
"""The documentation holds together: README.md stays a landing page (250
lines at most); every relative link and #anchor in README.md and docs/
resolves (the file exists, the anchor is a heading's GitHub slug there); every
shell block says whether a test runs it (the line before it names the test, or
says "not run" and why); and the blocks marked as run by this file are run."""
import os
import re
import shutil
import subprocess
import tempfile

from harness import BUILDDIR, SRCDIR, binary, test, run

LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")
SHELL = ("sh", "console", "bash")
ME = "tests/integration/test_docs.py"


def pages():
    out = [os.path.join(SRCDIR, "README.md")]
    for root, _, files in os.walk(os.path.join(SRCDIR, "docs")):
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".md")]
    return out


def rel(path):
    return os.path.relpath(path, SRCDIR)


def blocks(text):
    """(info string, first line number, the block's lines, the lines before it) per fenced block."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info, start = lines[i][3:].strip(), i
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((info, start + 1, lines[i + 1:j], lines[:start]))
            i = j + 1
        else:
            i += 1
    return out


def prose(text):
    """The text without fenced blocks and inline code (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slugs(text):
    """GitHub's anchors of a page's headings: lower case, punctuation dropped,
    spaces to hyphens, -1, -2 ... for repeats."""
    seen, out = {}, set()
    for line in prose(text).split("\n"):
        m = re.match(r"^#{1,6} (.*)", line)
        if not m:
            continue
        s = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(path, text):
    bad = []
    for m in LINK.finditer(prose(text)):
        target = m.group(2)
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto: are not checked here
        file, _, anchor = target.partition("#")
        if not file:  # an anchor of this page
            if anchor not in slugs(text):
                bad.append(f"{rel(path)}: {target}: no heading '#{anchor}' here")
            continue
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file))
        if not os.path.exists(dest):
            bad.append(f"{rel(path)}: {target}: no file {rel(dest)}")
            continue
        if anchor:
            with open(dest) as f:
                if anchor not in slugs(f.read()):
                    bad.append(f"{rel(path)}: {target}: no heading '#{anchor}' in {rel(dest)}")
    return bad


@test
def readme_is_at_most_250_lines():
    with open(os.path.join(SRCDIR, "README.md")) as f:
        n = len(f.read().splitlines())
    assert n <= 250, f"README.md has {n} lines (at most 250: move the detail to docs/)"


@test
def every_link_in_readme_and_docs_resolves():
    bad, seen = [], 0
    for p in pages():
        with open(p) as f:
            text = f.read()
        seen += len(LINK.findall(prose(text)))
        bad += broken_links(p, text)
    assert seen > 20, f"only {seen} links found: the check is not reading the pages"
    assert not bad, "\n".join(bad)


@test
def the_link_check_finds_a_broken_link_and_anchor():
    # the check itself can fail: a missing file, and an anchor that is no heading
    page = os.path.join(SRCDIR, "docs", "x.md")
    text = "# A title\n\n## HTTPS and the admin listener\n\n[a](nowhere.md) [b](#no-such) [c](#https-and-the-admin-listener)\n"
    bad = broken_links(page, text)
    assert len(bad) == 2 and "nowhere.md" in bad[0] and "#no-such" in bad[1], bad


@test
def every_shell_block_says_whether_a_test_runs_it():
    bad, n = [], 0
    for p in pages():
        with open(p) as f:
            text = f.read()
        for info, line, _, before in blocks(text):
            if info not in SHELL:
                continue
            n += 1
            prev = next((l for l in reversed(before) if l.strip()), "")
            named = re.findall(r"(tests/[\w/]+\.py|\.ci/run|etc/container/test-image\.sh)", prev)
            if "not run" in prev.lower():
                continue
            if named and all(os.path.exists(os.path.join(SRCDIR, x)) for x in named):
                continue
            bad.append(f"{rel(p)}:{line}: a ```{info} block with no note before it of the test that runs it or "
                       f"'not run by the tests: why' (the line before: {prev[:80]!r})")
    assert n >= 8, f"only {n} shell blocks found"
    assert not bad, "\n".join(bad)


@test
def the_blocks_marked_as_run_here_run():
    # run in a directory that looks like a build from a checkout: the
    # programs in it, etc/ beside them
    ran = 0
    with tempfile.TemporaryDirectory() as d:
        for name in ("infergate", "infergate-bulk", "infergate-sim"):
            os.symlink(binary(name), os.path.join(d, name))
        os.symlink(os.path.join(SRCDIR, "etc"), os.path.join(d, "etc"))
        for p in pages():
            with open(p) as f:
                text = f.read()
            for info, line, body, before in blocks(text):
                prev = next((l for l in reversed(before) if l.strip()), "")
                if ME not in prev:
                    continue
                r = subprocess.run(["sh", "-eu", "-c", "\n".join(body)], cwd=d, capture_output=True,
                                   text=True, timeout=60)
                assert r.returncode == 0, f"{rel(p)}:{line}: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}"
                ran += 1
    assert ran >= 1, "no block is marked as run by " + ME


run()
