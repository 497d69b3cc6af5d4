#!/usr/bin/env python3
"""Claude Code (@anthropic-ai/claude-code on npm) in print mode (`claude -p`) with
ANTHROPIC_BASE_URL at the gateway and a key of the gateway's keys file, answered by simulators:
each run ends with exit code 0 and a result that is no error, every /v1/messages request of a
session (a first prompt, then --continue, twice) is answered 200 by ONE backend, with the
`session` policy and with `cache-aware`, and a key the gateway does not know makes Claude Code
fail.

What Claude Code 2.1.337 sends (recorded through a proxy, and read in its binary):
  POST /v1/messages?beta=true, streamed ("stream": true), with anthropic-beta (claude-code-20250219,
  context-management-2025-06-27, ...), x-api-key, X-Claude-Code-Session-Id; in the body
  thinking {"type": "adaptive"}, context_management {"edits": [{"type": "clear_thinking_20251015"}]},
  output_config {"effort": "high"}, cache_control on system and message blocks, tools with
  defer_loading, and a role "system" turn after the first user turn (its environment, beta
  mid-conversation-system). It calls no /v1/messages/count_tokens in print mode.
  metadata.user_id is a JSON text: {"device_id": "<64 hex, one per config dir>", "account_uuid":
  "", "session_id": "<the session's uuid>"}; --continue resumes the session under the same
  session_id, so one session is one key for the gateway's session and cache-aware policies.

Claude Code is a native binary in the npm package (bin/claude.exe, copied from the platform's
optional package @anthropic-ai/claude-code-linux-x64 by its postinstall); it needs no node.
CLAUDE_CODE_NPM_VERSION pins it."""
import json
import os
import shutil
import subprocess
import tempfile

from harness import (BUILDDIR, FakeBackend, ensure_npm, http_json, keys_file, run, start_gateway, start_sim, test,
                     wait_until, written_lines)

CLAUDE_CODE_NPM_VERSION = os.environ.get("CLAUDE_CODE_NPM_VERSION", "2.1.337")
FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "1000")
PROMPTS = ["Say hello.", "Now say it again, louder.", "And once more, in a whisper."]


def claude_binary():
    """The claude executable, installed on first use (a few hundred MB: the binary)."""
    nm = ensure_npm(os.path.join(BUILDDIR, "tests", "node-deps-claude-code"),
                    [f"@anthropic-ai/claude-code@{CLAUDE_CODE_NPM_VERSION}"], timeout=600)
    # The platform package's binary, which is there whether or not npm ran the wrapper's
    # postinstall (npm 11 asks for install scripts to be allowed); bin/claude.exe otherwise.
    import platform
    arch = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    exe = os.path.join(nm, "@anthropic-ai", f"claude-code-linux-{arch}", "claude")
    if not os.path.exists(exe):
        exe = os.path.join(nm, "@anthropic-ai", "claude-code", "bin", "claude.exe")
    p = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60,
                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.mkdtemp()})
    assert p.returncode == 0 and CLAUDE_CODE_NPM_VERSION in p.stdout, (p.returncode, p.stdout, p.stderr[-2000:])
    return exe


