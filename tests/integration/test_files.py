"""The Files API on the gateway (issue 20's first part): uploads streamed to
data_dir (multipart/form-data, as every OpenAI client sends them), listed,
read back byte for byte, deleted; owned by the key that uploaded them; kept
across a restart, with a half-written upload left by a crash removed; a bad
data_dir stops the start naming the key; an upload never held in memory."""

import json
import os
import subprocess

from harness import (BOUNDARY, Dir, binary, http, keys_file, http_json, multipart, need_binary, run, run_client,
                     start_gateway, start_sim, test, upload, wait_until)

def peak_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def stored(d, *names):
    return os.path.join(d("data"), "files", *names)


def corpus(n):
    return b"".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": "m", "messages": [{"role": "user", "content": f"q {i}"}]}})
                    .encode() + b"\n" for i in range(n))


def gateway(d, *extra, **kw):
    sim = start_sim("--model", "m")
    return start_gateway([sim], "--data-dir", d("data"), *extra, **kw), sim


@test
def upload_list_read_back_delete():
    need_binary("infergate")
    d = Dir()
    gw, sim = gateway(d)
    data = corpus(500)
    st, f = upload(gw, data)
    assert st == 200, f
    assert f["object"] == "file" and f["bytes"] == len(data) and f["purpose"] == "batch", f
    assert f["filename"] == "corpus.jsonl" and f["id"].startswith("file-") and f["created_at"] > 0, f
    st, hdrs, raw = http("GET", f"{gw.url}/v1/files/{f['id']}/content")
    assert st == 200 and raw == data, (st, len(raw))
    st, _, got = http_json("GET", f"{gw.url}/v1/files/{f['id']}")
    assert st == 200 and got == f, got
    st2, g = upload(gw, b'{"custom_id": "x"}\n', filename="two.jsonl")
    st, _, lst = http_json("GET", gw.url + "/v1/files")
    assert st == 200 and lst["object"] == "list" and [x["id"] for x in lst["data"]] == [g["id"], f["id"]], lst
    assert lst["first_id"] == g["id"] and lst["last_id"] == f["id"] and lst["has_more"] is False, lst
    st, _, page = http_json("GET", gw.url + "/v1/files?limit=1&order=asc")
    assert [x["id"] for x in page["data"]] == [f["id"]] and page["has_more"] is True, page
    st, _, page = http_json("GET", f"{gw.url}/v1/files?limit=1&order=asc&after={f['id']}")
    assert [x["id"] for x in page["data"]] == [g["id"]] and page["has_more"] is False, page
    st, _, obj = http_json("DELETE", f"{gw.url}/v1/files/{g['id']}")
    assert st == 200 and obj == {"id": g["id"], "object": "file", "deleted": True}, obj
    for path in (f"/v1/files/{g['id']}", f"/v1/files/{g['id']}/content"):
        st, _, obj = http_json("GET", gw.url + path)
        assert st == 404 and obj["error"]["message"] == f"No such File object: {g['id']}", obj
    assert not os.path.exists(stored(d, g["id"])) and os.path.exists(stored(d, f["id"]))
    # the backend saw none of it
    assert http_json("GET", sim.url + "/sim/state")[2]["requests_received"] == 0


@test
def the_official_client_uploads_reads_and_deletes_a_file():
    # the openai npm package, unmodified: files.create of a 10,000-line corpus (multipart, as it
    # builds it), retrieve, list, content (byte for byte), delete, then a 404
    d = Dir()
    gw, _ = gateway(d)
    with open(d("corpus.jsonl"), "wb") as f:
        f.write(corpus(10000))
    out = run_client(gw, "m", "files", d("corpus.jsonl"))
    f = out["file"]
    assert f["object"] == "file" and f["purpose"] == "batch" and f["filename"] == "corpus.jsonl", out
    assert f["bytes"] == os.path.getsize(d("corpus.jsonl")) and out["same"] and out["listed"] == [f["id"]], out
    assert out["content_equal"] and out["bytes"] == f["bytes"], out
    assert out["deleted"] == {"id": f["id"], "object": "file", "deleted": True} and out["gone"] == 404, out


