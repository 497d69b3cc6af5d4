"""Operating the gateway while it serves: metrics, admin API (drain, enable,
add, remove), SIGHUP reloads, API keys, the access log."""

import collections
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from harness import (SRCDIR, FakeBackend, Sampler, assert_openai_error, binary, chat_body, gateway_queue, http, http_json,
                     metric, parallel, run, sim_waiting, sse_events, start, start_gateway, start_sim, start_sims, test,
                     wait_until)

FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")
ADMIN = {"Authorization": "Bearer admin-secret"}


def tmpdir():
    return tempfile.mkdtemp(prefix="ig-ops-")


def hashed(key):
    return hashlib.sha256(key.encode()).hexdigest()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def admin_files(d, api_keys=None):
    cfg = {"admin_keys_file": write(os.path.join(d, "admin.keys"), hashed("admin-secret") + "\n")}
    if api_keys:
        cfg["api_keys_file"] = write(os.path.join(d, "api.keys"),
                                     "# one digest per line\n" + "".join(hashed(k) + "\n" for k in api_keys))
    return cfg


def gateway_with_config(cfg, *extra):
    d = tmpdir()
    path = write(os.path.join(d, "gw.json"), json.dumps(cfg))
    return start_gateway([], *extra, config=path), path


def healthy(gw, n):
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == n, timeout=10,
               what=f"{n} usable backends")


def backends(gw):
    return {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}


@test
def metrics_follow_a_scripted_run_and_pass_promtool():
    sims = start_sims(2, *FAST)
    gw = start_gateway(sims, "--health-interval-ms", "100")
    healthy(gw, 2)
    for i in range(10):
        st, _, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": f"m{i}", "max_tokens": 7})
        assert st == 200
    st, _, data = http("POST", gw.url + "/v1/chat/completions",
                       chat_body("s", stream=True, max_tokens=5, stream_options={"include_usage": True}))
    assert st == 200 and sse_events(data)[-1] == "[DONE]"
    st, _, _ = http("POST", gw.url + "/v1/chat/completions", {"messages": "not a list"})
    assert st == 400
    _, _, text = http("GET", gw.url + "/metrics")
    text = text.decode()
    served = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                 if line.startswith('infergate_requests_total{route="/v1/completions",code="200"'))
    assert served == 10, text
    assert metric(text, 'infergate_tokens_total{kind="completion"}') == 10 * 7 + 5
    assert metric(text, 'infergate_request_duration_seconds_count{route="/v1/completions"}') == 10
    assert metric(text, 'infergate_stream_first_byte_seconds_count{route="/v1/chat/completions"}') == 1
    assert metric(text, 'infergate_backend_up{backend="%s"}' % sims[0].url) == 1
    # per model, as the GenAI conventions chart them: 11 answered, 1 stream with 5 tokens
    assert metric(text, 'infergate_model_request_duration_seconds_count{model="sim-model"}') == 11
    assert metric(text, 'infergate_model_time_to_first_token_seconds_count{model="sim-model"}') == 1
    assert metric(text, 'infergate_model_time_per_output_token_seconds_count{model="sim-model"}') == 1
    assert metric(text, 'infergate_model_tokens_total{model="sim-model",kind="completion"}') == 10 * 7 + 5
    assert metric(text, 'infergate_model_tokens_total{model="sim-model",kind="prompt"}') == \
        metric(text, 'infergate_tokens_total{kind="prompt"}') > 0
    # A backend going down shows in the gauges and the probe counters.
    sims[0].stop(signal.SIGKILL)
    wait_until(lambda: metric(http("GET", gw.url + "/metrics")[2],
                              'infergate_backend_up{backend="%s"}' % sims[0].url) == 0, timeout=5,
               what="backend_up 0")
    _, _, text = http("GET", gw.url + "/metrics")
    assert metric(text, 'infergate_backend_probes_total{backend="%s",result="failed"}' % sims[0].url) >= 1
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: apt-get install -y prometheus"
    p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(), (p.stdout, p.stderr)


