"""infergate-bulk submit: a corpus handed to a gateway's Batch API (upload,
create, follow, download), against a small fake of OpenAI's Batch API in this
process (the gateway's own /v1/batches is tested by test_batches.py). Each test
checks what a user sees: the exit code, the lines of the output files, the
text printed; and what reached the fake (nothing, when a check fails first)."""

import email.parser
import email.policy
import itertools
import json
import os
import re
import shlex
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import _all_procs, _procs, Dir, binary, bulk, free_port, ids, lines, run, start, test, wait_until

KEY = "sk-submit-test"


def corpus(path, n, url="/v1/chat/completions", bad_line=None):
    """n OpenAI Batch lines with ids r0..r(n-1); returns the bytes written."""
    data = b""
    for i in range(n):
        line = {"custom_id": f"r{i}", "method": "POST", "url": url,
                "body": {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]}}
        data += json.dumps(line).encode() + b"\n"
    with open(path, "wb") as f:
        f.write(data)
    return data


def oa_error(message, type_="invalid_request_error", param=None, code=None):
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class FakeBatchAPI:
    """OpenAI's Files and Batch API, as far as submit uses it, on a free
    loopback port. A batch is validating at its first poll, then in_progress
    for `polls` polls (a share of its lines more each time), then completed
    (or failed, when `invalid` names line numbers). Lines whose custom_id is
    in `fail_ids` go to the error file. `refuse` maps "METHOD /path" to an
    (HTTP status, body) answer instead."""

    def __init__(self, polls=3, invalid=(), fail_ids=(), refuse=None, forever=False):
        self.polls, self.invalid, self.fail_ids = polls, list(invalid), set(fail_ids)
        self.refuse = dict(refuse or {})
        self.forever = forever          # never leaves in_progress (until cancelled or told)
        self.requests = []              # {"method", "path", "headers", "body"}
        self.files = {}                 # id -> {"bytes", "filename", "purpose"}
        self.batches = {}               # id -> {"obj", "polls", "lines"}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"   # keep-alive, and 100-continue for uploads

            def log_message(self, *a):
                pass

            def handle_one(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                req = {"method": method, "path": self.path, "headers": dict(self.headers), "body": body}
                with fake.lock:
                    fake.requests.append(req)
                    status, answer, ctype = fake.answer(req)
                if not isinstance(answer, bytes):
                    answer = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def do_GET(self):
                self.handle_one("GET")

            def do_POST(self):
                self.handle_one("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.closed = False
        _procs.append(self)      # stopped with the test's processes, pass or fail
        _all_procs.append(self)

    # The interface of Proc that the test runner uses.
    args = ["fake-batch-api"]
    log_path = None

    def read_log(self):
        return "\n".join(f"{r['method']} {r['path']}" for r in self.requests[-15:])

    def poll(self):
        return 0 if self.closed else None

    def stop(self, sig=None, timeout=None):
        if not self.closed:
            self.closed = True
            self.server.shutdown()
            self.server.server_close()
        return 0

    def seen(self, method=None, prefix=""):
        with self.lock:
            return [r for r in self.requests if (method is None or r["method"] == method)
                    and r["path"].startswith(prefix)]

    # ---- the API (called under the lock)

    def answer(self, req):
        key = f"{req['method']} {req['path']}"
        for pattern, (status, body) in self.refuse.items():
            if re.fullmatch(pattern, key):
                return status, body, "application/json"
        if req["headers"].get("Authorization") != f"Bearer {KEY}":
            return 401, oa_error("Incorrect API key provided", code="invalid_api_key"), "application/json"
        m, p = req["method"], req["path"]
        if m == "POST" and p == "/v1/files":
            return self.upload(req)
        if m == "POST" and p == "/v1/batches":
            return self.create(json.loads(req["body"]))
        got = re.fullmatch(r"/v1/batches/([^/]+)(/cancel)?", p)
        if got and got.group(1) in self.batches:
            b = self.batches[got.group(1)]
            if got.group(2) and m == "POST":
                return self.cancel(b)
            if not got.group(2) and m == "GET":
                return 200, self.poll_batch(b), "application/json"
        got = re.fullmatch(r"/v1/files/([^/]+)/content", p)
        if got and m == "GET" and got.group(1) in self.files:
            return 200, self.files[got.group(1)]["bytes"], "application/jsonl"
        return 404, oa_error(f"No such object: {p}"), "application/json"

    def upload(self, req):
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            b"Content-Type: " + req["headers"]["Content-Type"].encode() + b"\r\n\r\n" + req["body"])
        fields = {}
        for part in msg.iter_parts():
            fields[part.get_param("name", header="content-disposition")] = (
                part.get_filename(), part.get_payload(decode=True))
        if fields.get("purpose", (None, b""))[1] != b"batch" or "file" not in fields:
            return 400, oa_error("purpose must be batch and a file is required", param="purpose"), "application/json"
        fid = f"file-{next(self.ids)}"
        self.files[fid] = {"bytes": fields["file"][1], "filename": fields["file"][0], "purpose": "batch"}
        return 200, {"id": fid, "object": "file", "bytes": len(fields["file"][1]), "created_at": int(time.time()),
                     "filename": fields["file"][0], "purpose": "batch"}, "application/json"

    def create(self, body):
        fid = body.get("input_file_id")
        if fid not in self.files:
            return 404, oa_error(f"No such File object: {fid}", param="input_file_id"), "application/json"
        bid = f"batch_{next(self.ids)}"
        lines_ = [json.loads(x) for x in self.files[fid]["bytes"].splitlines() if x.strip()]
        obj = {"id": bid, "object": "batch", "endpoint": body["endpoint"], "errors": None,
               "input_file_id": fid, "completion_window": body["completion_window"], "status": "validating",
               "output_file_id": None, "error_file_id": None, "created_at": int(time.time()),
               "in_progress_at": None, "completed_at": None, "failed_at": None, "cancelled_at": None,
               "expired_at": None, "request_counts": {"total": 0, "completed": 0, "failed": 0},
               "metadata": body.get("metadata")}
        self.batches[bid] = {"obj": obj, "polls": 0, "lines": lines_, "body": body}
        return 200, obj, "application/json"

    def results(self, b, n):
        """Writes the output and error files of the first n lines."""
        out, err = b"", b""
        for i, line in enumerate(b["lines"][:n]):
            cid = line["custom_id"]
            if cid in self.fail_ids:
                err += json.dumps({"id": f"req_{i}", "custom_id": cid, "response": {
                    "status_code": 400, "request_id": f"q{i}", "body": oa_error("too long")},
                    "error": None}).encode() + b"\n"
            else:
                out += json.dumps({"id": f"req_{i}", "custom_id": cid, "response": {
                    "status_code": 200, "request_id": f"q{i}", "body": {
                        "object": "chat.completion", "choices": [{"index": 0, "message": {
                            "role": "assistant", "content": f"answer {i}"}}]}}, "error": None}).encode() + b"\n"
        o = b["obj"]
        for data, field in ((out, "output_file_id"), (err, "error_file_id")):
            if data or field == "output_file_id":
                fid = f"file-{next(self.ids)}"
                self.files[fid] = {"bytes": data, "filename": f"{o['id']}_{field}.jsonl", "purpose": "batch_output"}
                o[field] = fid

    def counts(self, b, done):
        failed = sum(1 for x in b["lines"][:done] if x["custom_id"] in self.fail_ids)
        b["obj"]["request_counts"] = {"total": len(b["lines"]), "completed": done - failed, "failed": failed}

    def poll_batch(self, b):
        o = b["obj"]
        b["polls"] += 1
        now = int(time.time())
        if o["status"] in ("completed", "failed", "cancelled"):
            return o
        if o["status"] == "cancelling":
            half = len(b["lines"]) // 2
            self.counts(b, half)
            self.results(b, half)
            o.update(status="cancelled", cancelled_at=now)
            return o
        if b["polls"] == 1:
            return o                    # validating
        if self.invalid:
            o.update(status="failed", failed_at=now, errors={"object": "list", "data": [
                {"code": "invalid_request", "message": "\"body\" is not an object", "param": "body",
                 "line": n} for n in self.invalid]})
            return o
        total = len(b["lines"])
        step = b["polls"] - 1
        if self.forever or step <= self.polls:
            done = min(total, total * step // (self.polls + 1))
            self.counts(b, done)
            o.update(status="in_progress", in_progress_at=o["in_progress_at"] or now)
            return o
        self.counts(b, total)
        self.results(b, total)
        o.update(status="completed", completed_at=now)
        return o

    def cancel(self, b):
        o = b["obj"]
        if o["status"] in ("completed", "failed", "cancelled", "expired"):
            return 409, oa_error(f"Cannot cancel a batch with status '{o['status']}'."), "application/json"
        o["status"] = "cancelling"
        return 200, o, "application/json"

    def finish_now(self):
        """Lets a batch that runs forever complete at its next poll."""
        with self.lock:
            self.forever = False
            for b in self.batches.values():
                b["polls"] = self.polls + 5


def fake(**kw):
    return FakeBatchAPI(**kw)


def submit(*args, env=None, timeout=60):
    return bulk("submit", *args, "--poll-s", "1", env={"OPENAI_API_KEY": KEY, **(env or {})}, timeout=timeout)


@test
def a_corpus_is_uploaded_run_and_downloaded():
    d = Dir()
    api = fake(polls=2)
    data = corpus(d("in.jsonl"), 40)
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url + "/v1/", "--output", d("out.jsonl"),
                          "--metadata", "project=demo", "--metadata", "run=1")
    assert rc == 0, (rc, out, err)
    got = ids(d("out.jsonl"))
    assert sorted(got) == sorted(f"r{i}" for i in range(40)) and len(set(got)) == 40, got
    assert os.path.getsize(d("out.errors.jsonl")) == 0   # no line failed: an empty errors file
    assert "batch batch_" in out and " completed" in out, out
    assert "40 total, 40 completed, 0 failed" in out, out
    assert f"{d('out.jsonl')} (40 lines)" in out and f"{d('out.errors.jsonl')} (0 lines)" in out, out
    assert "elapsed" in out, out
    # progress on stderr: each status, done of total
    assert "validating" in err and "in_progress: 13/40 32.5%" in err and "completed: 40/40 (40 ok, 0 failed)" in err, err
    assert not [n for n in os.listdir(d.path) if ".tmp-" in n], os.listdir(d.path)
    # what the gateway was sent: the file byte for byte, a batch of the first line's url
    (up,) = api.seen("POST", "/v1/files")
    assert up["headers"]["Authorization"] == f"Bearer {KEY}"
    assert "multipart/form-data" in up["headers"]["Content-Type"]
    assert list(api.files.values())[0]["bytes"] == data
    assert list(api.files.values())[0]["filename"] == "in.jsonl"
    (cr,) = api.seen("POST", "/v1/batches")
    body = json.loads(cr["body"])
    assert body == {"input_file_id": "file-1", "endpoint": "/v1/chat/completions", "completion_window": "24h",
                    "metadata": {"project": "demo", "run": "1"}}, body
    assert len(api.seen("GET", "/v1/batches/")) >= 4


@test
def failed_lines_go_to_the_errors_file_and_exit_1():
    d = Dir()
    api = fake(polls=1, fail_ids={"r3", "r7"})
    corpus(d("in.jsonl"), 10, url="/v1/completions")
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("out.jsonl"),
                          "--errors", d("bad.jsonl"))
    assert rc == 1, (rc, out, err)
    assert sorted(ids(d("bad.jsonl"))) == ["r3", "r7"]
    assert sorted(ids(d("out.jsonl")) + ids(d("bad.jsonl"))) == sorted(f"r{i}" for i in range(10))
    assert "10 total, 8 completed, 2 failed" in out and f"{d('bad.jsonl')} (2 lines)" in out, out
    assert json.loads(api.seen("POST", "/v1/batches")[0]["body"])["endpoint"] == "/v1/completions"


