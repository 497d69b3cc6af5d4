"""infergate-sim's data-parallel ranks as a client picks one: vLLM's
X-data-parallel-rank header, SGLang's routed_dp_rank (and data_parallel_rank)
in the body. The rank asked for is the one that serves (X-Sim-DP-Rank on the
answer, /sim/state's per-rank counts, the per-rank load reports), one out of
range is the engine's 400, none asked for is round-robin as before; and
--dp-rank-slowdown makes one rank slower, in both engine models."""

import subprocess
import threading

from harness import binary, http, http_json, run, sse_events, start_sim, test, wait_until

COMP = "/v1/completions"
UNPACED = ("--tokens-per-second", "0", "--ttft-ms", "0")


def served(sim):
    """Requests each rank finished, from /sim/state."""
    return [r["requests_served"] for r in http_json("GET", sim.url + "/sim/state")[2]["ranks"]]


@test
def vllm_header_picks_the_rank():
    """X-data-parallel-rank: K runs the request on rank K, streamed or not;
    without it the ranks take turns; a value that is not an integer is
    ignored, as vLLM's int() failing gives None."""
    sim = start_sim("--flavor", "vllm", "--dp-ranks", "3", *UNPACED)
    for i in range(4):
        status, hdrs, obj = http_json("POST", sim.url + COMP, {"prompt": f"p{i}", "max_tokens": 3},
                                      headers={"X-data-parallel-rank": "2"})
        assert status == 200 and hdrs["x-sim-dp-rank"] == "2", (status, hdrs, obj)
    status, hdrs, body = http("POST", sim.url + COMP, {"prompt": "s", "max_tokens": 3, "stream": True},
                              headers={"x-data-parallel-rank": "1"})
    assert status == 200 and hdrs["x-sim-dp-rank"] == "1" and sse_events(body)[-1] == "[DONE]"
    assert served(sim) == [0, 1, 4]
    ranks = [http("POST", sim.url + COMP, {"prompt": f"r{i}", "max_tokens": 3})[1]["x-sim-dp-rank"]
             for i in range(3)]
    assert ranks == ["0", "1", "2"], ranks                  # round-robin, untouched by the pinned ones
    status, hdrs, _ = http("POST", sim.url + COMP, {"prompt": "x", "max_tokens": 3},
                           headers={"X-data-parallel-rank": "one"})
    assert status == 200 and hdrs["x-sim-dp-rank"] == "0"
    assert served(sim) == [2, 2, 5]


@test
def vllm_rank_out_of_range_is_a_400():
    """vLLM's processor refuses a rank outside [0, data_parallel_size)."""
    sim = start_sim("--flavor", "vllm", "--dp-ranks", "2", *UNPACED)
    for v in ("2", "-1"):
        status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "p", "max_tokens": 3},
                                   headers={"X-data-parallel-rank": v})
        assert status == 400, (status, obj)
        assert obj["error"]["type"] == "BadRequestError"
        assert obj["error"]["message"] == f"data_parallel_rank {v} is out of range [0, 2).", obj
    assert served(sim) == [0, 0]


@test
def sglang_body_field_picks_the_rank():
    """routed_dp_rank (and the older data_parallel_rank) in chat, completions
    and /generate; the header X-Data-Parallel-Rank too, winning over the body
    (serving_base.py extract_routed_dp_rank_from_header)."""
    sim = start_sim("--flavor", "sglang", "--dp-ranks", "2", *UNPACED)
    status, hdrs, _ = http("POST", sim.url + COMP, {"prompt": "a", "max_tokens": 3, "routed_dp_rank": 1})
    assert status == 200 and hdrs["x-sim-dp-rank"] == "1"
    status, hdrs, _ = http("POST", sim.url + "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "b"}], "max_tokens": 3, "data_parallel_rank": 1})
    assert status == 200 and hdrs["x-sim-dp-rank"] == "1"
    status, hdrs, _ = http("POST", sim.url + "/generate",
                           {"text": "c", "sampling_params": {"max_new_tokens": 3}, "routed_dp_rank": 1})
    assert status == 200 and hdrs["x-sim-dp-rank"] == "1"
    status, hdrs, _ = http("POST", sim.url + COMP, {"prompt": "d", "max_tokens": 3, "routed_dp_rank": 0},
                           headers={"X-Data-Parallel-Rank": "1"})
    assert status == 200 and hdrs["x-sim-dp-rank"] == "1"   # the header wins
    status, hdrs, _ = http("POST", sim.url + COMP, {"prompt": "d", "max_tokens": 3})
    assert status == 200 and hdrs["x-sim-dp-rank"] == "0"   # neither: round-robin from rank 0
    assert served(sim) == [1, 4]
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "e", "max_tokens": 3, "routed_dp_rank": 2})
    assert status == 400 and obj["message"].startswith("routed_dp_rank 2 is out of range [0, 2)"), obj
    status, _, obj = http_json("POST", sim.url + COMP, {"prompt": "e", "max_tokens": 3, "routed_dp_rank": "1"})
    assert status == 400 and "routed_dp_rank" in obj["message"], obj
    assert served(sim) == [1, 4]


