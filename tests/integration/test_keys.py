"""Named API keys with real processes: the JSON keys file (names, limits,
allowed models, disabled keys), rate limits as OpenAI states them (429 with
Retry-After and the x-ratelimit-* headers; the official npm client's own
retries get through), token accounting that matches what the simulators
counted, and keys never shown in logs, metrics or admin views. What a user
sees: statuses, headers, bodies, counters, exit codes and messages."""

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import tempfile
import threading
import time

from harness import (assert_openai_error, binary, chat_body, ensure_openai, http, http_json, metric, parallel, run,
                     run_client, sim_requests, start_gateway, start_sim, test, wait_until)

FAST = ("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")
ADMIN_KEY = "admin-secret-key"


def digest(key):
    return hashlib.sha256(key.encode()).hexdigest()


def keys_dir(entries):
    """A directory with keys.json (entries: dicts with "key" instead of
    "sha256") and admin.keys; returns (dir, path of keys.json)."""
    d = tempfile.mkdtemp(prefix="ig-keys-")
    path = os.path.join(d, "keys.json")
    write_keys(path, entries)
    with open(os.path.join(d, "admin.keys"), "w") as f:
        f.write(digest(ADMIN_KEY) + "\n")
    return d, path


def write_keys(path, entries):
    out = []
    for e in entries:
        e = dict(e)
        e["sha256"] = digest(e.pop("key"))
        out.append(e)
    with open(path + ".tmp", "w") as f:
        json.dump({"keys": out}, f)
    os.replace(path + ".tmp", path)


def gateway(sims, entries, *extra):
    d, path = keys_dir(entries)
    gw = start_gateway(sims, "--api-keys-file", path, "--admin-keys-file", os.path.join(d, "admin.keys"),
                       "--access-log", os.path.join(d, "access.log"), *extra)
    gw.keys_path = path
    gw.access_log = os.path.join(d, "access.log")
    wait_until(lambda: http_json("GET", gw.url + "/health")[0] == 200, timeout=10, what="a healthy backend")
    return gw


def bearer(key):
    return {"Authorization": f"Bearer {key}"}


def chat(gw, key, prompt="hi", **extra):
    return http_json("POST", gw.url + "/v1/chat/completions", chat_body(prompt, **extra), bearer(key))


def reset_ms(v):
    """An x-ratelimit-reset-* value ("20ms", "1s", "8.64s", "6m0s") in ms."""
    m = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:(\d+)ms)?", v)
    assert m and v, v
    h, mi, s, ms = m.groups()
    return (int(h or 0) * 3600 + int(mi or 0) * 60 + float(s or 0)) * 1000 + int(ms or 0)


@test
def rpm_burst_gets_its_limit_then_429s_with_openai_headers():
    sim = start_sim(*FAST)
    gw = gateway([sim], [{"name": "burst", "key": "k-burst", "rpm": 60}, {"name": "free", "key": "k-free"}])
    t0 = time.monotonic()
    results = parallel(lambda i: chat(gw, "k-burst", f"p{i}", max_tokens=2), range(100), workers=50)
    elapsed = time.monotonic() - t0
    ok = [r for r in results if r[0] == 200]
    limited = [r for r in results if r[0] == 429]
    assert len(ok) + len(limited) == 100, [r[0] for r in results]
    # The bucket holds 60 and refills one a second: 60, plus what refilled while the burst ran.
    assert 60 <= len(ok) <= 60 + math.floor(elapsed), (len(ok), elapsed)
    assert sim_requests(sim) == len(ok)          # a 429 never reaches a backend
    print(f"# burst of 100 at rpm 60: {len(ok)} answered, {len(limited)} x 429 in {elapsed:.2f} s")
    for st, h, obj in ok + limited:
        assert h["x-ratelimit-limit-requests"] == "60", h
        assert 0 <= int(h["x-ratelimit-remaining-requests"]) < 60, h
        assert reset_ms(h["x-ratelimit-reset-requests"]) <= 60000, h
        assert "x-ratelimit-limit-tokens" not in h     # no tpm on this key
    assert sorted(int(h["x-ratelimit-remaining-requests"]) for _, h, _ in ok)[:1] == [0]
    for st, h, obj in limited:
        assert_openai_error(st, obj, 429)
        assert obj["error"]["code"] == "rate_limit_exceeded" and obj["error"]["type"] == "requests", obj
        assert "'burst'" in obj["error"]["message"] and "Limit 60" in obj["error"]["message"], obj
        assert h["x-ratelimit-remaining-requests"] == "0", h
        assert 1 <= int(h["retry-after"]) <= 2 and 0 < int(h["retry-after-ms"]) <= 1000, h
    # Another key is not limited, and gets no limit headers.
    st, h, _ = chat(gw, "k-free")
    assert st == 200 and "x-ratelimit-limit-requests" not in h, h
    # After the time it was told, the key is served again.
    time.sleep(max(int(h2["retry-after-ms"]) for _, h2, _ in limited) / 1000 + 0.05)
    st, h, _ = chat(gw, "k-burst")
    assert st == 200, (st, h)
    _, _, text = http("GET", gw.url + "/metrics")
    assert metric(text, 'infergate_key_rate_limited_total{key="burst",limit="requests"}') == len(limited)
    assert metric(text, 'infergate_key_requests_total{key="burst",code="429"}') == len(limited)
    assert metric(text, 'infergate_key_requests_total{key="burst",code="200"}') == len(ok) + 1


