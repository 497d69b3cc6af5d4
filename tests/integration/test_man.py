#!/usr/bin/env python3
"""The manual pages (man/*.[158]) and the programs' --help agree, and the
pages render. The pages are written by hand for people; this test is what
keeps them from drifting: every flag --help prints is an item of the page's
option list (and of the right subcommand's), every item there is a flag
--help prints, every configuration key --help names ([file: KEY]) or the
docs/configuring.md's table of every key names is documented in infergate.json(5), and
groff finds nothing to warn about. Needs groff (Debian: groff-base) and
man (Debian: man-db)."""
import os
import re
import shutil
import subprocess

from harness import SRCDIR, binary, run, test

FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
# a flag at the start of a --help line: "  --name METAVAR   help"
HELP_FLAG = re.compile(r"^  (--[a-z0-9][a-z0-9-]*)", re.M)
FILE_KEY = re.compile(r"\[file:\s+([a-z0-9_.]+)\]")
PAGES = ["infergate.8", "infergate-bulk.1", "infergate-sim.1", "infergate.json.5"]
# items end at the next of these
BREAKS = (".TP", ".SS", ".SH", ".PP", ".P", ".LP", ".IP", ".EX", ".SY")


def page_path(name):
    return os.path.join(SRCDIR, "man", name)


def page(name):
    with open(page_path(name)) as f:
        return f.read()


def plain(line):
    """A troff line as a reader sees its words: macro name, quotes, font and
    character escapes removed."""
    if line.startswith("."):
        line = re.sub(r"^\.[A-Za-z]+\s*", "", line).replace('"', "")
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    for esc, ch in (("\\-", "-"), ("\\&", ""), ("\\~", " "), ("\\c", ""), ("\\(aq", "'"), ("\\(dq", '"'),
                    ("\\(lq", '"'), ("\\(rq", '"'), ("\\e", "\\")):
        line = line.replace(esc, ch)
    return line.strip()


def items(src, section, subsection=None):
    """{tag word: body text} of the .TP items of a .SH section (all of it, or
    only one .SS subsection of it). The tag word is the first word of the
    line after .TP: a flag in OPTIONS, a key in infergate.json(5)."""
    found = {}
    sh = ss = None
    lines = [l for l in src.splitlines() if not l.startswith('.\\"')]
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(".SH"):
            sh, ss = plain(line), None
        elif line.startswith(".SS"):
            ss = plain(line)
        elif line.startswith(".TP") and sh == section and (subsection is None or ss == subsection):
            tag = plain(lines[i + 1]).split()
            body = []
            i += 2
            while i < len(lines) and not lines[i].startswith(BREAKS):
                body.append(plain(lines[i]))
                i += 1
            assert tag, f"an empty .TP tag in {section}"
            assert tag[0] not in found, f"{section}: '{tag[0]}' is documented twice"
            found[tag[0]] = " ".join(body)
            continue
        i += 1
    return found