@test
def pinned_requests_fill_their_rank_only():
    """Pinned to rank 1 with one slot per rank, the second request waits on
    rank 1 while rank 0 stays idle: the per-rank loads say so."""
    sim = start_sim("--flavor", "sglang", "--dp-ranks", "2", "--max-running", "1", "--tokens-per-second", "0",
                    "--ttft-ms", "0")
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": 1})
    out = []
    threads = [threading.Thread(target=lambda i=i: out.append(
        http("POST", sim.url + COMP, {"prompt": f"p{i}", "max_tokens": 4, "routed_dp_rank": 1})[1]["x-sim-dp-rank"]))
        for i in range(2)]
    for t in threads:
        t.start()
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["num_waiting_reqs"] == 1, what="one waiting")
    loads = http_json("GET", sim.url + "/v1/loads")[2]["loads"]
    assert [(r["num_running_reqs"], r["num_waiting_reqs"]) for r in loads] == [(0, 0), (1, 1)], loads
    metrics = http("GET", sim.url + "/metrics")[2].decode()
    queue = {l.split('dp_rank="')[1][0]: l.rsplit(" ", 1)[1] for l in metrics.splitlines()
             if l.startswith("sglang:num_queue_reqs{")}
    assert queue == {"0": "0.0", "1": "1.0"}, queue
    http_json("POST", sim.url + "/sim/hold", {"after_tokens": None})
    for t in threads:
        t.join(10)
    assert out == ["1", "1"] and served(sim) == [0, 2]


def race(sim, body_for, ranks):
    """One request per rank at once; the ranks in the order their answers came."""
    order, lock = [], threading.Lock()

    def go(k):
        status, hdrs, _ = http("POST", sim.url + COMP, body_for(k), headers={"X-data-parallel-rank": str(k)})
        assert status == 200
        with lock:
            order.append(int(hdrs["x-sim-dp-rank"]))

    threads = [threading.Thread(target=go, args=(k,)) for k in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return order


@test
def slowed_rank_finishes_last_classic():
    """--dp-rank-slowdown 0=20: the same request on ranks 0 and 1 at once,
    rank 1 answers first (rank 0 takes 20 times its TTFT and token gaps)."""
    sim = start_sim("--flavor", "vllm", "--dp-ranks", "2", "--dp-rank-slowdown", "0=20", "--tokens-per-second",
                    "200", "--ttft-ms", "10")
    state = http_json("GET", sim.url + "/sim/state")[2]
    assert [r["slowdown"] for r in state["ranks"]] == [20, 1]
    order = race(sim, lambda k: {"prompt": "same", "max_tokens": 8, "ignore_eos": True}, [0, 1])
    assert order == [1, 0], order


@test
def slowed_rank_finishes_last_steps():
    """The same with a step profile: rank 0's decode steps take 20 times as long."""
    sim = start_sim("--flavor", "vllm", "--dp-ranks", "2", "--dp-rank-slowdown", "0=20", "--profile", "h100-8b")
    order = race(sim, lambda k: {"prompt": "same prompt", "max_tokens": 12, "ignore_eos": True}, [0, 1])
    assert order == [1, 0], order


@test
def bad_slowdown_flags_exit_2():
    for args, want in ((["--dp-ranks", "2", "--dp-rank-slowdown", "2=3"], "--dp-rank-slowdown"),
                       (["--dp-rank-slowdown", "0=0"], "--dp-rank-slowdown"),
                       (["--dp-rank-slowdown", "fast"], "RANK=FACTOR")):
        p = subprocess.run([binary("infergate-sim"), *args], capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and want in p.stderr, (args, p.returncode, p.stderr)


run()
