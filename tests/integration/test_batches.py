"""The Batch API on the gateway (issue 20): a batch created by the official
npm client runs to completed and its output equals direct answers; kill -9 of
the gateway three times mid-batch loses and repeats no line; a bad input file
fails in validation naming its lines with nothing sent; cancel stops sending
and keeps a whole partial output; batches and their files belong to their
key; a full disk pauses a batch and it resumes when space returns; finished
batches go after batches.retention_s."""

import json
import os
import signal
import subprocess
import time

from harness import (Dir, Skip, bulk, http, http_json, keys_file, need_binary, run, run_client, start_gateway,
                     start_sim, test, upload, wait_until)

FAST = ("--model", "m", "--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "8")


def slow(ttft_ms):
    return ("--model", "m", "--tokens-per-second", "0", "--ttft-ms", str(ttft_ms), "--output-tokens", "4",
            "--context-length", "100000")


def line(i, model="m", url="/v1/chat/completions", **body):
    b = {"model": model, "messages": [{"role": "user", "content": f"question {i}: what is {i} times 7?"}]}
    b.update(body)
    return {"custom_id": f"r{i}", "method": "POST", "url": url, "body": b}


def write_corpus(path, objs):
    with open(path, "w") as f:
        for o in objs:
            f.write((o if isinstance(o, str) else json.dumps(o)) + "\n")


def create(gw, file_id, headers=None, **extra):
    body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **extra}
    return http_json("POST", gw.url + "/v1/batches", body, headers=headers)


def get(gw, bid, headers=None):
    st, _, b = http_json("GET", f"{gw.url}/v1/batches/{bid}", headers=headers)
    assert st == 200, (st, b)
    return b


def until_status(gw, bid, statuses, timeout=120, headers=None):
    got = {}

    def done():
        got["b"] = get(gw, bid, headers)
        return got["b"]["status"] in statuses
    wait_until(done, timeout=timeout, interval=0.1, what=f"batch {bid} {statuses}")
    return got["b"]


def start_batch(d, gw, objs, name="c.jsonl"):
    """objs written as a corpus, uploaded, and a batch of it created: the batch's id."""
    write_corpus(d(name), objs)
    st, f = upload(gw, open(d(name), "rb").read())
    assert st == 200, f
    st, _, b = create(gw, f["id"])
    assert st == 200 and b["status"] == "validating", b
    return b["id"]


def until_completed(gw, bid, k):
    wait_until(lambda: get(gw, bid)["request_counts"]["completed"] >= k, timeout=60, interval=0.02,
               what=f"{k} lines of {bid} completed")


def content(gw, file_id, headers=None):
    st, _, raw = http("GET", f"{gw.url}/v1/files/{file_id}/content", headers=headers)
    assert st == 200, (st, raw[:300])
    return [json.loads(x) for x in raw.decode().splitlines()]


def exactly_once(want_ids, *files):
    seen = [o["custom_id"] for f in files for o in f]
    assert len(seen) == len(set(seen)), [i for i in set(seen) if seen.count(i) > 1][:10]
    assert set(seen) == set(want_ids), (len(set(seen)), len(want_ids), sorted(set(want_ids) - set(seen))[:10])


def gateway(d, sims, *extra, port=None):
    return start_gateway(sims, "--data-dir", d("data"), *extra, port=port)


def strip(body):
    """An answer without what differs between two calls (its id and time)."""
    return {k: v for k, v in body.items() if k not in ("id", "created")}


