"""infergate-bulk against real infergate-sim processes (and the gateway when
it is built): what a user sees is the exit code, the message, and the lines
in the output and errors files."""

import json
import os
import random
import resource
import signal

from harness import (BUILDDIR, Dir, FakeBackend, binary, bulk, fixture, generate, http, http_json, ids, lines, metric,
                     need_binary, parallel, run, start, start_gateway, start_sim, start_sims, test, wait_until)

MODEL = "m"
UNPACED = ("--model", MODEL, "--tokens-per-second", "0", "--ttft-ms", "0")


def input_ids(path):
    with open(path) as f:
        return [json.loads(line)["custom_id"] for line in f if line.strip()]


def write_lines(path, objs):
    with open(path, "w") as f:
        for o in objs:
            f.write((o if isinstance(o, str) else json.dumps(o)) + "\n")


def sim_requests(sim):
    """Completion requests a sim has seen, whatever the outcome."""
    _, _, text = http("GET", sim.url + "/metrics")
    total = 0
    for name in ("infergate_sim_requests_served_total", "infergate_sim_requests_failed_total",
                 "infergate_sim_requests_invalid_total", "infergate_sim_requests_rejected_total",
                 "infergate_sim_requests_aborted_total"):
        total += metric(text, f'{name}{{model_name="{MODEL}"}}')
    total += metric(text, f'sglang:num_requests_total{{engine_type="unified",model_name="{MODEL}",'
                          f'moe_ep_rank="0",pp_rank="0",tp_rank="0"}}')
    return total


def have_gateway():
    return os.path.exists(os.path.join(BUILDDIR, "infergate"))


def target(sims):
    """The gateway in front of the sims when it is built, else the first sim."""
    if have_gateway():
        gw = start_gateway(sims)
        wait_until(lambda: http("GET", gw.url + "/v1/models")[0] == 200, timeout=10,
                   what="gateway lists models")
        return gw.url
    return sims[0].url


def direct_body(corpus_line):
    """The body infergate-bulk sends for a generated line with --model m."""
    b = dict(corpus_line["body"])
    b.setdefault("model", MODEL)
    return b


def answer_of(body, kind="chat"):
    c = body["choices"][0]
    text = c["message"]["content"] if kind == "chat" else c["text"]
    u = body["usage"]
    return text, c["finish_reason"], u["prompt_tokens"], u["completion_tokens"]


def check_bodies(corpus, output, sim, sample, kind="chat"):
    """Output bodies equal what the sim answers directly for the same prompts."""
    by_id = {o["custom_id"]: o for o in lines(output)}
    corpus_lines = lines(corpus)
    picked = random.Random(7).sample(corpus_lines, min(sample, len(corpus_lines)))
    path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"

    def one(cl):
        status, _, direct = http_json("POST", sim.url + path, direct_body(cl))
        assert status == 200, direct
        got = by_id[cl["custom_id"]]
        assert got["error"] is None and got["response"]["status_code"] == 200, got
        assert answer_of(got["response"]["body"], kind) == answer_of(direct, kind), (cl["custom_id"], got, direct)
    parallel(one, picked, workers=16)


def exactly_once(corpus, out, errs):
    want = input_ids(corpus)
    got_out, got_err = ids(out), ids(errs)
    assert len(got_out) == len(set(got_out)), "an id twice in the output"
    assert not set(got_out) & set(got_err), "an id in both files"
    assert sorted(got_out + got_err) == sorted(want), (len(got_out), len(got_err), len(want))


# ----------------------------------------------------------------- running

@test
def ten_thousand_through_gateway_and_seven_sims():
    need_binary("infergate")
    d = Dir()
    sims = start_sims(7, *UNPACED)
    url = target(sims)
    generate(d("c.jsonl"), 10000, seed=11)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", url, "--model", MODEL,
                        "--concurrency", 64, "--summary-json", d("s.json"))
    assert rc == 0, (rc, out, err)
    got = ids(d("o.jsonl"))
    assert len(got) == 10000 and len(set(got)) == 10000
    assert sorted(got) == sorted(input_ids(d("c.jsonl")))
    assert lines(d("o.errors.jsonl")) == []
    served = [metric(http("GET", s.url + "/metrics")[2], f'infergate_sim_requests_served_total{{model_name="{MODEL}"}}')
              for s in sims]
    assert sum(served) >= 10000 and min(served) > 0, served  # spread over all seven
    check_bodies(d("c.jsonl"), d("o.jsonl"), sims[3], 400)
    s = json.load(open(d("s.json")))
    assert s["ok"] == 10000 and s["errors"] == 0 and s["complete"] is True, s
    print(f"# 10,000 prompts via the gateway: {s['requests_per_s']:.0f} req/s, "
          f"latency p50 {s['latency_ms']['p50']:.1f} ms p99 {s['latency_ms']['p99']:.1f} ms")


