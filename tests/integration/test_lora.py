"""LoRA adapters as a resource (sched/adapters.c), in front of infergate-sim in
vLLM's flavor: an adapter's requests go to the server that holds it; when that
one is full, the adapter is loaded on another server of its base model, once
however many requests wait for it; a server at its max_loras lets go of its
least recently used adapter first; an adapter no one knows is OpenAI's 404 and
one a key may not use its 403. Which server answered is X-Infergate-Backend;
what a server holds, its own /v1/models; what the gateway did, its /metrics."""

import json
import os
import subprocess
import threading

from harness import (Dir, assert_openai_error, binary, http, http_json, keys_file, metric, run, start_gateway,
                     start_sim, test, wait_until)

COMP = "/v1/completions"
LORA = ("--flavor", "vllm", "--enable-lora", "--allow-runtime-lora-updating", "--tokens-per-second", "0",
        "--ttft-ms", "0")
ADAPTERS = {"sql": "/m/sql", "x": "/m/x", "y": "/m/y", "z": "/m/z"}


def config(d, sims, max_loras, max_inflight=0, **extra):
    path = d("gw.json")
    with open(path, "w") as f:
        json.dump({"backends": [{"url": s.url, "max_loras": max_loras, "max_inflight": max_inflight} for s in sims],
                   "models": [{"name": "sim-model", "adapters": ADAPTERS}], **extra}, f)
    return path


def gateway(d, sims, max_loras, max_inflight=0, **extra):
    gw = start_gateway([], config=config(d, sims, max_loras, max_inflight, **extra))
    wait_until(lambda: len([b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]
                            if b["state"] == "up"]) == len(sims), what="every backend up")
    return gw


def listed(sim):
    """The adapters a server holds, as its /v1/models says."""
    return sorted(m["id"] for m in http_json("GET", sim.url + "/v1/models")[2]["data"] if m.get("parent"))


def ask(gw, model, headers=None):
    status, hdrs, body = http("POST", gw.url + COMP, {"model": model, "prompt": "p", "max_tokens": 2}, headers)
    return status, hdrs.get("x-infergate-backend"), json.loads(body)


def lora_metric(gw, family, backend, adapter, outcome="ok"):
    text = http("GET", gw.url + "/metrics")[2].decode()
    try:
        return metric(text, f'infergate_lora_{family}_total{{backend="{backend}",adapter="{adapter}",'
                            f'outcome="{outcome}"}}')
    except KeyError:
        return None


def lora_of(gw, sim):
    for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]:
        if b["url"] == sim.url:
            return b.get("lora")
    return None


@test
def requests_go_where_the_adapter_is():
    """sql is on a only (its --lora-modules): each of its requests goes there,
    none is loaded anywhere; the base model's go to both."""
    d = Dir()
    a = start_sim(*LORA, "--max-loras", "2", "--lora-modules", "sql=/m/sql")
    b = start_sim(*LORA, "--max-loras", "2")
    gw = gateway(d, [a, b], 2)
    for _ in range(6):
        status, served, obj = ask(gw, "sql")
        assert status == 200 and served == a.url and obj["model"] == "sql", (status, served, obj)
    assert listed(b) == [] and lora_metric(gw, "loads", b.url, "sql") is None
    assert {ask(gw, "sim-model")[1] for _ in range(6)} == {a.url, b.url}
    assert lora_of(gw, a) == {"max_loras": 2, "max_loras_from": "config", "resident": ["sql"], "loading": []}
    assert lora_of(gw, b)["resident"] == []