@test
def a_batch_that_fails_validation_prints_its_lines_and_exits_2():
    d = Dir()
    api = fake(invalid=[3, 9])
    corpus(d("in.jsonl"), 12)
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("out.jsonl"))
    assert rc == 2, (rc, out, err)
    assert "failed validation" in err, err
    assert 'line 3: "body" is not an object' in err and "line 9:" in err, err
    assert " failed" in out.splitlines()[0], out
    assert not os.path.exists(d("out.jsonl")) and not os.path.exists(d("out.errors.jsonl"))
    assert not api.seen("GET", "/v1/files/")   # nothing to download


@test
def no_wait_then_follow_by_batch_id():
    d = Dir()
    api = fake(polls=2)
    corpus(d("in.jsonl"), 25)
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--no-wait")
    assert rc == 0, (rc, out, err)
    bid = out.strip()
    assert re.fullmatch(r"batch_\d+", bid), out
    assert f"infergate-bulk submit --batch {bid} --url {api.url} --output FILE" in err, err
    assert not api.seen("GET")   # created, not followed
    rc, out, err = submit("--batch", bid, "--url", api.url, "--output", d("out.jsonl"))
    assert rc == 0, (rc, out, err)
    assert sorted(ids(d("out.jsonl"))) == sorted(f"r{i}" for i in range(25))
    assert f"batch {bid} completed" in out and "25 total, 25 completed, 0 failed" in out, out
    assert len(api.seen("POST", "/v1/files")) == 1 and len(api.seen("POST", "/v1/batches")) == 1