@test
def concurrency_far_above_the_slots_waits_in_the_gateway_not_in_errors():
    # 1,200 prompts at concurrency 1,100 through servers of 2, 4 and 6 slots (0.05 s a
    # request): the servers queue at first, the gateway learns their slots and holds the
    # surplus, over 1,024 of them (default settings: the queue was 1,024 long before), and the
    # run completes with no request refused, timed out or retried. (How the work splits is not
    # asserted: most of this burst reaches the servers before their first load report, evenly.)
    need_binary("infergate")
    d = Dir()
    sims = [start_sim("--model", MODEL, "--max-running", n, "--tokens-per-second", "200",
                      "--ttft-ms", "0", "--output-tokens", "10") for n in (2, 4, 6)]
    gw = start_gateway(sims, "--health-interval-ms", "200")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 3, timeout=10,
               what="3 healthy backends")
    generate(d("c.jsonl"), 1200, seed=12)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", gw.url,
                        "--model", MODEL, "--concurrency", 1100, "--summary-json", d("s.json"))
    assert rc == 0, (rc, out, err)
    s = json.load(open(d("s.json")))
    assert s["ok"] == 1200 and s["errors"] == 0 and s["retries"] == 0, s
    assert len(set(ids(d("o.jsonl")))) == 1200
    m = http("GET", gw.url + "/metrics")[2]
    assert metric(m, "infergate_queue_rejected_total") == 0
    assert metric(m, "infergate_queue_timeouts_total") == 0
    b = {x["url"]: x for x in http_json("GET", gw.url + "/health/backends")[2]["backends"]}
    learned = [b[sim.url].get("learned_slots") for sim in sims]
    assert learned[0] in (2, 3) and learned[1] in (4, 5) and learned[2] in (6, 7), learned


@test
def direct_to_one_sim_bodies_match():
    d = Dir()
    sim = start_sim(*UNPACED)
    generate(d("c.jsonl"), 1500, seed=5, kind="completions")
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url + "/v1",
                        "--model", MODEL, "--concurrency", 32)
    assert rc == 0, (rc, out, err)
    assert "complete" in out and "1500 ok" in out, out
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))
    check_bodies(d("c.jsonl"), d("o.jsonl"), sim, 300, kind="completions")
    o = lines(d("o.jsonl"))[0]
    assert set(o) == {"id", "custom_id", "response", "error"} and o["id"].startswith("batch_req_"), o
    assert set(o["response"]) == {"status_code", "request_id", "body"}, o


@test
def stream_rebuilds_bodies_and_measures_ttft():
    d = Dir()
    sim = start_sim("--model", MODEL, "--tokens-per-second", "0", "--ttft-ms", "20")
    generate(d("c.jsonl"), 300, seed=9)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
                        "--stream", "--concurrency", 50, "--summary-json", d("s.json"))
    assert rc == 0, (rc, out, err)
    assert "ttft" in out, out
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))
    body = lines(d("o.jsonl"))[0]["response"]["body"]
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant", body
    check_bodies(d("c.jsonl"), d("o.jsonl"), sim, 100)   # streamed == asked directly without stream
    s = json.load(open(d("s.json")))
    assert s["ttft_ms"]["count"] == 300 and 15 <= s["ttft_ms"]["p50"] <= s["ttft_ms"]["p99"], s["ttft_ms"]