@test
def the_grafana_dashboard_charts_series_the_gateway_exports():
    # etc/grafana/infergate.json: every series a panel's query names is one /metrics exports
    # (a histogram by its _bucket/_sum/_count), with tracing on so that its series are there.
    with open(os.path.join(SRCDIR, "etc", "grafana", "infergate.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = {re.sub(r"_(bucket|sum|count)$", "", n) for e in exprs for n in re.findall(r"\binfergate_[a-z0-9_]+", e)}
    assert len(exprs) >= 12 and len(names) >= 15, (exprs, names)
    sims = start_sims(1, *FAST)
    gw = start_gateway(sims, "--tracing-endpoint", "http://127.0.0.1:9/v1/traces")
    healthy(gw, 1)
    st, _, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("s", stream=True, max_tokens=5))
    assert st == 200
    text = http("GET", gw.url + "/metrics")[2].decode()
    exported = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    assert not names - exported, sorted(names - exported)


@test
def drain_enable_add_remove_during_streams():
    sims = start_sims(3, "--tokens-per-second", "400", "--ttft-ms", "5", "--output-tokens", "20")
    d = tmpdir()
    gw, _ = gateway_with_config({"backends": [s.url for s in sims], **admin_files(d)},
                                "--health-interval-ms", "100")
    healthy(gw, 3)
    ids = {b["url"]: b["id"] for b in backends(gw).values()}
    failures = collections.Counter()
    served_by = collections.Counter()
    phase = ["before"]
    lock = threading.Lock()

    def one(i):
        with lock:
            started_in = phase[0]
        st, hdrs, data = http("POST", gw.url + "/v1/chat/completions", chat_body(f"d{i}", stream=True),
                              timeout=60)
        ok = st == 200 and sse_events(data)[-1] == "[DONE]"
        with lock:
            if not ok:
                failures[st] += 1
            # Only requests that began and ended inside one phase say
            # something about it.
            if phase[0] == started_in:
                served_by[(started_in, hdrs.get("x-infergate-backend"))] += 1

    def script():
        wait_until(lambda: sum(served_by.values()) >= 100, timeout=30)
        # Drain sims[0]: nothing new reaches it, its in-flight count falls to 0.
        st, _, obj = http_json("POST", f"{gw.url}/admin/backends/{ids[sims[0].url]}/drain", headers=ADMIN)
        assert st == 200 and obj["admin"] == "draining", obj
        with lock:
            phase[0] = "drained"
        wait_until(lambda: backends(gw)[sims[0].url]["inflight"] == 0, timeout=10, what="drained")
        time.sleep(0.3)
        st, _, obj = http_json("POST", f"{gw.url}/admin/backends/{ids[sims[0].url]}/enable", headers=ADMIN)
        assert st == 200 and obj["admin"] == "enabled", obj
        with lock:
            phase[0] = "enabled"
        # Remove sims[1]: drained, then gone from the table.
        with lock:
            phase[0] = "removing"
        st, _, obj = http_json("DELETE", f"{gw.url}/admin/backends/{ids[sims[1].url]}", headers=ADMIN)
        assert st == 202, obj
        wait_until(lambda: sims[1].url not in backends(gw), timeout=10, what="removed")
        # Add it back.
        st, _, obj = http_json("POST", gw.url + "/admin/backends", {"url": sims[1].url}, headers=ADMIN)
        assert st == 201 and obj["url"] == sims[1].url, obj
        with lock:
            phase[0] = "re-added"

    t = threading.Thread(target=script)
    t.start()
    parallel(one, range(1000), workers=48)
    t.join()
    assert not failures, failures
    # Requests sent after the drain call returned never reached the drained
    # backend.
    assert served_by[("drained", sims[0].url)] == 0, served_by
    assert served_by[("before", sims[0].url)] > 0, served_by
    healthy(gw, 3)
    st, _, obj = http_json("POST", gw.url + "/admin/backends", {"url": "nope://x"}, headers=ADMIN)
    assert_openai_error(st, obj, 400)
    st, _, obj = http_json("POST", gw.url + "/admin/backends", {"url": sims[2].url}, headers=ADMIN)
    assert_openai_error(st, obj, 409)
    st, _, obj = http_json("POST", gw.url + "/admin/backends/999/drain", headers=ADMIN)
    assert_openai_error(st, obj, 404)
    st, _, obj = http_json("GET", gw.url + "/admin/backends")
    assert_openai_error(st, obj, 401)


@test
def admin_api_is_off_without_admin_keys():
    sim = start_sim(*FAST)
    gw = start_gateway([sim])
    st, _, obj = http_json("GET", gw.url + "/admin/backends", headers=ADMIN)
    assert_openai_error(st, obj, 403)


@test
def sighup_reload_valid_and_invalid_under_load():
    sims = start_sims(3, *FAST)
    d = tmpdir()
    cfg = {"backends": [sims[0].url, sims[1].url], "health": {"interval_ms": 100}}
    gw, path = gateway_with_config(cfg)
    healthy(gw, 2)
    stop = threading.Event()
    results = collections.Counter()

    def load(_):
        while not stop.is_set():
            st, hdrs, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "r", "max_tokens": 3})
            results[(st, hdrs.get("x-infergate-backend"))] += 1
    threads = [threading.Thread(target=load, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    time.sleep(0.3)
    # Valid: swap sims[0] for sims[2].
    write(path, json.dumps({"backends": [sims[1].url, sims[2].url], "health": {"interval_ms": 100},
                            "retries": 3}))
    gw.send_signal(signal.SIGHUP)
    wait_until(lambda: set(backends(gw)) == {sims[1].url, sims[2].url}, timeout=5, what="reloaded table")
    wait_until(lambda: backends(gw)[sims[2].url]["state"] == "up", timeout=5)
    time.sleep(0.3)
    # Invalid: an unknown key. The running configuration stays.
    write(path, json.dumps({"backends": [sims[0].url], "retrys": 1}))
    gw.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    stop.set()
    for th in threads:
        th.join()
    assert set(backends(gw)) == {sims[1].url, sims[2].url}
    bad = {k: v for k, v in results.items() if k[0] != 200}
    assert not bad, bad
    assert results[(200, sims[2].url)] > 0, results
    log = gw.read_log()
    assert "reload rejected" in log and "retrys" in log, log[-2000:]
    assert "reload: configuration from" in log, log[-2000:]


@test
def api_keys_gate_requests_and_never_reach_logs():
    sim = start_sim(*FAST)
    d = tmpdir()
    alog = os.path.join(d, "access.log")
    cfg = {"backends": [sim.url], "access_log": alog, "log_level": "debug",
           **admin_files(d, api_keys=["key-one", "key-two"])}
    gw, _ = gateway_with_config(cfg)
    healthy(gw, 1)
    u = gw.url + "/v1/chat/completions"
    st, _, _ = http("POST", u, chat_body("k"), {"Authorization": "Bearer key-two"})
    assert st == 200
    for hdrs in ({}, {"Authorization": "Bearer key-three"}, {"Authorization": "key-one"}):
        st, h, obj = http_json("POST", u, chat_body("k"), hdrs)
        assert_openai_error(st, obj, 401, "authentication_error")
        assert h.get("www-authenticate") == "Bearer", h
    st, _, obj = http_json("GET", gw.url + "/v1/models")
    assert_openai_error(st, obj, 401)
    assert http("GET", gw.url + "/health")[0] == 200          # load balancers need no key
    assert http("GET", gw.url + "/metrics")[0] == 200         # auth_status is 0 by default
    # The admin key is not an API key and the API key is not an admin key.
    assert http("GET", gw.url + "/admin/backends", headers={"Authorization": "Bearer key-one"})[0] == 401
    assert http("POST", u, chat_body("k"), ADMIN)[0] == 401
    gw.stop()
    logs = open(alog).read() + gw.read_log()
    for secret in ("key-one", "key-two", "key-three", "admin-secret", "Bearer"):
        assert secret not in logs, secret
    # Comparisons go through OpenSSL's constant-time CRYPTO_memcmp.
    nm = subprocess.run(["nm", "-D", binary("infergate")], capture_output=True, text=True)
    assert "CRYPTO_memcmp" in nm.stdout


@test
def status_endpoints_can_require_a_key():
    # auth_status 1: the admin key reads them; a tenant's API key does not (every key's names and
    # counts are there); /health stays open (tests/integration/test_tenants.py: the status right)
    sim = start_sim(*FAST)
    d = tmpdir()
    gw, _ = gateway_with_config({"backends": [sim.url], "auth_status": 1,
                                 **admin_files(d, api_keys=["k"])})
    healthy(gw, 1)
    for path in ("/metrics", "/status", "/health/backends"):
        st = http("GET", gw.url + path)[0]
        assert st == 401, (path, st)
        st, _, obj = http_json("GET", gw.url + path, headers={"Authorization": "Bearer k"})
        assert_openai_error(st, obj, 403, "permission_error")
        st = http("GET", gw.url + path, headers=ADMIN)[0]
        assert st == 200, (path, st)
    st, hdrs, body = http("GET", gw.url + "/", headers=ADMIN)
    assert st == 200 and hdrs["content-type"].startswith("text/html") and b"<html" in body.lower()
    assert http("GET", gw.url + "/health")[0] == 200


@test
def hash_key_prints_the_sha256_digest():
    p = subprocess.run([binary("infergate"), "--hash-key"], input="my key\n", capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0 and p.stdout.strip() == hashed("my key"), p
    d = tmpdir()
    bad = write(os.path.join(d, "bad.keys"), "not-a-digest\n")
    p = subprocess.run([binary("infergate"), "--backend", "http://127.0.0.1:1", "--listen", "127.0.0.1:0",
                        "--api-keys-file", bad], capture_output=True, text=True, timeout=10)
    assert p.returncode == 2 and "bad.keys:1" in p.stderr, p.stderr


@test
def access_log_lines_and_reopen_on_sigusr1():
    sim = start_sim(*FAST)
    d = tmpdir()
    alog = os.path.join(d, "access.log")
    gw = start_gateway([sim], "--access-log", alog)
    healthy(gw, 1)
    st, _, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("log me", max_tokens=4),
                    {"X-Request-Id": "req-42"})
    assert st == 200
    http("GET", gw.url + "/nothing")
    # A line is written when its connection is done with the request, which with more than
    # one reactor may come after the next request's (another reactor's) line.
    wait_until(lambda: os.path.exists(alog) and '"req-42"' in open(alog).read() and '"/nothing"' in open(alog).read(),
               timeout=5)
    lines = [json.loads(x) for x in open(alog).read().splitlines()]
    req = next(x for x in lines if x.get("request_id") == "req-42")
    for k in ("time", "client", "method", "path", "status", "backend", "model", "stream", "bytes_in",
              "bytes_out", "ttfb_ms", "duration_ms", "retries", "prompt_tokens", "completion_tokens"):
        assert k in req, (k, req)
    assert req["status"] == 200 and req["backend"] == sim.url and req["completion_tokens"] == 4, req
    assert req["model"] == "sim-model" and req["stream"] is False and req["client"] == "127.0.0.1", req
    assert any(x["path"] == "/nothing" and x["status"] == 404 for x in lines), lines
    # logrotate: move the file away, SIGUSR1, new lines go to a new file.
    os.rename(alog, alog + ".1")
    gw.send_signal(signal.SIGUSR1)
    wait_until(lambda: os.path.exists(alog), timeout=5, what="log reopened")
    http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "after"})
    wait_until(lambda: "/v1/completions" in open(alog).read(), timeout=5)
    assert "/v1/completions" not in open(alog + ".1").read()


