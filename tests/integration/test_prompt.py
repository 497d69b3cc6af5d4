#!/usr/bin/env python3
"""The models' tokenizers in the gateway (src/gateway/sched/prompt.c): /tokenize answered by the
gateway itself in vLLM's shape for a model whose tokenizer.json it holds (forwarded for the
others), a key's tpm charged the exact prompt count instead of the 4-bytes estimate, and a bad
tokenizer refused at start naming models[i]. The fixture (tests/fixtures/prompt) is a byte-level
tokenizer without merges: a byte is its own id, <|im_start|> 256, <|im_end|> 257, a ChatML-like
template beside it."""
import hashlib
import json
import os
import subprocess
import tempfile

from harness import (SRCDIR, binary, http_json, run, sim_requests, start_gateway, start_sim, test, wait_until)

TOK = os.path.join(SRCDIR, "tests", "fixtures", "prompt", "tokenizer.json")
FAST = ("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")


@test
def test_tokenize_is_answered_by_the_gateway():
    sim = start_sim(*FAST)
    gw = start_gateway([sim], "--tokenizer", f"sim-model={TOK}")
    wait_until(lambda: http_json("GET", gw.url + "/health")[0] == 200, what="a healthy backend")
    before = sim_requests(sim)
    st, _, obj = http_json("POST", gw.url + "/tokenize", {"model": "sim-model", "prompt": "hi<|im_end|>"})
    assert st == 200 and obj == {"count": 3, "tokens": [104, 105, 257]}, (st, obj)
    st, _, obj = http_json("POST", gw.url + "/tokenize",
                           {"model": "sim-model", "messages": [{"role": "user", "content": "a"}]})
    # <|im_start|>user\na<|im_end|>\n then the generation prompt <|im_start|>assistant\n
    want = [256, *b"user\na", 257, 10, 256, *b"assistant\n"]
    assert st == 200 and obj["tokens"] == want and obj["count"] == len(want), (st, obj)
    assert sim_requests(sim) == before, "the simulator was asked"


@test
def test_tokenize_for_a_model_without_tokenizer_goes_to_its_backend():
    sim = start_sim(*FAST)
    gw = start_gateway([sim])
    wait_until(lambda: http_json("GET", gw.url + "/health")[0] == 200, what="a healthy backend")
    st, _, obj = http_json("POST", gw.url + "/tokenize", {"model": "sim-model", "prompt": "abcdefgh"})
    assert st == 200 and obj.get("count") == 2, (st, obj)  # the simulator's: 4 bytes a token


def keys(entries):
    d = tempfile.mkdtemp(prefix="ig-prompt-")
    path = os.path.join(d, "keys.json")
    with open(path, "w") as f:
        json.dump({"keys": [{"name": e["name"], "sha256": hashlib.sha256(e["key"].encode()).hexdigest(),
                             "tpm": e["tpm"]} for e in entries]}, f)
    return path


@test
def test_tpm_charges_the_exact_prompt():
    """400 bytes of text: 100 tokens at the 4-bytes estimate, 400 in the model's own tokens.
    With a tpm of 300, the request fits the estimate but not its real count: with the tokenizer
    the gateway refuses it (429 naming 401 tokens), without it, it is admitted."""
    sim = start_sim(*FAST)
    path = keys([{"name": "k", "key": "secret-k", "tpm": 300}])
    body = {"model": "sim-model", "prompt": "y" * 400, "max_tokens": 1}
    auth = {"Authorization": "Bearer secret-k"}
    gw = start_gateway([sim], "--api-keys-file", path, "--tokenizer", f"sim-model={TOK}")
    wait_until(lambda: http_json("GET", gw.url + "/health")[0] == 200, what="a healthy backend")
    st, _, obj = http_json("POST", gw.url + "/v1/completions", body, auth)
    assert st == 429 and "Requested 401" in obj["error"]["message"], (st, obj)
    gw2 = start_gateway([sim], "--api-keys-file", path)
    wait_until(lambda: http_json("GET", gw2.url + "/health")[0] == 200, what="a healthy backend")
    st, _, obj = http_json("POST", gw2.url + "/v1/completions", body, auth)
    assert st == 200, (st, obj)


@test
def test_a_bad_tokenizer_is_refused_at_start():
    missing = subprocess.run([binary("infergate"), "--backend", "http://127.0.0.1:9", "--tokenizer",
                              "m=/nonexistent/tokenizer.json"], capture_output=True, text=True, timeout=10)
    assert missing.returncode == 2, missing
    assert "models[0].tokenizer: '/nonexistent/tokenizer.json': No such file or directory" in missing.stderr, \
        missing.stderr
    bad = subprocess.run([binary("infergate"), "--backend", "http://127.0.0.1:9", "--tokenizer",
                          f"m={os.path.join(os.path.dirname(TOK), 'tokenizer_config.json')}"],
                         capture_output=True, text=True, timeout=10)
    assert bad.returncode != 0 and "models[0].tokenizer: '" in bad.stderr, bad
    form = subprocess.run([binary("infergate"), "--backend", "http://127.0.0.1:9", "--tokenizer", "nopath"],
                          capture_output=True, text=True, timeout=10)
    assert form.returncode == 2 and "--tokenizer: 'nopath' is not MODEL=PATH" in form.stderr, form.stderr


if __name__ == "__main__":
    run()