@test
def kill_9_then_resume_is_exactly_once():
    d = Dir()
    sims = start_sims(7, "--model", MODEL, "--tokens-per-second", "0", "--ttft-ms", "2")
    url = target(sims)
    n = 10000
    generate(d("c.jsonl"), n, seed=21)
    args = ["--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", url, "--model", MODEL,
            "--concurrency", 64]
    p = start([binary("infergate-bulk"), *args])
    cut = random.randint(500, 8000)
    wait_until(lambda: p.poll() is not None or (os.path.exists(d("o.jsonl"))
                                                 and os.path.getsize(d("o.jsonl")) > cut * 600),
               timeout=60, interval=0.005, what="some output")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = len(ids_lenient(d("o.jsonl")))
    rc, out, err = bulk(*args)                       # no --resume: refused
    assert rc == 2 and "--resume" in err, (rc, err)
    rc, out, err = bulk(*args, "--resume", "--summary-json", d("s.json"))
    assert rc == 0, (rc, out, err)
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))
    s = json.load(open(d("s.json")))
    assert s["resumed_ok"] >= before - 1 and s["resumed_ok"] + s["ok"] == n, (before, s)
    print(f"# killed after ~{before} lines, resumed {s['resumed_ok']}, sent {s['ok']} more")


def ids_lenient(path):
    """Ids of the complete lines (a kill -9 may leave a torn last line)."""
    out = []
    with open(path) as f:
        for line in f:
            try:
                out.append(json.loads(line)["custom_id"])
            except ValueError:
                pass
    return out


@test
def torn_last_line_is_cut_on_resume():
    d = Dir()
    sim = start_sim(*UNPACED)
    generate(d("c.jsonl"), 200)
    args = ["--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL]
    rc, out, err = bulk(*args, "--shard", "0/2")
    assert rc == 0, (rc, err)
    with open(d("o.jsonl"), "a") as f:
        f.write('{"id":"batch_req_x","custom_id":"req-000000002","respo')   # a crash mid-write
    rc, out, err = bulk(*args, "--resume")
    assert rc == 0, (rc, out, err)
    assert "torn" in err, err
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))


@test
def resume_of_a_prefix_sends_every_later_line():
    """Ids done only near the start; the lines far beyond them must all be sent
    (regression: the done-bitmap was sized by the last done line)."""
    d = Dir()
    sim = start_sim(*UNPACED)
    generate(d("c.jsonl"), 40000, seed=8)
    with open(d("c.jsonl")) as f, open(d("head.jsonl"), "w") as h:
        for _ in range(500):
            h.write(f.readline())
    common = ["--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL, "--concurrency", 64]
    rc, out, err = bulk("--input", d("head.jsonl"), *common)
    assert rc == 0, (rc, out, err)
    rc, out, err = bulk("--input", d("c.jsonl"), *common, "--resume", "--summary-json", d("s.json"))
    assert rc == 0, (rc, out, err)
    s = json.load(open(d("s.json")))
    assert s["resumed_ok"] == 500 and s["ok"] == 39500, s
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))


@test
def sigint_stops_gracefully_and_resumes():
    d = Dir()
    sim = start_sim("--model", MODEL, "--tokens-per-second", "200", "--ttft-ms", "0", "--output-tokens", "20")
    generate(d("c.jsonl"), 2000)
    args = ["--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
            "--concurrency", 32, "--summary-json", d("s.json")]
    p = start([binary("infergate-bulk"), *args])
    wait_until(lambda: os.path.exists(d("o.jsonl")) and os.path.getsize(d("o.jsonl")) > 50000,
               timeout=30, what="some output")
    os.killpg(p.pid, signal.SIGINT)
    rc = p.wait(timeout=30)
    assert rc == 3, (rc, p.read_log())
    assert "stopping" in p.read_log(), p.read_log()
    s = json.load(open(d("s.json")))
    assert s["interrupted"] is True and s["complete"] is False and 0 < s["ok"] < 2000, s
    assert len(ids(d("o.jsonl"))) == s["ok"]                      # every line whole
    rc, out, err = bulk(*args, "--resume", "--concurrency", 200)
    assert rc == 0, (rc, out, err)
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))


@test
def fail_rate_is_retried_into_the_output():
    d = Dir()
    sim = start_sim(*UNPACED, "--fail-rate", "0.2", "--seed", "3")
    generate(d("c.jsonl"), 2000, seed=2)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
                        "--retries", 12, "--backoff-ms", 5, "--summary-json", d("s.json"))
    assert rc == 0, (rc, out, err)
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))
    assert lines(d("o.errors.jsonl")) == []
    s = json.load(open(d("s.json")))
    assert 200 < s["retries"] < 1000 and s["attempts"] == 2000 + s["retries"], s