@test
def backend_load_counts_traffic_that_bypasses_the_gateway():
    busy, idle = start_sims(2, "--tokens-per-second", "5", "--ttft-ms", "0", "--output-tokens", "50")
    # 20 requests straight to `busy`, not through the gateway: they run ~10 s.
    import socket as _s
    held = []
    body = json.dumps(chat_body("bypass")).encode()
    for _ in range(20):
        c = _s.create_connection(("127.0.0.1", busy.port))
        c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        held.append(c)
    wait_until(lambda: http_json("GET", busy.url + "/sim/state")[2]["num_running_reqs"] == 20, timeout=5)
    for source, path, want_idle in (("backend", "/metrics", True), ("backend", "/get_load", True),
                                    ("gateway", "/metrics", False)):
        # a set max_inflight: these load paths state no capacity, and a ramp (8 at first) would
        # send a burst's ninth request to the busy one; here only the load counts
        gw = start_gateway([busy, idle], "--load-source", source, "--health-interval-ms", "100",
                           "--load-path", path, "--max-inflight", "64")
        healthy(gw, 2)
        if source == "backend":
            wait_until(lambda: backends(gw)[busy.url].get("external_load") == 20, timeout=5,
                       what="external load polled")
        got = collections.Counter()
        def one(i):
            st, hdrs, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "p", "max_tokens": 1})
            assert st == 200
            got[hdrs["x-infergate-backend"]] += 1
        parallel(one, range(20), workers=10)
        if want_idle:
            assert got[idle.url] == 20, got      # 20 external requests outweigh ours
        else:
            assert got[busy.url] > 0, got        # blind to them, it shares the work
        gw.stop()
    for c in held:
        c.close()


