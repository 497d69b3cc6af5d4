"""infergate-bulk replay: a trace sent open loop, each request at its time, measured.

Against simulators (engine profile, a fixed --time-scale) behind a gateway: every request
sent once, in time order, none waiting for an earlier answer; the summary's counts are the
per-request file's. Against a fake server that keeps the bytes it gets: shared hash ids
give byte-identical prefixes. Bad input is refused before anything is sent."""

import json
import os
import signal
import subprocess

from harness import (Dir, FakeBackend, binary, bulk, http_json, lines, run, sim_requests, start_gateway, start_sim,
                     start_sims, test, wait_until)


def trace(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def mc(ts, inp, out, ids):
    return {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": ids}


def sse_answer(fb, req, sock):
    """A small streamed chat answer with usage, as the replay asks."""
    if req["method"] == "GET":
        return FakeBackend.answer_ok(fb, req, sock)
    chunks = [{"id": "c", "object": "chat.completion.chunk", "model": fb.model,
               "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}]},
              {"id": "c", "object": "chat.completion.chunk", "model": fb.model,
               "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]},
              {"id": "c", "object": "chat.completion.chunk", "model": fb.model, "choices": [],
               "usage": {"prompt_tokens": 5, "completion_tokens": 1,
                         "prompt_tokens_details": {"cached_tokens": 0}}}]
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    FakeBackend.reply(sock, 200, body, "text/event-stream")
    return True


@test
def every_request_is_sent_once_at_its_time_whatever_the_answers_do():
    sims = start_sims(2, "--profile", "h100-8b", "--time-scale", "10", "--model", "m")
    gw = start_gateway(sims, "--policy", "cache-aware")
    wait_until(lambda: len(http_json("GET", gw.url + "/v1/models")[2]["data"]) == 1, what="the model listed")
    d = Dir()
    # request 0 asks for 1,500 tokens (about 10 s of simulated decode); the others arrive
    # 100 ms apart while it runs, each sharing its first block
    rows = [mc(0, 1000, 1500, [1, 2])] + [mc(100 * k, 700, 8, [1, 100 + k]) for k in range(1, 10)]
    trace(d("t.jsonl"), rows)
    rc, out, err = bulk("replay", "--input", d("t.jsonl"), "--output", d("r.jsonl"), "--url", gw.url,
                        "--time-scale", "10", "--summary-json", d("s.json"), "--plot", d("p.png"))
    assert rc == 0, err
    with open(d("p.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    got = lines(d("r.jsonl"))
    assert sorted(x["index"] for x in got) == list(range(10))
    assert sum(sim_requests(s) for s in sims) == 10
    by = {x["index"]: x for x in got}
    # in time order, each at its time (the schedule in simulated ms is the trace's)
    assert [by[k]["scheduled_ms"] for k in range(10)] == [100 * k for k in range(10)]
    assert all(by[k]["sent_ms"] <= by[k + 1]["sent_ms"] for k in range(9))
    # open loop: every later request went out before the first one's answer ended
    first_end = by[0]["sent_ms"] + by[0]["e2e_ms"]
    assert all(by[k]["sent_ms"] < first_end for k in range(1, 10)), (first_end, [by[k]["sent_ms"] for k in by])
    # ignore_eos: each answer is exactly the trace's output length
    assert [by[k]["completion_tokens"] for k in range(10)] == [1500] + [8] * 9
    assert all(x["backend"] in (sims[0].url, sims[1].url) for x in got)
    assert all(x["status"] == 200 and x["error"] is None for x in got)
    # the summary counts what the file says
    s = json.load(open(d("s.json")))
    assert (s["requests"], s["sent"], s["completed"], s["errors"]) == (10, 10, 10, 0)
    assert s["prompt_tokens"] == sum(x["prompt_tokens"] for x in got)
    assert s["cached_tokens"] == sum(x["cached_tokens"] for x in got)
    assert s["completion_tokens"] == 1500 + 72
    assert s["goodput"]["met"] == sum(x["slo_met"] for x in got)
    # the shared first block was found cached by the later requests on the same backend
    assert s["cached_tokens"] > 0
    assert "goodput" in out and "TTFT" in out
    # the per-second file: ten arrivals in all
    with open(d("r.seconds.csv")) as f:
        rows_csv = [r.split(",") for r in f.read().splitlines()]
    assert rows_csv[0] == ["second", "arrivals", "in_flight", "ended", "ttft_p90_ms", "output_tokens_per_s"]
    assert sum(int(r[1]) for r in rows_csv[1:]) == 10
    assert sum(int(r[3]) for r in rows_csv[1:]) == 10


@test
def shared_hash_ids_give_byte_identical_prefixes():
    fb = FakeBackend(sse_answer, model="m")
    d = Dir()
    trace(d("t.jsonl"), [mc(0, 1400, 3, [1, 2, 3]), mc(10, 1300, 4, [1, 2, 4]), mc(20, 100, 5, [5])])
    rc, out, err = bulk("replay", "--input", d("t.jsonl"), "--output", d("r.jsonl"), "--url", fb.url)
    assert rc == 0, err
    posts = sorted(fb.posts(), key=lambda r: json.loads(r["body"])["max_tokens"])
    assert [r["path"] for r in posts] == ["/v1/chat/completions"] * 3
    bodies = [json.loads(r["body"]) for r in posts]
    texts = [b["messages"][0]["content"] for b in bodies]
    assert [len(t) for t in texts] == [5600, 5200, 400]      # 4 bytes a token
    assert texts[0][:4096] == texts[1][:4096]                 # two blocks of 512 tokens
    assert texts[0][4096:4160] != texts[1][4096:4160]
    assert texts[2][:64] != texts[0][:64]
    assert [b["max_tokens"] for b in bodies] == [3, 4, 5]
    assert all(b["ignore_eos"] is True and b["stream"] is True and b["stream_options"] == {"include_usage": True}
               and b["model"] == "m" for b in bodies)
    # another ratio of bytes to tokens: the same sharing
    fb.requests.clear()
    rc, out, err = bulk("replay", "--input", d("t.jsonl"), "--output", d("r3.jsonl"), "--url", fb.url,
                        "--tokens-per-block-bytes", "3", "--endpoint", "completions")
    assert rc == 0, err
    prompts = sorted((json.loads(r["body"])["prompt"] for r in fb.posts()), key=len, reverse=True)
    assert [len(p) for p in prompts] == [4200, 3900, 300]
    assert prompts[0][:3072] == prompts[1][:3072] and prompts[0][3072:3136] != prompts[1][3072:3136]
    # a block of 512 tokens is 1,536 bytes now: the same words as before, cut shorter
    assert prompts[0][:1536] == texts[0][:1536] and prompts[0][1536:1600] == texts[0][2048:2112]
    assert all(r["path"] == "/v1/completions" for r in fb.posts())


@test
def bad_input_is_refused_before_anything_is_sent():
    fb = FakeBackend(sse_answer, model="m")
    d = Dir()
    cases = {
        "no timestamp": ([{"input_length": 10, "output_length": 1, "hash_ids": [1]}], "line 1: no \"timestamp\""),
        "negative": ([mc(0, 10, -2, [1])], "line 1: \"output_length\" is -2: not a whole number of at least 0"),
        "out of order": ([mc(50, 10, 1, [1]), mc(40, 10, 1, [2])], "line 2: timestamp 40 is before line 1's 50"),
        "empty": ([], "has no request lines"),
    }
    for name, (rows, want) in cases.items():
        trace(d("bad.jsonl"), rows)
        rc, out, err = bulk("replay", "--input", d("bad.jsonl"), "--output", d("r.jsonl"), "--url", fb.url)
        assert rc == 2, (name, rc, err)
        assert "preflight failed, nothing was sent" in err and want in err, (name, err)
        assert not os.path.exists(d("r.jsonl")), name
    assert fb.posts() == []
    # an output that exists is not overwritten (a replay is a measurement: no resume)
    trace(d("t.jsonl"), [mc(0, 10, 1, [1])])
    with open(d("r.jsonl"), "w") as f:
        f.write("earlier\n")
    rc, out, err = bulk("replay", "--input", d("t.jsonl"), "--output", d("r.jsonl"), "--url", fb.url)
    assert rc == 2 and "--output " + d("r.jsonl") + " exists" in err, err
    assert open(d("r.jsonl")).read() == "earlier\n"
    assert fb.posts() == []
    # a bad flag names itself
    rc, out, err = bulk("replay", "--input", d("t.jsonl"), "--output", d("x.jsonl"), "--speed", "fast")
    assert rc == 2 and "--speed" in err and "fast" in err, err


@test
def a_signal_stops_the_replay_with_whole_lines_and_exit_3():
    sim = start_sim("--profile", "h100-8b", "--model", "m")     # real time: 1,000 tokens take seconds
    d = Dir()
    trace(d("t.jsonl"), [mc(0, 100, 4, [1])] + [mc(50 * k, 600, 1000, [1, 10 + k]) for k in range(1, 40)])
    p = subprocess.Popen([binary("infergate-bulk"), "replay", "--input", d("t.jsonl"), "--output", d("r.jsonl"),
                          "--url", sim.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: os.path.exists(d("r.jsonl")) and os.path.getsize(d("r.jsonl")) > 0 or p.poll() is not None,
                   what="the first answer")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, (p.returncode, err)
    assert "stopped      by a signal" in out, out
    got = lines(d("r.jsonl"))                  # every line whole and once
    assert len(got) >= 1 and len({x["index"] for x in got}) == len(got)
    assert len(got) < 40


run()