@test
def fail_rate_through_gateway_still_completes():
    need_binary("infergate")
    d = Dir()
    sims = start_sims(7, *UNPACED, "--fail-rate", "0.2")
    url = target(sims)
    generate(d("c.jsonl"), 3000, seed=4)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", url, "--model", MODEL,
                        "--retries", 12, "--backoff-ms", 5)
    assert rc == 0, (rc, out, err)
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))
    assert lines(d("o.errors.jsonl")) == []


@test
def http_400_is_not_retried_and_lands_in_errors():
    d = Dir()
    sim = start_sim(*UNPACED)
    good = {"messages": [{"role": "user", "content": "hello"}]}
    write_lines(d("c.jsonl"), [dict(good, custom_id=f"g{i}") for i in range(5)]
                + [{"custom_id": "bad", "messages": [1]}])
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
                        "--summary-json", d("s.json"), "--backoff-ms", 1)
    assert rc == 1, (rc, out, err)
    e = lines(d("o.errors.jsonl"))
    assert len(e) == 1 and e[0]["custom_id"] == "bad", e
    assert e[0]["error"]["code"] == "http_400" and e[0]["error"]["message"], e
    # The server's own body, as it answered (SGLang's flat error), and its message.
    assert e[0]["response"]["status_code"] == 400 and e[0]["response"]["body"]["object"] == "error", e
    assert e[0]["error"]["message"] == e[0]["response"]["body"]["message"], e
    assert sorted(ids(d("o.jsonl"))) == [f"g{i}" for i in range(5)]
    _, _, text = http("GET", sim.url + "/metrics")
    assert metric(text, f'infergate_sim_requests_invalid_total{{model_name="{MODEL}"}}') == 1   # sent once
    s = json.load(open(d("s.json")))
    assert s["errors_by_code"] == {"http_400": 1} and s["retries"] == 0, s
    # resuming a finished run sends nothing and keeps exit 1 (a line is in the errors file)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
                        "--resume")
    assert rc == 1 and "6 done, 0 remaining" in out, (rc, out)


@test
def streams_that_fail_midway_are_retried_into_the_output():
    # A fifth of the streams end with SGLang's error event after half their tokens (HTTP 200
    # already sent). Each is a failed attempt, retried; none becomes an output line. (The
    # gateway does not continue them here: --continue-max 0; test_faults.py has that.)
    need_binary("infergate")
    d = Dir()
    sims = start_sims(2, *UNPACED, "--stream-fail-rate", "0.2", "--seed", "5")
    gw = start_gateway(sims, "--continue-max", "0")
    wait_until(lambda: http("GET", gw.url + "/v1/models")[0] == 200, timeout=10, what="gateway lists models")
    generate(d("c.jsonl"), 500, seed=11)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", gw.url, "--model", MODEL,
                        "--stream", "--retries", 12, "--backoff-ms", 5, "--concurrency", 32,
                        "--summary-json", d("s.json"))
    assert rc == 0, (rc, out, err)
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))
    assert lines(d("o.errors.jsonl")) == []
    failed = sum(metric(http("GET", sim.url + "/metrics")[2],
                        f'infergate_sim_requests_stream_failed_total{{model_name="{MODEL}"}}') for sim in sims)
    s = json.load(open(d("s.json")))
    assert 50 < failed < 250 and s["retries"] == failed and s["attempts"] == 500 + failed, (failed, s)
    for o in lines(d("o.jsonl")):   # whole answers only
        b = o["response"]["body"]
        assert b["choices"][0]["finish_reason"] in ("stop", "length"), o
        assert b["usage"]["completion_tokens"] > 0, o
    _, _, text = http("GET", gw.url + "/metrics")
    assert metric(text, "infergate_stream_errors_total") == failed, failed