@test
def a_backend_that_queues_is_held_to_what_it_runs_and_the_rest_waits_here():
    # Two backends of equal speed (0.25 s a request), 2 and 6 slots. The first wave overfills
    # both; their load reports teach the gateway what each runs at once. In the second wave
    # the backends never queue more than a probe's worth (the gateway holds the rest), and the
    # work splits by slots (1:3), not by requests in flight (1:1, what a blind gateway does).
    for source in ("backend", "gateway"):
        small = start_sim("--max-running", "2", "--tokens-per-second", "40", "--ttft-ms", "0",
                          "--output-tokens", "10")
        big = start_sim("--max-running", "6", "--tokens-per-second", "40", "--ttft-ms", "0",
                        "--output-tokens", "10")
        gw = start_gateway([small, big], "--load-source", source, "--health-interval-ms", "100",
                           "--load-path", "/get_load")
        healthy(gw, 2)
        def wave(tag):
            got = collections.Counter()
            def one(i):
                st, hdrs, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": f"{tag}{i}"})
                assert st == 200, st
                got[hdrs["x-infergate-backend"]] += 1
            parallel(one, range(48), workers=48)
            return got
        wave("a")
        if source == "backend":
            b = backends(gw)
            # what each runs, or one step past it (a probe after 5 calm reports)
            assert b[small.url]["learned_slots"] in (2, 3) and b[big.url]["learned_slots"] in (6, 7), b
            m = http("GET", gw.url + "/metrics")[2]
            assert metric(m, f'infergate_backend_limit{{backend="{big.url}"}}') in (6, 7)   # read later: may have probed
        with Sampler(lambda: sim_waiting(small, big), lambda: gateway_queue(gw)) as sampled:
            got = wave("b")
        waiting, queued = sampled.values
        if source == "backend":
            assert max(waiting) <= 1, max(waiting)       # a probe past the peak at most
            assert max(queued) >= 20, max(queued)        # the surplus waited here
            assert got[big.url] >= 2 * got[small.url], got
        else:
            assert max(waiting) >= 10, max(waiting)      # blind: the backends hold the queue
            assert max(queued) == 0
            assert got[big.url] < 2 * got[small.url], got
        for p in (gw, small, big):
            p.stop()