@test
def the_official_client_runs_a_batch_and_gets_the_direct_answers():
    need_binary("infergate")
    d = Dir()
    sims = [start_sim(*FAST) for _ in range(2)]
    gw = gateway(d, sims)
    n = 10000
    write_corpus(d("c.jsonl"), (line(i) for i in range(n)))
    out = run_client(gw, "m", "batch", d("c.jsonl"), d("out.jsonl"), timeout=300)
    b = out["batch"]
    assert b["status"] == "completed" and out["seen"][0] == "validating" and out["seen"][-1] == "completed", out
    assert "in_progress" in out["seen"] or "finalizing" in out["seen"] or len(out["seen"]) == 2, out["seen"]
    assert b["request_counts"] == {"total": n, "completed": n, "failed": 0}, b
    assert b["metadata"] == {"run": "npm"} and b["error_file_id"] is None and b["id"] in out["listed"], out
    assert b["in_progress_at"] >= b["created_at"] and b["completed_at"] >= b["finalizing_at"] > 0, b
    got = [json.loads(x) for x in open(d("out.jsonl"))]
    exactly_once([f"r{i}" for i in range(n)], got)
    assert all(o["response"]["status_code"] == 200 and o["error"] is None for o in got)
    # the same corpus sent directly (infergate-bulk, normal class): the same answers, line for line
    rc, _, err = bulk("--input", d("c.jsonl"), "--output", d("direct.jsonl"), "--url", gw.url,
                      "--concurrency", "64", timeout=300)
    assert rc == 0, err
    direct = {o["custom_id"]: strip(o["response"]["body"]) for o in map(json.loads, open(d("direct.jsonl")))}
    diff = [o["custom_id"] for o in got if strip(o["response"]["body"]) != direct[o["custom_id"]]]
    assert not diff, (len(diff), diff[:5])
    # the output file is a File of the batch's owner, listed with purpose batch_output
    st, _, f = http_json("GET", f"{gw.url}/v1/files/{b['output_file_id']}")
    assert st == 200 and f["purpose"] == "batch_output" and f["bytes"] == os.path.getsize(d("out.jsonl")), f


@test
def infergate_bulk_submit_runs_a_corpus_through_the_gateway():
    # the command line's way to the same API: upload, create, follow, download; a key's own
    d = Dir()
    sim = start_sim(*FAST)
    auth = keys_file(d("keys.json"), "alice")[0]
    gw = gateway(d, [sim], "--api-keys-file", d("keys.json"))
    n = 3000
    write_corpus(d("c.jsonl"), (line(i, **({"messages": []} if i == 7 else {})) for i in range(n)))
    rc, out, err = bulk("submit", "--input", d("c.jsonl"), "--url", gw.url, "--output", d("o.jsonl"),
                        "--poll-s", "1", env={"OPENAI_API_KEY": auth["Authorization"][len("Bearer "):]})
    got, errs = [json.loads(x) for x in open(d("o.jsonl"))], [json.loads(x) for x in open(d("o.errors.jsonl"))]
    assert rc == 1, (rc, out, err)                # one line the backend refused: exit 1, in the errors file
    exactly_once([f"r{i}" for i in range(n)], got, errs)
    assert [o["custom_id"] for o in errs] == ["r7"] and errs[0]["response"]["status_code"] == 400, errs
    bid = http_json("GET", gw.url + "/v1/batches", headers=auth)[2]["data"][0]["id"]
    assert bid in out + err and get(gw, bid, auth)["status"] == "completed"


@test
def kill_9_three_times_and_every_line_ends_once():
    d = Dir()
    # 32 slots each, stated in their load reports: 64 in flight, 150 ms a line, about 9 s for all,
    # so that the three moments below are apart
    sims = [start_sim(*slow(150), "--max-running", "32") for _ in range(2)]
    gw = gateway(d, sims)
    port = gw.port
    n = 4000
    # every 97th line asks for more tokens than the model has: a 400, so the errors file is used too
    bid = start_batch(d, gw, (line(i, **({"max_tokens": 10 ** 6} if i % 97 == 5 else {})) for i in range(n)))
    for frac in (0.1, 0.45, 0.8):      # three different moments
        until_completed(gw, bid, frac * n)
        if frac == 0.45:   # while it runs, its requests are class low, and no other class is busy
            classes = http_json("GET", gw.url + "/health/backends")[2]["gateway"]["classes"]
            assert classes["low"]["inflight"] > 0 and classes["normal"]["inflight"] == 0, classes
        gw.send_signal(signal.SIGKILL)
        gw.wait()
        gw = gateway(d, sims, port=port)
        left = get(gw, bid)
        assert left["status"] == "in_progress", left
        assert left["request_counts"]["completed"] >= frac * n, (frac, left)   # what was written stays written
        assert "1 unfinished batch(es) go on where they stopped" in gw.read_log()
    b = until_status(gw, bid, ("completed",), timeout=180)
    bad = [f"r{i}" for i in range(n) if i % 97 == 5]
    assert b["request_counts"] == {"total": n, "completed": n - len(bad), "failed": len(bad)}, b
    out, errs = content(gw, b["output_file_id"]), content(gw, b["error_file_id"])
    exactly_once([f"r{i}" for i in range(n)], out, errs)
    assert sorted(o["custom_id"] for o in errs) == sorted(bad), errs[:3]
    assert all(o["response"]["status_code"] == 400 for o in errs), errs[0]