@test
def sglang_errors_land_in_errors_with_the_servers_message_and_code():
    # SGLang's context-length check answers 400 with its flat error body (streamed or not:
    # its serving code validates before the 200); a request that fails after its 200 gets
    # `data: {"error": {..., "code": 400}}` then [DONE] (tests/fixtures/sglang-error-stream.sse).
    # Both: not retried, filed as http_400 with the server's message, never an output line.
    d = Dir()
    sim = start_sim(*UNPACED, "--context-length", "64")
    write_lines(d("c.jsonl"), [{"custom_id": "ok", "prompt": "short", "max_tokens": 8},
                               {"custom_id": "long", "prompt": "short", "max_tokens": 500}])
    for stream in ((), ("--stream",)):
        for f in ("o.jsonl", "o.errors.jsonl"):
            if os.path.exists(d(f)):
                os.unlink(d(f))
        rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
                            *stream, "--backoff-ms", 1, "--summary-json", d("s.json"))
        assert rc == 1, (stream, rc, out, err)
        assert ids(d("o.jsonl")) == ["ok"]
        e = lines(d("o.errors.jsonl"))
        assert len(e) == 1 and e[0]["custom_id"] == "long", e
        assert e[0]["error"]["code"] == "http_400", e
        assert "maximum context length of 64 tokens" in e[0]["error"]["message"], e
        s = json.load(open(d("s.json")))
        assert s["retries"] == 0 and s["errors_by_code"] == {"http_400": 1}, s

    events = fixture("sglang-error-stream.sse")
    fb = FakeBackend(lambda fb, req, sock: (FakeBackend.reply(sock, 200, events, "text/event-stream")
                                            if req["method"] == "POST" else FakeBackend.answer_ok(fb, req, sock))
                     or True, model=MODEL)
    write_lines(d("c2.jsonl"), [{"custom_id": "x", "messages": [{"role": "user", "content": "hi"}]}])
    rc, out, err = bulk("--input", d("c2.jsonl"), "--output", d("o2.jsonl"), "--url", fb.url, "--model", MODEL,
                        "--stream", "--backoff-ms", 1, "--summary-json", d("s2.json"))
    assert rc == 1, (rc, out, err)
    assert lines(d("o2.jsonl")) == []
    e = lines(d("o2.errors.jsonl"))
    assert len(e) == 1 and e[0]["error"]["code"] == "http_400", e
    assert e[0]["error"]["message"].startswith("Requested token count exceeds"), e
    assert e[0]["response"]["status_code"] == 200 and e[0]["response"]["body"]["error"]["code"] == 400, e
    assert len(fb.posts()) == 1   # not retried


@test
def hung_server_times_out_and_is_retried_then_given_up():
    d = Dir()
    sim = start_sim(*UNPACED)
    status, _, _ = http("POST", sim.url + "/sim/fault", {"mode": "hang"})
    assert status == 200
    write_lines(d("c.jsonl"), [{"custom_id": f"h{i}", "prompt": "x"} for i in range(3)])
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
                        "--idle-timeout-s", 1, "--retries", 1, "--backoff-ms", 10)
    assert rc == 1, (rc, out, err)
    e = lines(d("o.errors.jsonl"))
    assert sorted(x["custom_id"] for x in e) == ["h0", "h1", "h2"], e
    assert all(x["error"]["code"] == "timeout" and x["response"] is None
               and "2 attempts" in x["error"]["message"] for x in e), e