@test
def gateways_sharing_a_backend_each_learn_their_share_of_its_slots():
    # One backend of 4 slots (0.25 s a request) behind two gateways, each sending half the
    # work: each learns its share of the 4 it runs, not all 4 (two gateways taking all it
    # runs would keep 4 waiting there). The shares follow each gateway's requests in flight
    # when the backend queued, and each climbs back to its own peak when the backend has no
    # queue, so the backend may queue a few for a probe interval: the test holds the median.
    sim = start_sim("--max-running", "4", "--tokens-per-second", "40", "--ttft-ms", "0",
                    "--output-tokens", "10")
    gws = [start_gateway([sim], "--health-interval-ms", "100", "--load-path", "/get_load")
           for _ in range(2)]
    for gw in gws:
        healthy(gw, 1)
    def wave(tag):
        def one(i):
            st, _, _ = http("POST", gws[i % 2].url + "/v1/completions", {"model": "sim-model", "prompt": f"{tag}{i}"})
            assert st == 200, st
        parallel(one, range(48), workers=48)
    wave("a")
    learned = [backends(gw)[sim.url].get("learned_slots") for gw in gws]
    assert all(1 <= x <= 5 for x in learned), learned   # at most all it runs plus one probe
    with Sampler(lambda: sim_waiting(sim)) as sampled:
        wave("b")
    (waiting,) = sampled.values
    waiting.sort()
    assert waiting[len(waiting) // 2] <= 2, waiting    # all 4 each: 4 waiting throughout


@test
def a_backend_that_states_its_capacity_is_held_to_it_from_the_first_request():
    # SGLang's /v1/loads states max_running_requests: the gateway knows each backend's slots
    # from its first probe, before any request. A burst of 48 on 2 + 6 slots never queues at
    # a backend (the surplus waits here) and splits by slots, from the first request on.
    small = start_sim("--max-running", "2", "--tokens-per-second", "40", "--ttft-ms", "0",
                      "--output-tokens", "10")
    big = start_sim("--max-running", "6", "--tokens-per-second", "40", "--ttft-ms", "0",
                    "--output-tokens", "10")
    gw = start_gateway([small, big], "--health-interval-ms", "100")
    healthy(gw, 2)
    wait_until(lambda: all(b.get("limit_from") == "reported" for b in backends(gw).values()), timeout=10,
               what="the stated slots")
    b = backends(gw)
    assert [(b[s.url]["limit"], b[s.url]["reported_slots"]) for s in (small, big)] == [(2, 2), (6, 6)], b
    cap = http_json("GET", gw.url + "/health/capacity")[2]["models"]["sim-model"]
    assert (cap["slots"], cap["unknown"], cap["ramp"]) == (8, 0, 0), cap
    assert f"backend {small.url} states it runs 2 requests at once" in gw.read_log()
    got = collections.Counter()
    def one(i):
        st, hdrs, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": f"a{i}"})
        assert st == 200, st
        got[hdrs["x-infergate-backend"]] += 1
    with Sampler(lambda: sim_waiting(small, big), lambda: gateway_queue(gw)) as sampled:
        parallel(one, range(48), workers=48)
    waiting, queued = sampled.values
    assert max(waiting) == 0, waiting                 # never a request waiting at a backend
    assert max(queued) >= 20, max(queued)             # the surplus waited here
    assert sum(got.values()) == 48 and got[big.url] >= 2 * got[small.url], got
    for p in (gw, small, big):
        p.stop()


@test
def a_server_whose_kv_budget_runs_fewer_than_it_states_is_held_to_what_it_runs():
    # An engine-like simulator that states 64 (max_running_requests) but whose KV budget of
    # 3,000 tokens holds far fewer at once: its queue shows in two reports in a row, and the
    # learned count replaces the stated one (which stays shown as reported_slots).
    sim = start_sim("--profile", "h100-8b", "--max-running", "64", "--kv-tokens", "3000")
    gw = start_gateway([sim], "--health-interval-ms", "100")
    healthy(gw, 1)
    wait_until(lambda: backends(gw)[sim.url].get("limit") == 64, timeout=10, what="the stated 64")
    # answers of their natural length (16-256 tokens), as when this test was written: the
    # simulator did not honour "ignore_eos" then, and with 400 tokens each it admits 64 at once
    # and overruns its budget (it does not preempt), so no queue shows
    def one(i):
        st, _, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": f"kv {i} " * 30,
                                                            "max_tokens": 400})
        assert st == 200, st
    parallel(one, range(96), workers=96)
    b = backends(gw)[sim.url]
    assert b["limit_from"] == "learned" and 1 <= b["limit"] < 64 and b["reported_slots"] == 64, b
    assert f"backend {sim.url} queues: it runs" in gw.read_log()
    gw.stop()
    sim.stop()