@test
def the_official_client_retries_through_an_rpm_limit():
    ensure_openai()
    sim = start_sim(*FAST)
    gw = gateway([sim], [{"name": "looper", "key": "k-loop", "rpm": 60}])
    out = run_client(gw, "sim-model", "loop", "70", env={"IG_API_KEY": "k-loop"}, timeout=120)
    # All 70 complete with the client's default retries (2 per request): past
    # the 60 of the burst, each waits the retry-after-ms it was given.
    print(f"# official client, 70 requests at rpm 60: {out}")
    assert out["completed"] == 70, out
    assert out["statuses"].get("200") == 70 and out["statuses"].get("429", 0) >= 5, out
    assert set(out["statuses"]) <= {"200", "429"}, out
    assert sim_requests(sim) == 70


@test
def tpm_is_charged_at_admission_and_corrected_by_usage():
    # tpm 3000 refills 50 tokens a second. The prompt is 40 bytes: 10 tokens
    # for the gateway's estimate and for the simulator; the answer is 10 tokens.
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "10")
    gw = gateway([sim], [{"name": "tok", "key": "k-tok", "tpm": 3000}])
    body = {"model": "sim-model", "prompt": "x" * 40, "max_tokens": 1000}
    st, h1, obj = http_json("POST", gw.url + "/v1/completions", body, bearer("k-tok"))
    assert st == 200 and obj["usage"] == {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}, obj
    # Charged at admission: the estimate (10) plus max_tokens (1000).
    assert h1["x-ratelimit-limit-tokens"] == "3000" and h1["x-ratelimit-remaining-tokens"] == "1990", h1
    assert reset_ms(h1["x-ratelimit-reset-tokens"]) == math.ceil(1010 * 60000 / 3000), h1
    t1 = time.monotonic()
    st, h2, _ = http_json("POST", gw.url + "/v1/completions", body, bearer("k-tok"))
    refilled = (time.monotonic() - t1) * 50 + 1
    assert st == 200
    # The first answer used 20 of its 1010: 990 went back, so the second is
    # admitted from 2980 (not 1990), plus what refilled meanwhile.
    left = int(h2["x-ratelimit-remaining-tokens"])
    print(f"# tpm 3000: remaining after the first (charged 1010) {h1['x-ratelimit-remaining-tokens']}, "
          f"when the second was admitted {left} (2980 - 1010 + refill; without the correction: 980)")
    assert 1970 <= left <= 1970 + refilled, (left, refilled)
    # A streamed request is corrected the same way, by the usage the gateway
    # asked for itself (the client did not).
    st, h3, raw = http("POST", gw.url + "/v1/completions", {**body, "stream": True}, bearer("k-tok"))
    assert st == 200 and b'"usage"' not in raw, raw[-300:]
    _, _, ks = http_json("GET", gw.url + "/admin/keys", headers=bearer(ADMIN_KEY))
    (k,) = ks["keys"]
    assert k["name"] == "tok" and k["tpm"] == 3000 and k["usage"]["prompt_tokens"] == 30, k
    assert k["usage"]["completion_tokens"] == 30 and k["usage"]["by_status"] == {"200": 3}, k
    assert 2940 <= k["limits"]["tokens"]["remaining"] <= 3000, k
    # A long prompt (9,000 bytes: 2,250 tokens, all used) leaves about 700;
    # then a request that may use 1,010 is refused: 429 typed "tokens".
    st, _, obj = http_json("POST", gw.url + "/v1/completions", {**body, "prompt": "y" * 9000, "max_tokens": 1},
                           bearer("k-tok"))
    assert st == 200 and obj["usage"]["prompt_tokens"] == 2250, obj
    st, h4, obj = http_json("POST", gw.url + "/v1/completions", body, bearer("k-tok"))
    assert_openai_error(st, obj, 429)
    assert obj["error"]["type"] == "tokens" and obj["error"]["code"] == "rate_limit_exceeded", obj
    assert int(h4["x-ratelimit-remaining-tokens"]) < 1010 and int(h4["retry-after"]) >= 2, h4
    # More than the limit itself: refused, and waiting would not help (no Retry-After).
    st, h5, obj = http_json("POST", gw.url + "/v1/completions", {**body, "max_tokens": 5000}, bearer("k-tok"))
    assert_openai_error(st, obj, 429)
    assert "Request too large" in obj["error"]["message"] and "retry-after" not in h5, (obj, h5)
    assert sim_requests(sim) == 4