@test
def an_existing_output_is_refused_before_anything_is_sent():
    d = Dir()
    api = fake(polls=1)
    corpus(d("in.jsonl"), 5)
    with open(d("out.jsonl"), "w") as f:
        f.write("precious\n")
    t0 = time.monotonic()
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("out.jsonl"))
    assert rc == 2, (rc, out, err)
    assert time.monotonic() - t0 < 1.0
    assert f"--output {d('out.jsonl')} exists: give --force" in err and "nothing was sent" in err, err
    assert api.seen() == [], api.requests
    with open(d("out.jsonl")) as f:
        assert f.read() == "precious\n"
    # the same with --force replaces it
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("out.jsonl"), "--force")
    assert rc == 0, (rc, out, err)
    assert sorted(ids(d("out.jsonl"))) == [f"r{i}" for i in range(5)]


@test
def preflight_problems_are_reported_together_and_nothing_is_sent():
    d = Dir()
    api = fake()
    with open(d("in.jsonl"), "w") as f:
        f.write('{"custom_id": "a", "url": "/v1/images", "body": {}}\n')
    os.mkdir(d("out.jsonl"))
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("out.jsonl"))
    assert rc == 2, (rc, out, err)
    assert "url '/v1/images' is not /v1/chat/completions" in err and f"--output {d('out.jsonl')} is a directory" \
        in err, err
    rc, out, err = submit("--input", d("missing.jsonl"), "--url", api.url, "--output", d("o2.jsonl"))
    assert rc == 2 and f"--input {d('missing.jsonl')}: No such file or directory" in err, err
    for args, says in ((["--endpoint", "images"], "--endpoint: 'images' is not chat, completions or embeddings"),
                       (["--metadata", "novalue"], "--metadata: 'novalue' is not KEY=VALUE"),
                       (["--batch", "b/1"], "--batch: 'b/1' is not a batch id"),
                       (["--poll-s", "0"], "--poll-s")):
        rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("o3.jsonl"), *args)
        assert rc == 2 and says in err, (args, err)
    rc, out, err = bulk("submit", "--input", d("in.jsonl"), "--output", d("o3.jsonl"))
    assert rc == 2 and "--url is required" in err, err
    assert api.seen() == [], api.requests