@test
def a_backend_of_unknown_capacity_gets_a_ramp_not_a_flood():
    # vLLM states no capacity anywhere a client can read: the gateway caps it by a ramp (8,
    # growing while it does not queue) until its queue shows what it runs. A burst of 40 on a
    # 4-slot server then waits here, not there: what a blind gateway would queue there (36)
    # is held here, and 4 is learned.
    sim = start_sim("--flavor", "vllm", "--max-running", "4", "--tokens-per-second", "40", "--ttft-ms", "0",
                    "--output-tokens", "10")
    gw = start_gateway([sim], "--health-interval-ms", "100")
    healthy(gw, 1)
    wait_until(lambda: backends(gw)[sim.url].get("load_path") == "/metrics", timeout=10, what="its load found")
    b = backends(gw)[sim.url]
    assert (b["limit"], b["limit_from"]) == (8, "ramp"), b
    cap = http_json("GET", gw.url + "/health/capacity")[2]["models"]["sim-model"]
    assert (cap["slots"], cap["unknown"], cap["learning"], cap["ramp"]) == (0, 1, 1, 8), cap
    def one(i):
        st, _, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": f"r{i}"})
        assert st == 200, st
    with Sampler(lambda: sim_waiting(sim)) as sampled:
        parallel(one, range(40), workers=40)
    (waiting,) = sampled.values
    assert max(waiting) <= 8, max(waiting)     # the ramp's cap (and a few it grew) less 4 running
    b = backends(gw)[sim.url]
    assert b["limit_from"] == "learned" and b["limit"] in (4, 5), b   # what it runs, or one probe past
    gw.stop()
    sim.stop()


