"""The chat conversations the template and tokenizer references are checked on
(test_chattmpl_ref.py renders them, test_tokenizer_ref.py tokenizes what they
render to): 1,000 of them, seeded, the same every run; and a renderer's run
over them (igtmpl or the node reference: JSON lines in, a prompt or an error
out per line). Not a test file."""
import json
import os
import random
import subprocess

COUNT = 1000

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


