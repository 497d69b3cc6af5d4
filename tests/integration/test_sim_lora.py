"""infergate-sim serving LoRA adapters as vLLM and SGLang do: adapters from the
flags served and listed, a request for an adapter not in the batch waiting
while the batch has max_loras (vLLM) / max_loras_per_batch (SGLang, the base
model counted) distinct adapters and the requests behind it going on, its start
once one ends, the loads into GPU slots counted, loading and unloading at run
time (vLLM only with --allow-runtime-lora-updating), an unknown adapter
refused in each flavor's shape, and vLLM's vllm:lora_requests_info line."""

import re
import subprocess
import threading

from harness import binary, http, http_json, run, start_sim, test, wait_until

COMP = "/v1/completions"
UNPACED = ("--tokens-per-second", "0", "--ttft-ms", "0")


def state(sim):
    return http_json("GET", sim.url + "/sim/state")[2]


def lora_info(sim):
    """vLLM's lora_requests_info labels, or None when /metrics has no such line."""
    m = re.search(r'^vllm:lora_requests_info\{max_lora="(\d+)",waiting_lora_adapters="([^"]*)",'
                  r'running_lora_adapters="([^"]*)"\} \S+$', http("GET", sim.url + "/metrics")[2].decode(), re.M)
    return m and {"max_lora": m.group(1), "waiting": m.group(2), "running": m.group(3)}


class Requests:
    """Completions sent on threads; `done` lists their tags in the order their
    answers came."""

    def __init__(self, sim):
        self.sim, self.done, self.status, self.lock, self.threads = sim, [], {}, threading.Lock(), []

    def send(self, tag, body):
        def go():
            status, _, obj = http_json("POST", self.sim.url + COMP, body)
            with self.lock:
                self.done.append(tag)
                self.status[tag] = (status, obj)
        t = threading.Thread(target=go)
        t.start()
        self.threads.append(t)

    def join(self):
        for t in self.threads:
            t.join(20)


@test
def vllm_adapters_served_and_listed():
    """--lora-modules: each adapter is a model in /v1/models with the base as
    its parent; a request names one by "model" and the answer carries it;
    another name is vLLM's 404."""
    sim = start_sim("--flavor", "vllm", "--enable-lora", "--lora-modules", "sql=/m/sql", "chat=/m/chat", *UNPACED)
    models = http_json("GET", sim.url + "/v1/models")[2]["data"]
    assert [(m["id"], m["root"], m["parent"]) for m in models] == \
        [("sim-model", "sim-model", None), ("sql", "/m/sql", "sim-model"), ("chat", "/m/chat", "sim-model")], models
    status, _, obj = http_json("POST", sim.url + COMP, {"model": "sql", "prompt": "p", "max_tokens": 3})
    assert status == 200 and obj["model"] == "sql", obj
    status, _, obj = http_json("POST", sim.url + COMP, {"model": "nope", "prompt": "p", "max_tokens": 3})
    assert status == 404 and obj["error"] == {"message": "The model `nope` does not exist.", "type": "NotFoundError",
                                              "param": "model", "code": 404}, obj
    assert state(sim)["lora_loads"] == 1


@test
def vllm_max_loras_holds_the_other_adapter():
    """--max-loras 1: with a request for "a" running, one for "b" waits and a
    base-model request behind it runs (vLLM's scheduler skips "b"); "b"
    starts once "a" has ended. The metric names the running and the waiting
    adapter."""
    sim = start_sim("--flavor", "vllm", "--enable-lora", "--max-loras", "1", "--lora-modules", "a=/a", "b=/b",
                    *UNPACED)
    assert lora_info(sim) == {"max_lora": "1", "waiting": "", "running": ""}
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": 1})
    reqs = Requests(sim)
    reqs.send("a", {"model": "a", "prompt": "x", "max_tokens": 2})
    wait_until(lambda: state(sim)["num_running_reqs"] == 1, what="a running")
    reqs.send("b", {"model": "b", "prompt": "y", "max_tokens": 4})
    wait_until(lambda: state(sim)["num_waiting_reqs"] == 1, what="b waiting")
    reqs.send("base", {"prompt": "z", "max_tokens": 4})
    wait_until(lambda: state(sim)["num_running_reqs"] == 2, what="the base request running past b")
    st = state(sim)
    assert st["num_waiting_reqs"] == 1 and st["ranks"][0]["lora_running"] == {"a": 1}, st
    assert lora_info(sim) == {"max_lora": "1", "waiting": "b", "running": "a"}
    # generations go on to 3 tokens: a (2) ends, and only then b starts
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": 3})
    wait_until(lambda: state(sim)["ranks"][0]["lora_running"] == {"b": 1}, what="b running")
    wait_until(lambda: reqs.done == ["a"], what="a answered")
    assert state(sim)["num_running_reqs"] == 2 and lora_info(sim)["running"] == "b"
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": None})
    reqs.join()
    assert sorted(reqs.done) == ["a", "b", "base"], reqs.done
    assert all(s == 200 for s, _ in reqs.status.values()), reqs.status
    assert state(sim)["lora_loads"] == 2
    assert lora_info(sim) == {"max_lora": "1", "waiting": "", "running": ""}