@test
def load_path_auto_finds_where_each_server_tells_its_load():
    # Three servers that tell their load in the three places SGLang and vLLM use: Prometheus
    # gauges at /metrics (vLLM; SGLang with --enable-metrics), SGLang's /v1/loads, and the
    # older /get_load whose num_reqs counts running + waiting. Default settings find each.
    answers = {
        "/metrics": (200, b"# TYPE vllm:num_requests_running gauge\n"
                          b'vllm:num_requests_running{model_name="m"} 3.0\n'
                          b'vllm:num_requests_waiting{model_name="m"} 2.0\n', "text/plain"),
        "/v1/loads": (200, {"loads": [{"dp_rank": 0, "num_running_reqs": 4, "num_waiting_reqs": 1,
                                       "max_running_requests": 8},
                                      {"dp_rank": 1, "num_running_reqs": 2, "num_waiting_reqs": 0,
                                       "max_running_requests": 8}]},
                      "application/json"),
        "/get_load": (200, [{"dp_rank": 0, "num_reqs": 9, "num_waiting_reqs": 4, "num_tokens": 100}],
                      "application/json"),
    }
    def serving(path):
        def handler(fb, req, sock):
            if req["method"] == "GET" and req["path"] == path:
                st, body, ctype = answers[path]
                FakeBackend.reply(sock, st, body, ctype)
            elif req["method"] == "GET" and req["path"] in answers:
                FakeBackend.reply(sock, 404, b"not found", "text/plain")
            else:
                FakeBackend.answer_ok(fb, req, sock)
            return True
        return handler
    fbs = {path: FakeBackend(serving(path)) for path in answers}
    silent = FakeBackend(serving("/nowhere"))   # answers 404 on every load path
    gw = start_gateway(list(fbs.values()) + [silent], "--health-interval-ms", "50")
    healthy(gw, 4)
    want = {"/metrics": (5, 2), "/v1/loads": (7, 1), "/get_load": (9, 4)}
    def found():
        b = backends(gw)
        return all(b[fb.url].get("load_path") == path and
                   (b[fb.url].get("reported_load"), b[fb.url].get("reported_waiting")) == want[path]
                   for path, fb in fbs.items())
    wait_until(found, timeout=10, what="each server's load read where it tells it")
    # Where each limit comes from: /v1/loads states 8 per rank; the others state nothing and
    # are capped by a ramp until they queue; the silent one has no limit, and the log says why.
    b = backends(gw)
    assert (b[fbs["/v1/loads"].url]["limit"], b[fbs["/v1/loads"].url]["limit_from"]) == (16, "reported"), b
    assert b[fbs["/v1/loads"].url]["reported_slots"] == 16, b
    for path in ("/metrics", "/get_load"):
        assert (b[fbs[path].url]["limit"], b[fbs[path].url]["limit_from"]) == (8, "ramp"), b
    wait_until(lambda: backends(gw)[silent.url]["limit_from"] == "none", timeout=10, what="no limit for the silent")
    assert backends(gw)[silent.url]["limit"] == 0
    assert f"backend {silent.url} answers no load report" in gw.read_log(), gw.read_log()
    # Once found, a server is not asked elsewhere again.
    n = {path: len(fb.requests) for path, fb in fbs.items()}
    time.sleep(0.5)
    for path, fb in fbs.items():
        asked = {r["path"] for r in fb.requests[n[path]:]} & set(answers)
        assert asked == {path}, (path, asked)