def help_text(*argv):
    p = subprocess.run([binary(argv[0]), *argv[1:], "--help"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p
    return p.stdout


def help_flags(text, prog):
    """The flags --help prints: its option lines, and the modes its usage
    lines give right after the program's name (infergate --hash-key,
    infergate-bulk --merge)."""
    found = set(HELP_FLAG.findall(text))
    found |= set(re.findall(r"(?<![\w-])%s (--[a-z0-9][a-z0-9-]*)" % re.escape(prog), text))
    assert "--help" in found, text
    return found


def help_blocks(text):
    """{flag: its help text on one line}, from the option lines of --help."""
    blocks, flag = {}, None
    for line in text.splitlines():
        m = HELP_FLAG.match(line)
        if m:
            flag = m.group(1)
            blocks[flag] = line
        elif flag and line.startswith("    "):
            blocks[flag] += " " + line.strip()
        else:
            flag = None
    return {f: " ".join(b.split()) for f, b in blocks.items()}


def flag_problems(src, where, text, prog):
    """What differs between the flags --help prints and the items of the
    page's section `where` ((section, subsection)); [] when they agree."""
    documented = set(items(src, *where))
    printed = help_flags(text, prog)
    problems = []
    if printed - documented:
        problems.append(f"missing from the page: {sorted(printed - documented)}")
    if documented - printed:
        problems.append(f"documented but not printed by --help: {sorted(documented - printed)}")
    return problems


def agree(name, where, *argv):
    text = help_text(*argv)
    prog = argv[0]
    problems = flag_problems(page(name), where, text, prog)
    assert not problems, f"man/{name} {where} and `{' '.join(argv)} --help`: " + "; ".join(problems)


def readme_config_keys():
    """The keys of docs/configuring.md's table of every key (its first column)."""
    with open(os.path.join(SRCDIR, "docs", "configuring.md")) as f:
        text = f.read()
    start = text.index("\n## Every key\n")
    end = re.compile(r"^#{1,2} ", re.M).search(text, start + 20)
    keys = set()
    for line in text[start:end.start() if end else len(text)].splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            keys |= set(re.findall(r"`([a-z0-9_.\[\]]+)`", cells[0]))
    keys.discard("Key")
    assert "listen" in keys and "routes" in keys, keys
    return keys


def need_tool(tool, package):
    if not shutil.which(tool):
        raise AssertionError(f"{tool} is not installed (Debian package {package}): the man page tests need it")


# ------------------------------------------------------------------ flags

@test
def gateway_page_documents_every_flag_of_help():
    agree("infergate.8", ("OPTIONS",), "infergate")


@test
def gateway_page_names_the_configuration_key_help_names():
    opts = items(page("infergate.8"), "OPTIONS")
    wrong = []
    for flag, block in help_blocks(help_text("infergate")).items():
        want = FILE_KEY.findall(block)
        got = FILE_KEY.findall(opts.get(flag, ""))
        if want != got:
            wrong.append(f"{flag}: --help says {want}, the page {got}")
    assert not wrong, "man/infergate.8: " + "; ".join(wrong)


@test
def bulk_page_documents_every_flag_of_help():
    agree("infergate-bulk.1", ("OPTIONS",), "infergate-bulk")


@test
def bulk_page_documents_every_flag_of_generate():
    agree("infergate-bulk.1", ("COMMANDS", "generate"), "infergate-bulk", "generate")


@test
def bulk_page_documents_every_flag_of_merge():
    agree("infergate-bulk.1", ("COMMANDS", "merge"), "infergate-bulk", "merge")


@test
def bulk_page_documents_every_flag_of_submit():
    agree("infergate-bulk.1", ("COMMANDS", "submit"), "infergate-bulk", "submit")


@test
def bulk_page_documents_every_flag_of_replay():
    agree("infergate-bulk.1", ("COMMANDS", "replay"), "infergate-bulk", "replay")


@test
def sim_page_documents_every_flag_of_help():
    agree("infergate-sim.1", ("OPTIONS",), "infergate-sim")


@test
def the_check_finds_a_flag_missing_from_the_page():
    # the comparison itself can fail: the sim page without its --seed item,
    # and with an item for a flag no program has
    src = page("infergate-sim.1")
    text = help_text("infergate-sim")
    assert flag_problems(src, ("OPTIONS",), text, "infergate-sim") == []
    cut = re.sub(r"\.TP\n\\fB\\-\\-seed\\fR.*?(?=\n\.TP)", "", src, count=1, flags=re.S)
    assert cut != src, "no --seed item to remove"
    problems = flag_problems(cut, ("OPTIONS",), text, "infergate-sim")
    assert problems == ["missing from the page: ['--seed']"], problems
    extra = src.replace(".SH SIGNALS", ".TP\n.B \\-\\-no\\-such\\-flag\nNothing.\n.SH SIGNALS")
    problems = flag_problems(extra, ("OPTIONS",), text, "infergate-sim")
    assert problems == ["documented but not printed by --help: ['--no-such-flag']"], problems


# ------------------------------------------------------------------ configuration keys

@test
def config_page_documents_every_key():
    src = page("infergate.json.5")
    keys, backends = set(items(src, "KEYS")), set(items(src, "BACKENDS"))
    in_help = set(FILE_KEY.findall(" ".join(help_blocks(help_text("infergate")).values())))
    in_readme = readme_config_keys()
    entry = {k.split("].", 1)[1] for k in in_readme if k.startswith("backends[].")}
    top = {k for k in in_readme if "[" not in k} | in_help
    missing = sorted(top - keys) + sorted("backends[]." + k for k in entry - backends)
    assert not missing, f"man/infergate.json.5 does not document {missing}"
    unknown = keys - top
    assert not unknown, f"man/infergate.json.5 documents {sorted(unknown)}, neither --help nor docs/configuring.md has them"
    assert {"url", "discover", "weight", "max_inflight", "models"} <= backends, backends


@test
def config_page_documents_every_field_of_a_key():
    # --help lists the fields of a JSON keys-file entry: {"keys": [{"name", ...}]}
    block = help_blocks(help_text("infergate"))["--api-keys-file"]
    fields = set(re.findall(r'"([a-z0-9_]+)"', block.split("[{", 1)[1].split("}]", 1)[0]))
    assert {"name", "sha256", "rpm"} <= fields, block
    documented = set(items(page("infergate.json.5"), "KEYS FILE"))
    assert documented == fields, f"KEYS FILE documents {sorted(documented)}, --help lists {sorted(fields)}"


# ------------------------------------------------------------------ rendering

@test
def every_page_is_installed():
    with open(os.path.join(SRCDIR, "man", "Makemodule.am")) as f:
        installed = re.search(r"dist_man_MANS\s*=\s*((?:.*\\\n)*.*)", f.read()).group(1)
    assert sorted(os.path.basename(p) for p in installed.replace("\\\n", " ").split()) == sorted(PAGES), installed


@test
def pages_render_without_warnings():
    need_tool("groff", "groff-base")
    for name in PAGES:
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", page_path(name)],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and not p.stderr, f"groff on man/{name}: {p.returncode}\n{p.stderr}"


@test
def man_reads_every_page():
    need_tool("man", "man-db")
    env = dict(os.environ, MANWIDTH="100", MANPAGER="cat", PAGER="cat")
    for name in PAGES:
        p = subprocess.run(["man", "-l", page_path(name)], capture_output=True, text=True, timeout=30, env=env)
        assert p.returncode == 0, f"man -l man/{name}: {p.returncode}\n{p.stderr}"
        assert "NAME" in p.stdout and "SEE ALSO" in p.stdout, p.stdout[:500]


if __name__ == "__main__":
    run()