@test
def full_disk_stops_cleanly_and_resumes():
    d = Dir()
    sim = start_sim(*UNPACED)
    generate(d("c.jsonl"), 1000)
    args = ["--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL]

    def small_files():  # a file size limit fails write(2) like a full disk does
        resource.setrlimit(resource.RLIMIT_FSIZE, (300000, 300000))
    rc, out, err = bulk(*args, preexec_fn=small_files)
    assert rc == 3, (rc, out, err)
    assert "cannot write" in err and "--resume" in err, err
    assert os.path.getsize(d("o.jsonl")) <= 300000
    partial = ids(d("o.jsonl"))                      # whole lines only
    assert 0 < len(partial) < 1000
    rc, out, err = bulk(*args, "--resume")
    assert rc == 0, (rc, out, err)
    exactly_once(d("c.jsonl"), d("o.jsonl"), d("o.errors.jsonl"))


# --------------------------------------------------------------- preflight

@test
def each_preflight_error_exits_2_having_sent_nothing():
    d = Dir()
    sim = start_sim(*UNPACED)
    generate(d("good.jsonl"), 50)
    base = ["--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL]
    bad_line = [json.dumps({"prompt": "a"}), json.dumps({"prompt": "b"}), "{oops", json.dumps({"prompt": "c"})]
    write_lines(d("bad.jsonl"), bad_line)
    dup = [{"custom_id": f"x{i}", "prompt": "p"} for i in range(5)] + [{"custom_id": "x1", "prompt": "q"}]
    write_lines(d("dup.jsonl"), dup)
    write_lines(d("empty.jsonl"), [])
    write_lines(d("exists.jsonl"), ['{"custom_id":"old"}'])
    cases = [
        ("bad line", ["--input", d("bad.jsonl"), *base], "line 3: not JSON"),
        ("duplicate id", ["--input", d("dup.jsonl"), *base], "line 6: duplicate custom_id 'x1' (first at line 2)"),
        ("empty file", ["--input", d("empty.jsonl"), *base], "no request lines"),
        ("unknown model", ["--input", d("good.jsonl"), "--output", d("o.jsonl"), "--url", sim.url,
                           "--model", "nope"], "model 'nope'"),
        ("unreachable url", ["--input", d("good.jsonl"), "--output", d("o.jsonl"), "--model", MODEL,
                             "--url", "http://127.0.0.1:1"], "cannot reach http://127.0.0.1:1/v1/models"),
        ("existing output", ["--input", d("good.jsonl"), "--output", d("exists.jsonl"), "--url", sim.url,
                             "--model", MODEL], "exists: give --resume"),
        ("missing input", ["--input", d("nothing.jsonl"), *base], "nothing.jsonl"),
        ("bad flag", ["--input", d("good.jsonl"), *base, "--concurrency", "0"], "--concurrency"),
        ("unknown flag", ["--input", d("good.jsonl"), *base, "--concurency", "5"], "unknown flag"),
        ("bad shard", ["--input", d("good.jsonl"), *base, "--shard", "2/2"], "--shard"),
        ("unset key", ["--input", d("good.jsonl"), *base, "--api-key-env", "IG_BULK_TEST_UNSET"], "not set"),
        ("not writable", ["--input", d("good.jsonl"), "--output", "/proc/nope/o.jsonl", "--url", sim.url,
                          "--model", MODEL], "not writable"),
    ]
    for name, args, want in cases:
        rc, out, err = bulk(*args)
        assert rc == 2, (name, rc, out, err)
        assert want in err, (name, err)
        assert not os.path.exists(d("o.jsonl")), name
    with open(d("exists.jsonl")) as f:
        assert f.read() == '{"custom_id":"old"}\n'          # untouched
    assert sim_requests(sim) == 0


@test
def dry_run_prints_the_plan_and_sends_nothing():
    d = Dir()
    sim = start_sim(*UNPACED)
    generate(d("c.jsonl"), 120)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
                        "--shard", "1/4", "--concurrency", 7, "--dry-run")
    assert rc == 0, (rc, out, err)
    for want in ("120 request lines", "1/4: 30 lines selected", "to send      30", "m (30)", "concurrency  7",
                 "dry run"):
        assert want in out, (want, out)
    assert not os.path.exists(d("o.jsonl"))
    assert sim_requests(sim) == 0


@test
def shards_partition_the_corpus():
    d = Dir()
    sim = start_sim(*UNPACED)
    with open(d("c.jsonl"), "w") as f:
        for i in range(100):
            f.write(json.dumps({"custom_id": f"s{i}", "prompt": f"p {i}"}) + "\n")
            if i % 10 == 0:
                f.write("\n")        # blank lines have no index
    got = []
    for k in range(3):
        rc, out, err = bulk("--input", d("c.jsonl"), "--output", d(f"o{k}.jsonl"), "--url", sim.url,
                            "--model", MODEL, "--shard", f"{k}/3")
        assert rc == 0, (rc, out, err)
        shard_ids = ids(d(f"o{k}.jsonl"))
        assert sorted(shard_ids) == sorted(f"s{i}" for i in range(100) if i % 3 == k), (k, shard_ids)
        got += shard_ids
    assert sorted(got) == sorted(f"s{i}" for i in range(100))


@test
def summary_json_and_progress_file():
    d = Dir()
    sim = start_sim("--model", MODEL, "--tokens-per-second", "0", "--ttft-ms", "300")
    generate(d("c.jsonl"), 400)
    args = ["--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", sim.url, "--model", MODEL,
            "--concurrency", 20, "--progress-file", d("p.json"), "--summary-json", d("s.json"),
            "--progress-interval-s", 1]
    p = start([binary("infergate-bulk"), *args])
    seen = wait_until(lambda: os.path.exists(d("p.json")) and json.load(open(d("p.json"))),
                      timeout=20, what="progress file")
    for k in ("state", "done", "total", "percent", "ok", "errors", "in_flight", "requests_per_s",
              "output_tokens_per_s", "eta_s", "elapsed_s"):
        assert k in seen, (k, seen)
    assert seen["total"] == 400
    mid = wait_until(lambda: (lambda j: j if j["state"] == "running" and j["done"] > 0 else None)(
        json.load(open(d("p.json")))), timeout=20, what="progress moving")
    assert mid["in_flight"] == 20, mid                    # exactly --concurrency in flight
    assert p.wait(timeout=60) == 0, p.read_log()
    assert "progress: " in p.read_log()                   # plain lines when not a terminal
    final = json.load(open(d("p.json")))
    assert final["state"] == "finished" and final["done"] == 400 and final["percent"] == 100.0, final
    s = json.load(open(d("s.json")))
    for k in ("complete", "exit_code", "selected", "ok", "errors", "wall_time_s", "requests_per_s",
              "input_tokens", "output_tokens", "output_tokens_per_s", "latency_ms", "ttft_ms",
              "errors_by_code", "retries", "resumed_ok"):
        assert k in s, (k, s)
    assert s["ok"] == 400 and s["complete"] and s["exit_code"] == 0, s
    assert s["output_tokens"] == sum(o["response"]["body"]["usage"]["completion_tokens"]
                                     for o in lines(d("o.jsonl")))
    assert 290 <= s["latency_ms"]["p50"] <= s["latency_ms"]["p90"] <= s["latency_ms"]["p99"] < 3000, s
    assert s["ttft_ms"] is None


@test
def api_key_is_sent_as_bearer():
    d = Dir()
    need_binary("infergate-sim")
    # a one-shot recorder: the sim does not check keys, so look at the bytes
    import http.server
    import threading
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Authorization"))
            body = json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            seen.append(self.headers.get("Authorization"))
            self.rfile.read(int(self.headers["Content-Length"]))
            body = json.dumps({"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": "t"}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        write_lines(d("c.jsonl"), [{"prompt": "a"}])
        rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--model", MODEL,
                            "--url", f"http://127.0.0.1:{srv.server_address[1]}",
                            "--api-key-env", "IG_BULK_KEY", env={"IG_BULK_KEY": "sk-test-123"})
        assert rc == 0, (rc, out, err)
        assert seen == ["Bearer sk-test-123"] * 2, seen   # /v1/models, the completion
    finally:
        srv.shutdown()



@test
def lines_without_a_model_go_to_the_one_model_the_gateway_serves():
    # `infergate-bulk generate` writes lines with no model; without --model, against a gateway
    # (or server) that serves exactly one, they go to it, and the run says so. Against one that
    # serves two, nothing is sent and the message names --model.
    d = Dir()
    generate(d("c.jsonl"), 20)
    sim = start_sim(*UNPACED)
    url = target([sim])
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", url)
    assert rc == 0, err
    assert f"lines that name no model go to '{MODEL}', the one model {url} serves" in err, err
    assert sorted(ids(d("o.jsonl"))) == sorted(input_ids(d("c.jsonl")))
    assert all(x["response"]["body"]["model"] == MODEL for x in lines(d("o.jsonl")))
    if not have_gateway():
        return
    other = start_sim("--model", "other", "--tokens-per-second", "0", "--ttft-ms", "0")
    two = target([sim, other])
    before = sim_requests(sim)
    rc, out, err = bulk("--input", d("c.jsonl"), "--output", d("o2.jsonl"), "--url", two)
    assert rc == 2 and "preflight failed, nothing was sent" in err and "no model: give --model" in err, (rc, err)
    assert sim_requests(sim) == before
    # `generate --model M` writes it into every line
    generate_args = ("generate", "--count", "3", "--model", "other", "--output", d("m.jsonl"))
    assert bulk(*generate_args)[0] == 0
    assert all(x["body"]["model"] == "other" for x in lines(d("m.jsonl")))

run()