@test
def token_counts_come_from_the_top_level_usage_whatever_the_text_says():
    # The gateway reads only the value of the last "usage" key; text that quotes a usage
    # object, a "usage" string value, and whitespace before the colon must not fool it.
    bodies = [b'{"choices":[{"message":{"content":"say \\"usage\\": {\\"prompt_tokens\\": 999}"}}],'
              b' "usage" :\n {"prompt_tokens": 7, "completion_tokens": 3}, "note": "usage"}',
              b'{"choices":[{"message":{"content":"no usage here"}}]}',
              b'{"usage": {"prompt_tokens": 5, "completion_tokens": 2}, "choices": []}']
    def handler(fb, req, sock):
        if req["method"] == "POST":
            FakeBackend.reply(sock, 200, bodies[len(fb.posts()) - 1])
        else:
            FakeBackend.answer_ok(fb, req, sock)
        return True
    fb = FakeBackend(handler)
    gw = start_gateway([fb], "--load-source", "gateway")
    healthy(gw, 1)
    for i, want in enumerate(bodies):
        st, _, got = http("POST", gw.url + "/v1/chat/completions", chat_body(f"u{i}"))
        assert st == 200 and got == want, (st, got)   # relayed byte for byte
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, 'infergate_tokens_total{kind="prompt"}') == 12, m
    assert metric(m, 'infergate_tokens_total{kind="completion"}') == 5, m


run()