@test
def loaded_on_a_second_server_once_under_load():
    """a (the only one with sql) takes one request at a time and holds it: of
    six concurrent sql requests one runs there and the gateway loads sql on b
    once, the others waiting for the load; then both serve it."""
    d = Dir()
    a = start_sim(*LORA, "--max-loras", "2", "--lora-modules", "sql=/m/sql")
    b = start_sim(*LORA, "--max-loras", "2")
    gw = gateway(d, [a, b], 2, max_inflight=1)
    for s in (a, b):
        http_json("POST", s.url + "/sim/hold", {"after_tokens": 1})
    results, lock = [], threading.Lock()

    def go():
        r = ask(gw, "sql")
        with lock:
            results.append(r)
    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    wait_until(lambda: listed(b) == ["sql"], what="sql loaded on b")
    wait_until(lambda: all(http_json("GET", s.url + "/sim/state")[2]["num_running_reqs"] == 1 for s in (a, b)),
               what="a request of sql running on each")
    for s in (a, b):
        http_json("POST", s.url + "/sim/hold", {"after_tokens": None})
    for t in threads:
        t.join(30)
    assert len(results) == 6 and all(r[0] == 200 and r[2]["model"] == "sql" for r in results), results
    assert {r[1] for r in results} == {a.url, b.url}, results
    assert lora_metric(gw, "loads", b.url, "sql") == 1
    assert lora_metric(gw, "loads", a.url, "sql") is None
    text = http("GET", gw.url + "/metrics")[2].decode()
    assert metric(text, f'infergate_lora_load_seconds_count{{backend="{b.url}",adapter="sql"}}') == 1
    assert lora_of(gw, b)["resident"] == ["sql"]


@test
def the_least_recently_used_adapter_makes_room():
    """One server of max_loras 2: x and y are loaded for their requests; x is
    used again; z needs room, so y (the least recently used) is unloaded
    first. The server then holds x and z."""
    d = Dir()
    b = start_sim(*LORA, "--max-loras", "2")
    gw = gateway(d, [b], 2)
    for name in ("x", "y", "x", "x", "z"):
        status, served, obj = ask(gw, name)
        assert status == 200 and served == b.url and obj["model"] == name, (name, status, obj)
    assert listed(b) == ["x", "z"], listed(b)
    assert [lora_metric(gw, "loads", b.url, n) for n in ("x", "y", "z")] == [1, 1, 1]
    assert lora_metric(gw, "unloads", b.url, "y") == 1 and lora_metric(gw, "unloads", b.url, "x") is None
    assert sorted(lora_of(gw, b)["resident"]) == ["x", "z"]
    # y comes back in x's place (now the least recently used)
    assert ask(gw, "y")[0] == 200 and listed(b) == ["y", "z"], listed(b)
    assert lora_metric(gw, "unloads", b.url, "x") == 1


@test
def sglang_is_sent_the_adapter_as_lora_path():
    """SGLang reads "model" as its base model: an adapter's request goes to it
    with "lora_path" (its /server_info says it is SGLang), and the server runs
    the adapter (its GPU load counted, the answer's text the adapter's); an
    adapter it lacks is loaded through SGLang's /load_lora_adapter, within
    the max_loras_per_batch its /server_info states."""
    d = Dir()
    a = start_sim("--flavor", "sglang", "--lora-paths", "sql=/m/sql", "--max-loras-per-batch", "2",
                  "--tokens-per-second", "0", "--ttft-ms", "0")
    gw = gateway(d, [a], 0)
    wait_until(lambda: (lora_of(gw, a) or {}).get("max_loras") == 2, what="max_loras_per_batch learned")
    wait_until(lambda: "sql" in [m["id"] for m in http_json("GET", gw.url + "/v1/models")[2]["data"]],
               what="sql listed")
    status, served, obj = ask(gw, "sql")
    assert status == 200 and served == a.url, (status, obj)
    assert http_json("GET", a.url + "/sim/state")[2]["lora_loads"] == 1
    status, served, obj = ask(gw, "x")
    assert status == 200 and served == a.url, (status, obj)
    assert listed(a) == ["sql", "x"] and lora_metric(gw, "loads", a.url, "x") == 1
    assert http_json("GET", a.url + "/sim/state")[2]["lora_loads"] == 2
    # full at 2: y takes the place of sql, the least recently used
    assert ask(gw, "y")[0] == 200 and listed(a) == ["x", "y"], listed(a)
    assert lora_metric(gw, "unloads", a.url, "sql") == 1