@test
def bad_uploads_are_refused_and_leave_nothing():
    d = Dir()
    gw, _ = gateway(d, "--files-max-bytes", "4096")
    cases = [
        (upload(gw, corpus(3), purpose=None), 400, "purpose"),
        (upload(gw, corpus(3), purpose="fine-tune"), 400, "purpose"),
        (upload(gw, None), 400, "file"),
        (upload(gw, corpus(100)), 413, "file"),   # over files.max_bytes, found while writing
    ]
    for (st, obj), want, param in cases:
        assert st == want and obj["error"]["param"] == param, (st, obj)
    whole = multipart({"purpose": "batch"}, "c.jsonl", corpus(3))
    st, _, obj = http_json("POST", gw.url + "/v1/files", whole[:-30],   # no closing boundary: torn
                           headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert st == 400 and "closing boundary" in obj["error"]["message"], obj
    st, _, obj = http_json("POST", gw.url + "/v1/files", {"purpose": "batch"})   # JSON, not multipart
    assert st == 400 and "multipart/form-data" in obj["error"]["message"], obj
    st, _, obj = http_json("PUT", gw.url + "/v1/files")
    assert st == 405, obj
    st, _, obj = http_json("GET", gw.url + "/v1/files/file-nope/other")
    assert st == 404, obj
    # a client that leaves mid-upload: its temporary file goes with it
    import socket
    s = socket.create_connection(("127.0.0.1", gw.port))
    s.sendall(b"POST /v1/files HTTP/1.1\r\nHost: gw\r\nContent-Type: multipart/form-data; boundary=%s\r\n"
              b"Content-Length: 3000\r\n\r\n%s" % (BOUNDARY.encode(), whole[:-30]))
    wait_until(lambda: any(n.startswith(".upload-") for n in os.listdir(stored(d))), timeout=10,
               what="the upload begun")
    s.close()
    # as soon as the close is seen (0.05 s here), at the latest when client_timeout_s (60) ends the
    # connection: under a sanitizer with two reactors it was sometimes not seen within 10 s (twice
    # in one full run, once in 11 runs of this file alone), cause not found yet
    wait_until(lambda: os.listdir(stored(d)) == [], timeout=75, what="the half upload removed")
    assert os.listdir(stored(d)) == [], os.listdir(stored(d))   # no temporary file left
    assert http_json("GET", gw.url + "/v1/files")[2]["data"] == []


@test
def a_file_is_its_keys():
    d = Dir()
    alice, bob = keys_file(d("keys.json"), "alice", "bob")
    gw, _ = gateway(d, "--api-keys-file", d("keys.json"))
    st, f = upload(gw, corpus(5), headers=alice)
    assert st == 200, f
    assert upload(gw, corpus(5))[0] == 401   # no key
    for method, path in (("GET", f"/v1/files/{f['id']}"), ("GET", f"/v1/files/{f['id']}/content"),
                         ("DELETE", f"/v1/files/{f['id']}")):
        st, _, obj = http_json(method, gw.url + path, headers=bob)
        assert st == 404, (path, obj)
    assert http_json("GET", gw.url + "/v1/files", headers=bob)[2]["data"] == []
    assert [x["id"] for x in http_json("GET", gw.url + "/v1/files", headers=alice)[2]["data"]] == [f["id"]]


@test
def files_survive_a_restart_and_a_crashs_half_upload_is_removed():
    d = Dir()
    gw, sim = gateway(d)
    data = corpus(50)
    st, f = upload(gw, data)
    assert st == 200
    gw.kill()   # SIGKILL: no clean stop
    with open(stored(d, ".upload-deadbeef"), "wb") as t:   # what a crash mid-upload leaves
        t.write(b"half")
    gw2 = start_gateway([sim], "--data-dir", d("data"))
    assert [x["id"] for x in http_json("GET", gw2.url + "/v1/files")[2]["data"]] == [f["id"]]
    assert http("GET", f"{gw2.url}/v1/files/{f['id']}/content")[2] == data
    assert not os.path.exists(stored(d, ".upload-deadbeef"))
    assert "removed 1 upload(s)" in open(gw2.log_path).read()


@test
def a_bad_data_dir_stops_the_start_naming_the_key():
    d = Dir()
    with open(d("plain-file"), "w") as f:
        f.write("x")
    for bad in (d("plain-file"), d("no") + "/such/parent", "/proc/infergate"):
        p = subprocess.run([binary("infergate"), "--backend", "http://127.0.0.1:9", "--data-dir", bad],
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and "data_dir" in p.stderr and bad in p.stderr, (bad, p.stderr)
    # --check-config says the same, and makes nothing: a data_dir it could make is fine, not made
    for bad, rc in ((d("no") + "/such/parent", 2), (d("new-dir"), 0)):
        p = subprocess.run([binary("infergate"), "--check-config", "--backend", "http://127.0.0.1:9", "--data-dir",
                            bad], capture_output=True, text=True, timeout=10)
        assert p.returncode == rc and not os.path.exists(bad), (bad, p.returncode, p.stderr)
    st, _, obj = http_json("GET", start_gateway(["http://127.0.0.1:9"]).url + "/v1/files")
    assert st == 404 and "data_dir" in obj["error"]["message"], obj   # off without it


@test
def a_large_upload_is_streamed_to_disk_not_held_in_memory():
    # 96 MB uploaded in one request: the gateway's peak RSS grows by far less than the file
    d = Dir()
    # Under ASan (make check-asan) freed memory stays resident in its
    # quarantine, 256 MB by default: a small one, so that RSS still shows
    # what the gateway holds.
    asan = os.environ.get("ASAN_OPTIONS")
    gw, _ = gateway(d, env={"ASAN_OPTIONS": asan + ":quarantine_size_mb=4"} if asan else None)
    http_json("GET", gw.url + "/v1/files")
    before = peak_rss_kb(gw.pid)
    line = b'{"custom_id": "x", "method": "POST", "url": "/v1/chat/completions", "body": {}}' + b" " * 940 + b"\n"
    data = line * (96 * 1024)
    st, f = upload(gw, data)
    assert st == 200 and f["bytes"] == len(data), f
    grew = peak_rss_kb(gw.pid) - before
    assert grew < 16 * 1024, f"peak RSS grew by {grew} kB for a {len(data) >> 20} MB upload"
    assert os.path.getsize(stored(d, f["id"])) == len(data)
    print(f"# 96 MB upload: peak RSS +{grew} kB")


run()