@test
def an_unreachable_gateway_exits_4():
    d = Dir()
    corpus(d("in.jsonl"), 3)
    port = free_port()   # nothing listens there
    rc, out, err = submit("--input", d("in.jsonl"), "--url", f"http://127.0.0.1:{port}", "--output",
                          d("out.jsonl"), "--connect-timeout-s", "2")
    assert rc == 4, (rc, out, err)
    assert f"POST http://127.0.0.1:{port}/v1/files: cannot reach the gateway" in err, err
    assert not os.path.exists(d("out.jsonl"))


@test
def a_gateway_error_is_printed_with_its_status_and_exits_4():
    d = Dir()
    api = fake(refuse={"POST /v1/batches": (400, oa_error("model 'm' is not served here", param="body.model",
                                                          code="model_not_found"))})
    corpus(d("in.jsonl"), 3)
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("out.jsonl"))
    assert rc == 4, (rc, out, err)
    assert f"POST {api.url}/v1/batches: HTTP 400: model 'm' is not served here" in err, err
    assert "no batch was created" in err, err
    # a wrong key: the gateway's 401, on the upload
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--output", d("out.jsonl"),
                          env={"OPENAI_API_KEY": "sk-wrong"})
    assert rc == 4 and "HTTP 401: Incorrect API key provided" in err, (rc, err)
    # an unknown batch to follow: 404
    rc, out, err = submit("--batch", "batch_nope", "--url", api.url, "--output", d("out.jsonl"))
    assert rc == 4 and "HTTP 404: No such object" in err, (rc, err)
    assert not os.path.exists(d("out.jsonl"))