def normalised(raw):
    """A stream's bytes with the per-request id and timestamp blanked."""
    return re.sub(rb'"created":\d+', b'"created":0', re.sub(rb'"id":"[^"]*"', b'"id":""', raw))


@test
def per_key_tokens_equal_what_the_simulators_counted():
    sims = [start_sim("--tokens-per-second", "0", "--ttft-ms", "0") for _ in range(3)]
    twin = sims.pop()   # not behind the gateway
    gw = gateway(sims, [{"name": "acct", "key": "k-acct"}])
    n = 12
    cases = []
    for i in range(n):
        for route in ("/v1/chat/completions", "/v1/completions"):
            base = (chat_body(f"count me {i}", max_tokens=5 + i) if route == "/v1/chat/completions"
                    else {"model": "sim-model", "prompt": f"count me too {i}", "max_tokens": 5 + i})
            cases += [(route, dict(base)), (route, {**base, "stream": True}),
                      (route, {**base, "stream": True, "stream_options": {"include_usage": True}})]
    bare = []  # streams whose client did not ask for usage

    def one(case):
        route, body = case
        st, h, raw = http("POST", gw.url + route, body, bearer("k-acct"))
        assert st == 200, (st, raw[:300])
        if body.get("stream") and "stream_options" not in body:
            assert b'"usage"' not in raw, raw[-400:]     # the usage chunk was taken out
            bare.append((route, body, raw))
        elif body.get("stream"):
            assert raw.count(b'"usage":{') == 1, raw[-400:]  # asked for: relayed untouched
        return st
    parallel(one, cases, workers=16)
    assert len(bare) == 2 * n
    # The same requests straight to a simulator outside the gateway: the same bytes.
    for route, body, raw in bare[:8]:
        st, _, direct = http("POST", twin.url + route, body)
        assert st == 200 and normalised(raw) == normalised(direct), (raw[-300:], direct[-300:])
    _, _, text = http("GET", gw.url + "/metrics")
    prompt = completion = 0
    for s in sims:
        _, _, t = http("GET", s.url + "/metrics")
        labels = '{engine_type="unified",model_name="sim-model",moe_ep_rank="0",pp_rank="0",tp_rank="0"}'
        prompt += metric(t, "sglang:prompt_tokens_total" + labels)
        completion += metric(t, "sglang:generation_tokens_total" + labels)
    key_p = metric(text, 'infergate_key_tokens_total{key="acct",kind="prompt"}')
    key_c = metric(text, 'infergate_key_tokens_total{key="acct",kind="completion"}')
    print(f"# {len(cases)} requests: key counters {key_p:.0f} prompt / {key_c:.0f} completion tokens; "
          f"simulators {prompt:.0f} / {completion:.0f}")
    assert (key_p, key_c) == (prompt, completion), (key_p, key_c, prompt, completion)
    assert key_p > 0 and key_c > 0
    assert metric(text, 'infergate_tokens_total{kind="completion"}') == key_c
    assert metric(text, 'infergate_key_requests_total{key="acct",code="200"}') == len(cases)