@test
def two_batches_share_the_slots_evenly():
    d = Dir()
    sims = [start_sim("--model", "m", "--max-running", "8", "--tokens-per-second", "0", "--ttft-ms", "100",
                      "--output-tokens", "4") for _ in range(2)]
    gw = gateway(d, sims)
    n = 1500
    bids = []
    for tag in ("a", "b"):
        bids.append(start_batch(d, gw, (dict(line(i), custom_id=f"{tag}{i}") for i in range(n)), f"{tag}.jsonl"))
    # once the slots are learned (16 in all), each batch holds half of them plus the queue's margin
    wait_until(lambda: sum(b.get("learned_slots") or 0 for b in http_json("GET", gw.url + "/health/backends")[2]
                           ["backends"]) == 16, timeout=30, what="16 learned slots")
    time.sleep(1.5)
    samples = []
    for _ in range(10):
        a, b = (get(gw, x) for x in bids)
        if a["status"] == b["status"] == "in_progress":
            samples.append((a["infergate"]["in_flight"], b["infergate"]["in_flight"]))
        time.sleep(0.1)
    # (read one after the other, between two refills: compare the means)
    ma, mb = (sum(v) / len(samples) for v in zip(*samples)) if samples else (0, 0)
    assert len(samples) >= 5 and ma >= 5 and mb >= 5 and abs(ma - mb) <= 2, samples
    assert all(x + y <= 16 + 16 // 8 + 4 + 2 for x, y in samples), samples
    for tag, bid in zip(("a", "b"), bids):
        b = until_status(gw, bid, ("completed",), timeout=120)
        exactly_once([f"{tag}{i}" for i in range(n)], content(gw, b["output_file_id"]))


@test
def sigterm_mid_batch_writes_what_finished_and_the_restart_sends_the_rest():
    # lines waiting to be retried (the backend fails a tenth of them) and lines in flight at
    # SIGTERM: the answers in flight are written, nothing is written as failed because the
    # gateway was stopping, and the restart completes every line once
    d = Dir()
    sim = start_sim(*slow(100), "--fail-rate", "0.1")
    gw = gateway(d, [sim])
    port = gw.port
    n = 1000
    bid = start_batch(d, gw, (line(i) for i in range(n)))
    until_completed(gw, bid, 100)
    assert gw.stop(signal.SIGTERM, timeout=25) == 0, gw.read_log()[-2000:]
    assert "Terminated" in gw.read_log()
    gw = gateway(d, [sim], port=port)
    b = until_status(gw, bid, ("completed",), timeout=180)
    out = content(gw, b["output_file_id"])
    errs = content(gw, b["error_file_id"]) if b["error_file_id"] else []
    exactly_once([f"r{i}" for i in range(n)], out, errs)
    assert all(o["response"]["status_code"] == 500 for o in errs), errs[:2]   # 8 tries of the sim's 500


@test
def a_bad_file_fails_in_validation_naming_its_lines():
    d = Dir()
    sim = start_sim(*FAST)
    gw = gateway(d, [sim])
    good = [line(i) for i in range(8)]
    rows = [good[0], good[1], '{"custom_id": "torn", "method": "POST", "url": "/v1/chat/completions", "bo',
            good[2], dict(good[3], custom_id="r0"), line(5, model="nope"),
            {"custom_id": "r6", "method": "POST", "url": "/v1/completions", "body": {"model": "m", "prompt": "x"}},
            good[7]]
    write_corpus(d("bad.jsonl"), rows)
    st, f = upload(gw, open(d("bad.jsonl"), "rb").read())
    st, _, b = create(gw, f["id"])
    assert st == 200, b
    b = until_status(gw, b["id"], ("failed",), timeout=20)
    errs = b["errors"]["data"]
    by_line = {e["line"]: e for e in errs}
    assert sorted(by_line) == [3, 5, 6, 7], errs
    assert by_line[5]["code"] == "duplicate_custom_id" and "first at line 1" in by_line[5]["message"], errs
    assert by_line[6]["code"] == "model_not_found" and "'nope'" in by_line[6]["message"], errs
    assert by_line[7]["code"] == "invalid_url" and by_line[7]["param"] == "url", errs
    assert by_line[3]["code"] == "invalid_request", errs
    assert b["failed_at"] > 0 and b["in_progress_at"] is None and b["output_file_id"] is None, b
    assert b["request_counts"]["total"] == 8, b
    assert http_json("GET", sim.url + "/sim/state")[2]["requests_received"] == 0   # nothing was sent
    # the request itself: OpenAI's 400s and 404s, naming the parameter
    cases = [({"endpoint": "/v1/chat/completions", "completion_window": "24h"}, 400, "input_file_id"),
             ({"input_file_id": f["id"], "endpoint": "/v1/images", "completion_window": "24h"}, 400, "endpoint"),
             ({"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "completion_window": "1h"}, 400,
              "completion_window"),
             ({"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h",
               "metadata": {"k": 3}}, 400, "metadata"),
             ({"input_file_id": "file-nope", "endpoint": "/v1/chat/completions", "completion_window": "24h"}, 404,
              "input_file_id")]
    for body, want, param in cases:
        st, _, obj = http_json("POST", gw.url + "/v1/batches", body)
        assert st == want and obj["error"]["param"] == param, (body, st, obj)
    st, _, obj = http("POST", gw.url + "/v1/batches", b"{not json", headers={"Content-Type": "application/json"})
    assert st == 400 and b"invalid_json" in obj, obj
    st, _, obj = http_json("GET", gw.url + "/v1/batches/batch_nope")
    assert st == 404 and obj["error"]["message"] == "No such Batch object: batch_nope", obj
    st, _, obj = http_json("DELETE", gw.url + "/v1/batches")
    assert st == 405, obj


@test
def cancel_stops_sending_and_keeps_a_whole_partial_output():
    d = Dir()
    sims = [start_sim(*slow(1000)) for _ in range(2)]  # 512 lines/s: cancelled well before the end
    gw = gateway(d, sims)
    n = 3000
    bid = start_batch(d, gw, (line(i) for i in range(n)))
    until_completed(gw, bid, 200)
    st, _, c = http_json("POST", f"{gw.url}/v1/batches/{bid}/cancel")
    assert st == 200 and c["status"] in ("cancelling", "cancelled") and c["cancelling_at"] > 0, c
    b = until_status(gw, bid, ("cancelled",), timeout=30)
    assert b["cancelled_at"] >= b["cancelling_at"] and b["infergate"]["in_flight"] == 0, b
    sent = sum(http_json("GET", s.url + "/sim/state")[2]["requests_received"] for s in sims)
    time.sleep(1.0)
    assert sum(http_json("GET", s.url + "/sim/state")[2]["requests_received"] for s in sims) == sent   # no new one
    assert sent < n, sent
    out = content(gw, b["output_file_id"])
    assert len(out) == b["request_counts"]["completed"] and 200 <= len(out) < n, (len(out), b)
    assert len({o["custom_id"] for o in out}) == len(out) and all(o["response"]["status_code"] == 200 for o in out)
    st, _, obj = http_json("POST", f"{gw.url}/v1/batches/{bid}/cancel")
    assert st == 409 and "cancelled" in obj["error"]["message"], obj


@test
def batches_belong_to_the_key_that_made_them():
    d = Dir()
    sim = start_sim(*FAST)
    a, other = keys_file(d("keys.json"), "alice", "bob")
    gw = gateway(d, [sim], "--api-keys-file", d("keys.json"))
    write_corpus(d("c.jsonl"), (line(i) for i in range(50)))
    st, f = upload(gw, open(d("c.jsonl"), "rb").read(), headers=a)
    assert st == 200, f
    st, _, obj = create(gw, f["id"], headers=other)     # bob cannot use alice's file
    assert st == 404, obj
    st, _, b = create(gw, f["id"], headers=a)
    assert st == 200, b
    b = until_status(gw, b["id"], ("completed",), headers=a)   # its requests ran as alice's
    assert b["request_counts"]["completed"] == 50, b
    for method, path in (("GET", f"/v1/batches/{b['id']}"), ("POST", f"/v1/batches/{b['id']}/cancel"),
                         ("GET", f"/v1/files/{b['output_file_id']}/content")):
        st, _, obj = http_json(method, gw.url + path, headers=other)
        assert st == 404, (path, st, obj)
    assert http_json("GET", gw.url + "/v1/batches", headers=other)[2]["data"] == []
    assert [x["id"] for x in http_json("GET", gw.url + "/v1/batches", headers=a)[2]["data"]] == [b["id"]]
    assert len(content(gw, b["output_file_id"], headers=a)) == 50
    st, _, obj = http_json("GET", gw.url + "/v1/batches")
    assert st == 401, obj
    # the mark a batch's own requests carry is no key without the gateway's secret
    st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", {"model": "m", "messages": []},
                           headers={"X-Infergate-Batch": "0" * 32 + " " + "1" * 64})
    assert st == 401, obj


@test
def a_full_disk_pauses_a_batch_and_it_resumes_losing_nothing():
    d = Dir()
    mnt = d("data")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt], capture_output=True).returncode:
        raise Skip("cannot mount a tmpfs here (needs root)")
    gw = None
    try:
        sims = [start_sim(*slow(200)) for _ in range(2)]
        gw = gateway(d, sims)
        n = 3000
        bid = start_batch(d, gw, (line(i) for i in range(n)))
        until_completed(gw, bid, 300)
        fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)   # the disk fills up
        try:
            while os.write(fd, b"\1" * 65536) > 0:
                pass
        except OSError:
            pass
        os.close(fd)
        b = until_status(gw, bid, ("in_progress",))
        wait_until(lambda: get(gw, bid)["infergate"]["paused"], timeout=20, what="a paused batch")
        b = get(gw, bid)
        assert "cannot write" in b["infergate"]["paused"], b
        text = http("GET", gw.url + "/metrics")[2].decode()
        assert f'infergate_batch_paused{{batch="{bid}"}} 1' in text
        done = b["request_counts"]["completed"]
        time.sleep(1.0)
        assert get(gw, bid)["request_counts"]["completed"] == done and done < n   # paused: nothing written
        os.unlink(os.path.join(mnt, "filler"))                  # space returns
        b = until_status(gw, bid, ("completed",), timeout=120)
        assert b["infergate"]["paused"] is None and b["request_counts"] == {"total": n, "completed": n,
                                                                             "failed": 0}, b
        exactly_once([f"r{i}" for i in range(n)], content(gw, b["output_file_id"]))
        assert "cannot write its results" in gw.read_log()
    finally:
        if gw:
            gw.stop()
        subprocess.run(["umount", "-l", mnt])


@test
def finished_batches_go_after_the_retention_time():
    d = Dir()
    sim = start_sim(*FAST)
    gw = gateway(d, [sim], "--batch-retention-s", "1")
    bid = start_batch(d, gw, (line(i) for i in range(5)))
    wait_until(lambda: http_json("GET", f"{gw.url}/v1/batches/{bid}")[0] == 404, timeout=20,
               what="the batch removed")
    files = [(x["purpose"], x["filename"]) for x in http_json("GET", gw.url + "/v1/files")[2]["data"]]
    assert files == [("batch", "corpus.jsonl")], files   # its output went with it; the input is the user's
    # its directory goes on the I/O thread, after the batch left the list
    wait_until(lambda: not os.path.exists(os.path.join(d("data"), "batches", bid)), timeout=20,
               what="the batch's directory removed")
    assert "removed (finished" in gw.read_log()


if __name__ == "__main__":
    run()