@test
def max_loras_learned_from_vllm_metrics():
    """No backends[].max_loras: the gateway reads vLLM's max_lora (its
    vllm:lora_requests_info gauge) and keeps that many adapters there: x and
    y fit in 2, z makes x (the least recently used) go."""
    d = Dir()
    b = start_sim(*LORA, "--max-loras", "2")
    gw = gateway(d, [b], 0)
    wait_until(lambda: lora_of(gw, b) is not None and lora_of(gw, b)["max_loras"] == 2, what="max_loras learned")
    assert lora_of(gw, b)["max_loras_from"] == "learned"
    for name in ("x", "y", "z"):
        assert ask(gw, name)[0] == 200
    assert listed(b) == ["y", "z"] and lora_metric(gw, "unloads", b.url, "x") == 1


@test
def unknown_adapter_is_a_404_and_a_key_may_be_refused_one():
    """An adapter neither configured nor listed: OpenAI's 404 model_not_found
    (for a key that may use any model). A key whose models name sql but not x: x is a 403 model_not_allowed, and
    nothing is loaded for it."""
    d = Dir()
    a = start_sim(*LORA, "--max-loras", "2", "--lora-modules", "sql=/m/sql")
    hdrs = keys_file(d("keys.json"), "k", "all")
    with open(d("keys.json")) as f:
        keys = json.load(f)
    keys["keys"][0]["models"] = ["sim-model", "sql"]
    with open(d("keys.json"), "w") as f:
        json.dump(keys, f)
    gw = gateway(d, [a], 2, api_keys_file=d("keys.json"))
    status, _, obj = ask(gw, "nope", hdrs[1])
    assert_openai_error(status, obj, 404, "invalid_request_error")
    assert obj["error"]["code"] == "model_not_found" and obj["error"]["param"] == "model", obj
    status, _, obj = ask(gw, "x", hdrs[0])
    assert_openai_error(status, obj, 403, "permission_error")
    assert obj["error"]["code"] == "model_not_allowed", obj
    assert listed(a) == ["sql"] and lora_metric(gw, "loads", a.url, "x") is None
    assert ask(gw, "sql", hdrs[0])[0] == 200
    # a configured adapter no server holds, on servers with no LoRA limit known
    # (no max_loras, none stated): the same 404, at once
    plain = start_sim("--flavor", "vllm", "--tokens-per-second", "0", "--ttft-ms", "0")
    gw = gateway(d, [plain], 0)
    status, _, obj = ask(gw, "x")
    assert_openai_error(status, obj, 404, "invalid_request_error")
    assert obj["error"]["code"] == "model_not_found", obj


@test
def bad_adapters_stop_the_start():
    d = Dir()
    for adapters, want in (([1], "models[0].adapters must be an object"),
                           ({"a": ""}, "models[0].adapters.a must be the adapter's path"),
                           ({"a,b": "/p"}, "models[0].adapters: 'a,b' is not an adapter's name"),
                           ({"m": "/p"}, "models[0].adapters: 'm' is given twice")):
        with open(d("bad.json"), "w") as f:
            json.dump({"backends": ["http://127.0.0.1:9"], "models": [{"name": "m", "adapters": adapters}]}, f)
        p = subprocess.run([binary("infergate"), "--config", d("bad.json"), "--check-config"], capture_output=True,
                           text=True, timeout=10)
        assert p.returncode == 2 and want in p.stderr, (adapters, p.returncode, p.stderr)
    with open(d("bad.json"), "w") as f:
        json.dump({"backends": [{"url": "http://127.0.0.1:9", "max_loras": -1}]}, f)
    p = subprocess.run([binary("infergate"), "--config", d("bad.json"), "--check-config"], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 2 and "max_loras: must be an integer in 0..1000000" in p.stderr, p.stderr


run()