def claude(exe, gw_url, key, home, workdir, prompt, *flags, timeout=180):
    """One `claude -p PROMPT --output-format json` run: (exit code, its JSON result or None,
    stderr). The environment is built from nothing, so no real config, key or proxy leaks in.
    The names it reads (found in the binary's text): ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY
    (sent as x-api-key), ANTHROPIC_MODEL and ANTHROPIC_SMALL_FAST_MODEL /
    ANTHROPIC_DEFAULT_HAIKU_MODEL (so every request names the simulators' model),
    CLAUDE_CONFIG_DIR (its settings and sessions; HOME too, for ~/.claude.json),
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, DISABLE_TELEMETRY, DISABLE_AUTOUPDATER,
    DISABLE_ERROR_REPORTING (nothing goes anywhere but the gateway: the machine has no other
    network), and API_TIMEOUT_MS with CLAUDE_CODE_MAX_RETRIES so a refusal ends the run
    soon instead of after ten retries."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "CLAUDE_CONFIG_DIR": os.path.join(home, ".claude"),
           "ANTHROPIC_BASE_URL": gw_url, "ANTHROPIC_API_KEY": key,
           "ANTHROPIC_MODEL": "sim-model", "ANTHROPIC_SMALL_FAST_MODEL": "sim-model",
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": "sim-model", "ANTHROPIC_DEFAULT_SONNET_MODEL": "sim-model",
           "ANTHROPIC_DEFAULT_OPUS_MODEL": "sim-model",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
           "API_TIMEOUT_MS": "60000", "CLAUDE_CODE_MAX_RETRIES": "1"}
    p = subprocess.run([exe, "-p", prompt, "--output-format", "json", *flags], cwd=workdir, env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    try:
        result = json.loads(p.stdout)
    except ValueError:
        result = None
    return p.returncode, result, p.stderr


def gateway(sims, policy, log):
    """A gateway in front of sims with one key in its keys file and an access log: (gateway,
    the key)."""
    d = tempfile.mkdtemp(prefix="ig-cc-")
    path = os.path.join(d, "keys.json")
    (auth,) = keys_file(path, "claude-code")
    cfg = {"backends": [s.url for s in sims], "api_keys_file": path, "access_log": log}
    cpath = os.path.join(d, "gw.json")
    with open(cpath, "w") as f:
        json.dump(cfg, f)
    gw = start_gateway([], *QUICK_HEALTH, "--policy", policy, config=cpath)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == len(sims),
               what="backends up")
    return gw, auth["Authorization"][len("Bearer "):]


def messages_lines(log):
    return [x for x in written_lines(log) if x["path"].split("?")[0] == "/v1/messages"]


def one_session_on_one_backend(policy):
    exe = claude_binary()  # before any process starts: npm may take a while the first time
    sims = [start_sim("--flavor", "sglang", *FAST) for _ in range(3)]
    log = os.path.join(tempfile.mkdtemp(prefix="ig-cc-"), "access.log")
    gw, key = gateway(sims, policy, log)
    home = tempfile.mkdtemp(prefix="ig-cc-home-")
    work = tempfile.mkdtemp(prefix="ig-cc-work-")
    try:
        sessions = []
        for i, prompt in enumerate(PROMPTS):
            rc, res, err = claude(exe, gw.url, key, home, work, prompt, *(("--continue",) if i else ()))
            assert rc == 0 and res is not None, (policy, i, rc, res, err[-3000:])
            assert res["is_error"] is False and res["subtype"] == "success" and res["result"], (policy, i, res)
            sessions.append(res["session_id"])
        # --continue carries on the same session (the same id in metadata.user_id)
        assert len(set(sessions)) == 1, sessions
        # every request of the three runs is in the log (written after each answer ends)
        lines = wait_until(lambda: (lambda v: v if len(v) >= len(PROMPTS) else None)(messages_lines(log)),
                           what="the runs' requests in the access log")
        assert all(x["status"] == 200 and x["key"] == "claude-code" for x in lines), \
            [(x["path"], x["status"], x["key"]) for x in lines]
        backends = {x["backend"] for x in lines}
        assert len(backends) == 1, (policy, [(x["path"], x["backend"]) for x in lines])
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    return gw, exe


@test
def a_claude_code_session_stays_on_one_backend_with_the_session_policy():
    """Three `claude -p` runs (the second and third --continue) through a gateway with
    --policy session: each ends with code 0 and no error, and all their requests, answered
    200, went to one of the three simulators (metadata.user_id carries the session)."""
    one_session_on_one_backend("session")


@test
def a_claude_code_session_stays_on_one_backend_with_the_cache_aware_policy():
    """The same with --policy cache-aware: the session's prompts share their prefix and its
    key, so they go where the prefix is."""
    gw, exe = one_session_on_one_backend("cache-aware")
    # a key the gateway does not know: Claude Code ends in error (401 authentication_error)
    home, work = tempfile.mkdtemp(prefix="ig-cc-home-"), tempfile.mkdtemp(prefix="ig-cc-work-")
    try:
        rc, res, err = claude(exe, gw.url, "sk-not-ours", home, work, PROMPTS[0])
        assert rc != 0 or (res and res["is_error"]), (rc, res, err[-2000:])
        assert res is None or res.get("api_error_status") == 401, res
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def relay_to(sim):
    """A FakeBackend handler that passes each request on to sim and its answer back whole
    (a stream too: Claude Code reads it the same), so the test sees the bodies the gateway
    forwarded."""
    import urllib.error
    import urllib.request

    def handler(fb, req, sock):
        hdrs = {k: v for k, v in req["headers"] if k.lower() in ("content-type", "anthropic-version", "anthropic-beta")}
        r = urllib.request.Request(sim.url + req["path"], data=req["body"] or None, method=req["method"], headers=hdrs)
        try:
            with urllib.request.urlopen(r, timeout=60) as resp:
                st, ctype, body = resp.status, resp.headers.get("content-type", "application/json"), resp.read()
        except urllib.error.HTTPError as e:
            st, ctype, body = e.code, e.headers.get("content-type", "application/json"), e.read()
        FakeBackend.reply(sock, st, body, ctype)
    return handler


@test
def claude_code_sends_its_session_in_metadata_user_id():
    """What the comment at the top says Claude Code sends, seen by a server behind the gateway:
    streamed /v1/messages only (no count_tokens), the fields the translation accepts for it,
    and metadata.user_id a JSON text whose session_id is the run's, the same after --continue."""
    exe = claude_binary()
    sim = start_sim("--flavor", "sglang", *FAST)
    fake = FakeBackend(relay_to(sim))
    log = os.path.join(tempfile.mkdtemp(prefix="ig-cc-"), "access.log")
    gw, key = gateway([fake], "session", log)
    home, work = tempfile.mkdtemp(prefix="ig-cc-home-"), tempfile.mkdtemp(prefix="ig-cc-work-")
    try:
        results = []
        for i, prompt in enumerate(PROMPTS[:2]):
            rc, res, err = claude(exe, gw.url, key, home, work, prompt, *(("--continue",) if i else ()))
            assert rc == 0 and res and res["is_error"] is False, (i, rc, res, err[-3000:])
            results.append(res)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    posts = fake.posts()
    assert [r["path"].split("?")[0] for r in posts] == ["/v1/messages"] * len(posts), [r["path"] for r in posts]
    bodies = [json.loads(r["body"]) for r in posts]
    assert len(bodies) >= 2 and all(b["stream"] is True for b in bodies), [b.get("stream") for b in bodies]
    users = [json.loads(b["metadata"]["user_id"]) for b in bodies]
    assert {u["session_id"] for u in users} == {results[0]["session_id"]} == {results[1]["session_id"]}, \
        (users, [r["session_id"] for r in results])
    assert len({b["metadata"]["user_id"] for b in bodies}) == 1, users  # device_id too: one key
    first = bodies[0]
    assert "context_management" in first and "thinking" in first, sorted(first)
    assert any(m["role"] == "system" for m in first["messages"]), [m["role"] for m in first["messages"]]


if __name__ == "__main__":
    run()
