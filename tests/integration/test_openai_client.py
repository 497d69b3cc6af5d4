"""The official OpenAI client (npm package `openai`), unmodified, against the
gateway: a chat completion, a streamed chat completion, a completion and a
models list. The package is installed from the npm registry on first use
into the build tree (OPENAI_NPM_VERSION pins it; v6 runs on Node.js 20)."""

import json
import os
import subprocess

from harness import BUILDDIR, SRCDIR, http_json, run, start_gateway, start_sims, test, wait_until

VERSION = os.environ.get("OPENAI_NPM_VERSION", "6.49.0")
PREFIX = os.path.join(BUILDDIR, "tests", "node-deps")


def ensure_openai():
    mod = os.path.join(PREFIX, "node_modules", "openai")
    if not os.path.isdir(mod):
        os.makedirs(PREFIX, exist_ok=True)
        p = subprocess.run(["npm", "install", "--no-save", "--no-audit", "--no-fund", "--prefix", PREFIX,
                            f"openai@{VERSION}"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"npm install openai@{VERSION} failed:\n{p.stderr[-2000:]}"
    return os.path.join(PREFIX, "node_modules")


@test
def official_openai_client_works_unmodified():
    node_path = ensure_openai()
    sims = start_sims(3, "--model", "sim-model", "--tokens-per-second", "500", "--ttft-ms", "5")
    gw = start_gateway(sims)
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    p = subprocess.run(["node", os.path.join(SRCDIR, "tests", "integration", "openai_client.cjs"),
                        gw.url, "sim-model"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "NODE_PATH": node_path})
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["chat"]["object"] == "chat.completion" and out["chat"]["content"], out
    assert out["chat"]["usage"]["completion_tokens"] == 12, out
    assert out["stream"]["text"] and out["stream"]["chunks"] >= 12, out
    assert out["stream"]["usage"]["completion_tokens"] == 12, out
    assert out["completion"]["object"] == "text_completion" and out["completion"]["text"], out
    assert out["completion"]["usage"]["completion_tokens"] == 7, out
    assert out["models"] == ["sim-model"], out
    # The backend's 400 reaches the client as the SDK's BadRequestError.
    assert out["error"] == {"status": 400, "name": "BadRequestError"}, out


run()