@test
def disabled_keys_models_and_reloads():
    sim_a = start_sim("--model", "model-a", *FAST)
    sim_b = start_sim("--model", "model-b", *FAST)
    gw = gateway([sim_a, sim_b], [
        {"name": "alice", "key": "k-alice"},
        {"name": "bob", "key": "k-bob", "models": ["model-a"]},
        {"name": "carol", "key": "k-carol", "disabled": True}])
    wait_until(lambda: len(http_json("GET", gw.url + "/v1/models", headers=bearer("k-alice"))[2]["data"]) == 2,
               timeout=10, what="both models listed")
    st, _, obj = chat(gw, "k-carol", model="model-a")
    assert_openai_error(st, obj, 401, "authentication_error")
    assert obj["error"]["code"] == "api_key_disabled", obj
    before = sim_requests(sim_b)
    st, _, obj = chat(gw, "k-bob", model="model-b")
    assert_openai_error(st, obj, 403, "permission_error")
    assert obj["error"]["code"] == "model_not_allowed" and obj["error"]["param"] == "model", obj
    assert sim_requests(sim_b) == before
    assert chat(gw, "k-bob", model="model-a")[0] == 200
    # /v1/models shows a key the models it may use.
    ids = [m["id"] for m in http_json("GET", gw.url + "/v1/models", headers=bearer("k-bob"))[2]["data"]]
    assert ids == ["model-a"], ids
    # SIGHUP: carol enabled, bob removed, dave added.
    write_keys(gw.keys_path, [{"name": "alice", "key": "k-alice"}, {"name": "carol", "key": "k-carol"},
                              {"name": "dave", "key": "k-dave", "rpm": 5}])
    gw.send_signal(signal.SIGHUP)
    wait_until(lambda: chat(gw, "k-dave", model="model-a")[0] == 200, timeout=5, what="dave's key")
    assert chat(gw, "k-carol", model="model-b")[0] == 200
    assert chat(gw, "k-bob", model="model-a")[0] == 401
    # A reload with a typo is refused, every problem logged, the keys kept.
    with open(gw.keys_path, "w") as f:
        json.dump({"keys": [{"name": "alice", "sha256": digest("k-alice"), "rpn": 60},
                            {"name": "erin", "sha256": "abc", "tpm": -1}]}, f)
    gw.send_signal(signal.SIGHUP)
    wait_until(lambda: "reload rejected" in gw.read_log(), timeout=5, what="the rejected reload")
    log = gw.read_log()
    assert "keys[0] 'alice': unknown field 'rpn'" in log, log[-2000:]
    assert "keys[1] 'erin': sha256:" in log and "keys[1] 'erin': tpm: must be an integer" in log, log[-2000:]
    assert chat(gw, "k-dave", model="model-a")[0] == 200