@test
def gpu_slots_swap_least_recently_used():
    """--max-loras 1, one request at a time: a, a, b, a loads a, b, a (three
    loads); --max-loras 2 keeps both resident (two)."""
    for max_loras, loads in (("1", 3), ("2", 2)):
        sim = start_sim("--flavor", "vllm", "--enable-lora", "--max-loras", max_loras, "--lora-modules", "a=/a",
                        "b=/b", *UNPACED)
        for name in ("a", "a", "b", "a"):
            assert http_json("POST", sim.url + COMP, {"model": name, "prompt": "p", "max_tokens": 2})[0] == 200
        assert state(sim)["lora_loads"] == loads, (max_loras, state(sim))


@test
def sglang_counts_the_base_model_in_the_batch():
    """--max-loras-per-batch 2: a base request and one for "a" running fill
    the batch, so "b" waits (SGLang counts the base model); a request names
    its adapter by lora_path or by "model": "BASE:ADAPTER". SGLang prints no
    LoRA metric."""
    sim = start_sim("--flavor", "sglang", "--lora-paths", "a=/a", "b=/b", "--max-loras-per-batch", "2", *UNPACED)
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": 1})
    reqs = Requests(sim)
    reqs.send("base", {"prompt": "x", "max_tokens": 4})
    reqs.send("a", {"prompt": "y", "max_tokens": 2, "lora_path": "a"})
    wait_until(lambda: state(sim)["num_running_reqs"] == 2, what="base and a running")
    reqs.send("b", {"model": "sim-model:b", "prompt": "z", "max_tokens": 4})
    wait_until(lambda: state(sim)["num_waiting_reqs"] == 1, what="b waiting")
    assert state(sim)["ranks"][0]["lora_running"] == {"a": 1}
    assert lora_info(sim) is None
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": 3})   # a (2 tokens) ends, then b starts
    wait_until(lambda: state(sim)["ranks"][0]["lora_running"] == {"b": 1}, what="b running")
    wait_until(lambda: reqs.done == ["a"], what="a answered")
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": None})
    reqs.join()
    assert sorted(reqs.done) == ["a", "b", "base"], reqs.done
    assert all(s == 200 for s, _ in reqs.status.values()), reqs.status
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "p", "max_tokens": 2, "lora_path": "c"})
    assert status == 400 and obj["message"].startswith(
        "The following requested LoRA adapters are not loaded: c\nLoaded adapters: dict_keys(['a', 'b'])"), obj


