#!/usr/bin/env python3
"""The hand-written flag tables of docs/ and the programs' --help agree: --help
comes from the flag tables in the sources (the flag library), and this test is
what keeps the explained tables honest (docs/reference/ is generated from the
same tables and checked by test_reference.py). Every flag --help prints is
documented in its section of docs/, and every flag a table there names is one
--help prints."""
import os
import re
import subprocess

from harness import binary, run, test

FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
# a flag at the start of a --help line: "  --name METAVAR   help"
HELP_FLAG = re.compile(r"^  (--[a-z0-9][a-z0-9-]*)", re.M)


def doc_section(page, title):
    src = os.environ.get("IG_SRCDIR") or os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(src, "docs", page)) as f:
        text = "\n" + f.read()  # a title on the first line is found like any other
    start = text.index("\n" + title + "\n") + 1
    level = len(title) - len(title.lstrip("#"))
    # the section runs to the next heading of the same or a higher level
    # (a line starting with '#' inside a code block is no heading)
    heading = re.compile(r"^```.*?^```|^#{1,%d} " % level, re.M | re.S)
    pos = start + len(title)
    while True:
        end = heading.search(text, pos)
        if not end or not end.group(0).startswith("```"):
            break
        pos = end.end()
    return text[start:end.start() if end else len(text)]


def table_flags(section, column):
    """Flags named in the given column of the section's table rows."""
    flags = set()
    for line in section.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > column:
            flags |= set(FLAG.findall(cells[column]))
    return flags


def help_flags(*argv):
    p = subprocess.run([binary(argv[0]), *argv[1:], "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p
    found = set(HELP_FLAG.findall(p.stdout))
    assert "--help" in found, p.stdout
    return found


def agree(page, section_title, column, *argv):
    section = doc_section(page, section_title)
    in_table = table_flags(section, column)
    assert in_table, f"no flags found in the table of '{section_title}'"
    in_help = help_flags(*argv)
    undocumented = in_help - set(FLAG.findall(section))
    assert not undocumented, f"{' '.join(argv)} --help lists {sorted(undocumented)}, '{section_title}' does not"
    unknown = in_table - in_help
    assert not unknown, f"'{section_title}' documents {sorted(unknown)}, {' '.join(argv)} --help does not"


@test
def gateway_configuration_table_matches_help():
    agree("configuring.md", "## Every key", 1, "infergate")


@test
def bulk_reference_table_matches_help():
    agree("bulk-runs.md", "## infergate-bulk reference", 0, "infergate-bulk")


@test
def bulk_submit_table_matches_help():
    agree("bulk-runs.md", "## infergate-bulk submit reference", 0, "infergate-bulk", "submit")


@test
def sim_reference_table_matches_help():
    agree("simulator.md", "# The simulator: infergate-sim", 0, "infergate-sim")


@test
def the_check_finds_a_flag_missing_from_help():
    # the comparison itself can fail: a table line naming a flag no program has
    section = "| `--no-such-flag` | | |\n"
    assert table_flags(section, 0) == {"--no-such-flag"}
    assert "--no-such-flag" not in help_flags("infergate-sim")


run()