@test
def a_keys_file_with_mistakes_stops_the_start_naming_each():
    d = tempfile.mkdtemp(prefix="ig-keys-")
    path = os.path.join(d, "keys.json")
    with open(path, "w") as f:
        json.dump({"keys": [{"name": "ok", "sha256": digest("a")},
                            {"name": "typo", "sha256": digest("b"), "rmp": 60},
                            {"name": "ok", "sha256": digest("c"), "models": []},
                            {"sha256": digest("a"), "weight": 0, "priority": "urgent"}]}, f)
    for extra in ([], ["--check-config"]):
        t0 = time.monotonic()
        p = subprocess.run([binary("infergate"), "--backend", "http://127.0.0.1:9", "--listen", "127.0.0.1:0",
                            "--api-keys-file", path, *extra], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and time.monotonic() - t0 < 5, p
        for want in ("keys[1] 'typo': unknown field 'rmp'", "keys[2] 'ok': models: must be a non-empty list",
                     "keys[2] 'ok': name: 'ok' is also the name of keys[0]",
                     "keys[3]: weight: must be an integer in 1..1000, got 0",
                     "keys[3]: priority: must be \"high\", \"normal\" or \"low\"", "keys[3]: name: missing",
                     "keys[3]: sha256: the same digest as keys[0] 'ok'"):
            assert want in p.stderr, (want, p.stderr)
    # An api_key_settings beside a JSON keys file is ambiguous: refused.
    good = os.path.join(d, "good.json")
    with open(good, "w") as f:
        json.dump({"keys": [{"name": "ok", "sha256": digest("a")}]}, f)
    cfg = os.path.join(d, "gw.json")
    with open(cfg, "w") as f:
        json.dump({"backends": ["http://127.0.0.1:9"], "api_keys_file": good,
                   "api_key_settings": {digest("a"): {"weight": 2}}}, f)
    p = subprocess.run([binary("infergate"), "--config", cfg, "--check-config"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 2 and "api_key_settings: with a JSON keys file" in p.stderr, p.stderr


@test
def new_key_prints_a_key_and_its_entry():
    p = subprocess.run([binary("infergate"), "--new-key", "team-a"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p
    key, entry = p.stdout.strip().splitlines()
    assert re.fullmatch(r"ig-[0-9a-f]{64}", key), key
    assert json.loads(entry) == {"name": "team-a", "sha256": digest(key)}, entry
    assert key not in p.stderr
    again = subprocess.run([binary("infergate"), "--new-key", "team-a"], capture_output=True, text=True).stdout
    assert again.splitlines()[0] != key
    p = subprocess.run([binary("infergate"), "--new-key", "bad name"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "'bad name'" in p.stderr, p
    # The entry works as printed.
    sim = start_sim(*FAST)
    d, path = keys_dir([])
    with open(path, "w") as f:
        f.write('{"keys": [' + entry + ']}')
    gw = start_gateway([sim], "--api-keys-file", path)
    wait_until(lambda: http_json("GET", gw.url + "/health")[0] == 200, timeout=10, what="healthy")
    assert chat(gw, key)[0] == 200 and chat(gw, key[:-1])[0] == 401


@test
def keys_never_appear_in_logs_metrics_or_admin_views():
    sim = start_sim(*FAST)
    secrets = ["k-secret-one", "k-secret-two", "k-never-valid"]
    gw = gateway([sim], [{"name": "one", "key": secrets[0], "rpm": 2, "tpm": 100000},
                         {"name": "two", "key": secrets[1], "models": ["other"]}], "--log-level", "debug")
    for i in range(4):                                    # 200, 200, then 429s
        http("POST", gw.url + "/v1/chat/completions", chat_body("s", stream=(i % 2 == 0)), bearer(secrets[0]))
    chat(gw, secrets[1])                                  # 403
    chat(gw, secrets[2])                                  # 401
    bodies = [http("GET", gw.url + p, headers=bearer(ADMIN_KEY))[2].decode()
              for p in ("/metrics", "/health/backends", "/admin/keys", "/admin/backends")]
    assert 'key="one"' in bodies[0] and '"name":"one"' in bodies[2].replace(" ", ""), bodies[2][:300]
    gw.stop()
    everything = "\n".join(bodies) + open(gw.access_log).read() + gw.read_log()
    assert '"key":"one"' in everything.replace(" ", "")   # the access log names the key
    for s in secrets + [ADMIN_KEY]:
        assert s not in everything, s
    for s in secrets:  # nor its full digest
        assert digest(s) not in everything, s


if __name__ == "__main__":
    run()