@test
def a_signal_stops_following_and_the_printed_command_resumes():
    d = Dir()
    api = fake(forever=True)
    corpus(d("in.jsonl"), 30)
    p = start([binary("infergate-bulk"), "submit", "--input", d("in.jsonl"), "--url", api.url, "--output",
               d("out.jsonl"), "--poll-s", "1"], env={"OPENAI_API_KEY": KEY})
    wait_until(lambda: len(api.seen("GET", "/v1/batches/")) >= 2, timeout=20, what="the batch followed")
    os.killpg(p.pid, signal.SIGINT)
    assert p.wait(10) == 3
    log = p.read_log()
    assert "stopped following batch_" in log and "keeps running on the gateway" in log, log
    cmd = next(line.strip() for line in log.splitlines() if line.strip().startswith("infergate-bulk submit --batch"))
    assert not os.path.exists(d("out.jsonl"))
    assert api.batches[next(iter(api.batches))]["obj"]["status"] == "in_progress"   # not cancelled
    api.finish_now()
    argv = shlex.split(cmd)
    rc, out, err = bulk(*argv[1:], env={"OPENAI_API_KEY": KEY})
    assert rc == 0, (rc, out, err)
    assert sorted(ids(d("out.jsonl"))) == sorted(f"r{i}" for i in range(30))
    assert len(api.seen("POST", "/v1/batches")) == 1


@test
def cancel_follows_until_cancelled_and_keeps_the_finished_lines():
    d = Dir()
    api = fake(forever=True)
    corpus(d("in.jsonl"), 20)
    rc, out, err = submit("--input", d("in.jsonl"), "--url", api.url, "--no-wait")
    bid = out.strip()
    rc, out, err = submit("--batch", bid, "--url", api.url, "--output", d("out.jsonl"), "--cancel")
    assert rc == 3, (rc, out, err)
    assert f"batch {bid} cancelled" in out and "20 total, 10 completed" in out, out
    assert ids(d("out.jsonl")) == [f"r{i}" for i in range(10)]
    assert len(api.seen("POST", f"/v1/batches/{bid}/cancel")) == 1
    # a finished batch cannot be cancelled: the gateway's 409
    rc, out, err = submit("--batch", bid, "--url", api.url, "--output", d("o2.jsonl"), "--cancel")
    assert rc == 4 and "HTTP 409: Cannot cancel a batch with status 'cancelled'." in err, (rc, err)


run()