@test
def vllm_runtime_updating_needs_the_switch():
    """Without --allow-runtime-lora-updating vLLM has no such routes (404);
    with it an adapter is loaded, served, listed, refused twice, unloaded."""
    sim = start_sim("--flavor", "vllm", "--enable-lora", *UNPACED)
    status, _, obj = http_json("POST", sim.url + "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/x"})
    assert status == 404 and obj == {"detail": "Not Found"}, obj
    sim = start_sim("--flavor", "vllm", "--enable-lora", "--allow-runtime-lora-updating", *UNPACED)
    status, _, body = http("POST", sim.url + "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/x"})
    assert status == 200 and body == b"Success: LoRA adapter 'x' added successfully.", body
    assert [m["id"] for m in http_json("GET", sim.url + "/v1/models")[2]["data"]] == ["sim-model", "x"]
    assert http_json("POST", sim.url + COMP, {"model": "x", "prompt": "p", "max_tokens": 2})[0] == 200
    status, _, obj = http_json("POST", sim.url + "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/x"})
    assert status == 400 and obj["error"]["type"] == "InvalidUserInput" and \
        obj["error"]["message"] == "The lora adapter 'x' has already been loaded.", obj
    status, _, obj = http_json("POST", sim.url + "/v1/load_lora_adapter", {"lora_name": "y"})
    assert status == 400 and obj["error"]["message"] == "Both 'lora_name' and 'lora_path' must be provided.", obj
    status, _, body = http("POST", sim.url + "/v1/unload_lora_adapter", {"lora_name": "x"})
    assert status == 200 and body == b"Success: LoRA adapter 'x' removed successfully.", body
    assert http_json("POST", sim.url + COMP, {"model": "x", "prompt": "p", "max_tokens": 2})[0] == 404
    status, _, obj = http_json("POST", sim.url + "/v1/unload_lora_adapter", {"lora_name": "x"})
    assert status == 404 and obj["error"] == {"message": "The lora adapter 'x' cannot be found.",
                                              "type": "NotFoundError", "param": None, "code": 404}, obj


@test
def sglang_runtime_load_and_unload():
    """SGLang answers a LoRAUpdateOutput: success and the loaded adapters, or
    400 with the error (one over --max-loaded-loras, an unknown name)."""
    sim = start_sim("--flavor", "sglang", "--lora-paths", "a=/a", "--max-loaded-loras", "2", *UNPACED)
    status, _, obj = http_json("POST", sim.url + "/load_lora_adapter", {"lora_name": "b", "lora_path": "/b"})
    assert status == 200 and obj == {"success": True, "error_message": None,
                                     "loaded_adapters": {"a": "/a", "b": "/b"}}, obj
    assert http_json("POST", sim.url + COMP, {"prompt": "p", "max_tokens": 2, "lora_path": "b"})[0] == 200
    status, _, obj = http_json("POST", sim.url + "/load_lora_adapter", {"lora_name": "c", "lora_path": "/c"})
    assert status == 400 and obj["success"] is False and "max_loaded_loras (2)" in obj["error_message"], obj
    status, _, obj = http_json("POST", sim.url + "/unload_lora_adapter", {"lora_name": "a"})
    assert status == 200 and obj["loaded_adapters"] == {"b": "/b"}, obj
    status, _, obj = http_json("POST", sim.url + "/unload_lora_adapter", {"lora_name": "a"})
    assert status == 400 and obj["success"] is False, obj
    assert http_json("POST", sim.url + COMP, {"prompt": "p", "max_tokens": 2, "lora_path": "a"})[0] == 400
    sim = start_sim("--flavor", "sglang", *UNPACED)
    status, _, obj = http_json("POST", sim.url + "/load_lora_adapter", {"lora_name": "b", "lora_path": "/b"})
    assert status == 400 and "--enable-lora" in obj["error_message"], obj


@test
def lora_flags_checked():
    for args, want in ((["--flavor", "sglang", "--max-loras", "2"], "--max-loras: needs --flavor vllm"),
                       (["--flavor", "vllm", "--max-loras-per-batch", "2"], "needs --flavor sglang"),
                       (["--flavor", "vllm", "--lora-modules", "a=/a"], "needs --enable-lora"),
                       (["--flavor", "vllm", "--enable-lora", "--lora-paths", "a=/a"], "--lora-paths: needs --flavor sglang"),
                       (["--flavor", "vllm", "--enable-lora", "--lora-modules", "a=/a", "a=/b"], "given twice"),
                       (["--flavor", "vllm", "--enable-lora", "--max-loras", "2", "--max-cpu-loras", "1"],
                        "must be >= max_loras"),
                       (["--flavor", "vllm", "--enable-lora", "--lora-modules", "=x"], "NAME=PATH")):
        p = subprocess.run([binary("infergate-sim"), *args], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and want in p.stderr, (args, p.returncode, p.stderr)


run()
