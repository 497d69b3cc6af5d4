"""Redis is input, not code: two gateways share a Redis of the test's own (Debian's redis-server),
and the test writes into it what anyone who can reach that Redis could (SET, HSET, ZADD, PUBLISH
through a raw RESP socket): key-sync figures that are not numbers or out of range, a fake member
whose state is garbage or claims what it cannot, data-channel messages naming paths outside
data_dir, bad counts and bad envelopes, an Idempotency-Key's value made into a header injection.
Each is refused: the gateways stay up and keep serving, a key's limit still holds (the request
over it gets a 429), no file outside data_dir is touched by the retention sweep, each kind is
counted in infergate_cluster_bad_messages_total{kind} and logged once."""

import hashlib
import json
import os
import socket
import threading
import time

from harness import (Dir, chat_body, http, http_json, rss_kb, sanitized, start_clustered, start_redis, start_sim, test,
                     upload, wait_cluster, wait_until)


class Resp:
    """A raw RESP connection to Redis: any bytes as arguments, replies read as they come."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.f = self.sock.makefile("rb")

    def cmd(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)
        return self.read()

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"RESP: {line!r}")

    def now_ms(self):
        s, us = self.cmd("TIME")
        return int(s) * 1000 + int(us) // 1000

    def close(self):
        self.sock.close()


def bad_counts(gw):
    """infergate_cluster_bad_messages_total by kind, as /metrics says."""
    text = http("GET", gw.url + "/metrics")[2].decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("infergate_cluster_bad_messages_total{kind=\""):
            kind = line.split('"')[1]
            out[kind] = float(line.rsplit(" ", 1)[1])
    return out


KINDS = ["sync", "sync_state", "key_sync", "resp_message", "data_message", "data_batch", "data_progress",
         "data_cancel", "data_file", "batch_lease", "idempotency",
         "protocol", "oversize", "unsolicited", "pubsub_shape"]   # the last four: the connection's (redis.c)


def logged_once(gw, kinds):
    log = gw.read_log()
    for k in kinds:
        n = log.count(f"cluster: a bad {k} from Redis, dropped:")
        assert n == 1, (k, n, log[-3000:])
    assert "\x1b" not in log and "\x00" not in log, "a control byte from Redis reached the log"


def stops_cleanly(*gws):
    """SIGTERM: exit 0, and nothing a sanitizer build reports (a leak at exit fails it)."""
    for gw in gws:
        rc = gw.stop()
        log = gw.read_log()
        assert rc == 0 and "Sanitizer" not in log and "runtime error" not in log, (rc, log[-3000:])


def limited_keys(path, rpm):
    with open(path, "w") as f:
        json.dump({"keys": [{"name": "lim", "sha256": hashlib.sha256(b"k-lim").hexdigest(), "rpm": rpm}]}, f)
    return {"Authorization": "Bearer k-lim"}, hashlib.sha256(b"k-lim").hexdigest()


class Attacker(threading.Thread):
    """Runs step(resp, i) every `every` seconds until stopped (its own connection)."""

    def __init__(self, port, step, every=0.03):
        super().__init__(daemon=True)
        self.r, self.step, self.every = Resp(port), step, every
        self.stopped = threading.Event()
        self.errors = []

    def run(self):
        i = 0
        while not self.stopped.is_set():
            try:
                self.step(self.r, i)
            except Exception as e:  # noqa: BLE001 (reported by stop)
                self.errors.append(repr(e))
                return
            i += 1
            time.sleep(self.every)

    def stop(self):
        self.stopped.set()
        self.join(5)
        self.r.close()
        assert not self.errors, self.errors


def requests_over_the_limit(gws, auth, seconds):
    """Requests of the limited key through the gateways in turn for `seconds`: (200s, 429s, elapsed).
    Every answer is one or the other: the gateways keep serving."""
    got = {200: 0, 429: 0}
    body = chat_body("hi", max_tokens=2)
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < seconds:
        st, _, raw = http("POST", gws[i % len(gws)].url + "/v1/chat/completions", body, headers=auth)
        assert st in got, (st, raw)
        got[st] += 1
        i += 1
        time.sleep(0.05)
    return got[200], got[429], time.monotonic() - t0



def limited_pair():
    """A Redis, a fast simulator and two gateways sharing it with one key of rpm 10, joined:
    (redis, sim, auth headers, the key's digest, gateway a, gateway b)."""
    redis = start_redis()
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")
    keys_dir = Dir()
    auth, digest = limited_keys(keys_dir("keys.json"), 10)
    a = start_clustered(redis, "gw-a", [sim], "--api-keys-file", keys_dir("keys.json"))
    b = start_clustered(redis, "gw-b", [sim], "--api-keys-file", keys_dir("keys.json"))
    wait_cluster((a, b), ["gw-a", "gw-b"])
    a.keys_dir = keys_dir  # (a Dir is removed when nothing holds it)
    return redis, sim, auth, digest, a, b

@test
def key_sync_figures_that_are_not_numbers_lift_no_limit():
    """Every gateway's demand for a key is summed by a script from a hash anyone can HSET: an
    entry "nan ..." made the sums NaN, which sscanf read and the bucket took as no limit. Now each
    figure must be a finite number in range (and the whole no less than this gateway's part): a
    key whose figures are not goes to the even split, and its rpm holds across both."""
    redis, sim, auth, digest, a, b = limited_pair()
    assert bad_counts(a) == {k: 0 for k in KINDS}, bad_counts(a)   # an honest cluster: nothing refused
    rss0 = [rss_kb(gw.pid) for gw in (a, b)]
    # "nan" and "inf" (Lua's tonumber takes them), an overflow to infinity, another gateway's
    # negative demand (which would leave each gateway the whole limit), sums too large to be one
    variants = [b"nan 0 0 0", b"inf 0 0 0", b"-1e309 0 0 0", b"1e400 1e400 0 0", b"-1000000 -1000000 0 0",
                b"1e300 1e300 1e300 1e300"]

    def poison(r, i):
        ep = r.now_ms() // 500
        v = variants[(i // 30) % len(variants)]           # each variant for about a second
        for e in range(ep - 3, ep + 6):
            r.cmd("HSET", f"infergate:kd:{digest}", f"evil@{e}", v)

    attacker = Attacker(redis.port, poison)
    attacker.start()
    try:
        ok, refused, elapsed = requests_over_the_limit((a, b), auth, 7.0)
    finally:
        attacker.stop()
    print(f"# rpm 10 over two gateways, Redis's key sync poisoned ({len(variants)} ways) for {elapsed:.1f} s: "
          f"{ok} answered, {refused} x 429")
    assert refused > 0 and ok <= 10 + elapsed * 10 / 60 + 2, (ok, refused, elapsed)
    for i, gw in enumerate((a, b)):
        c = bad_counts(gw)
        assert c["key_sync"] >= 1 and all(c[k] == 0 for k in KINDS if k != "key_sync"), c
        logged_once(gw, ["key_sync"])
        assert http("GET", gw.url + "/health")[0] == 200
        # the kinds refused show in /health/backends too
        assert http_json("GET", gw.url + "/health/backends")[2]["cluster"]["bad_messages"]["key_sync"] >= 1
        rss1 = rss_kb(gw.pid)
        print(f"# gateway {'ab'[i]}: RSS {rss0[i]} kB before the poisoning, {rss1} kB after")
        assert sanitized(gw.pid) or rss1 < rss0[i] + 8192, (rss0[i], rss1)
    stops_cleanly(a, b)


@test
def data_channel_messages_touch_nothing_outside_data_dir():
    """infergate:data's messages name batches and files by id: a batch id "../../x" was read as the
    directory data_dir/batches/../../x, listed as a batch, and the retention sweep deleted it. Now
    every id is checked as the Batch and Files APIs check a client's, counts are in range, and the
    envelope (kind, sender) too: a sentinel directory beside data_dir survives several sweeps."""
    redis = start_redis()
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0", "--output-tokens", "4")
    top = Dir()
    data = top("data")
    sentinel = top("x")
    os.makedirs(sentinel)
    with open(os.path.join(sentinel, "batch.json"), "w") as f:  # a finished batch, long past retention
        json.dump({"id": "batch_x", "status": "completed", "endpoint": "/v1/chat/completions", "created_at": 1,
                   "completed_at": 2, "total": 0, "completed": 0, "failed": 0}, f)
    with open(os.path.join(sentinel, "precious.txt"), "w") as f:
        f.write("not the gateway's\n")
    a = start_clustered(redis, "gw-a", [sim], "--data-dir", data, "--batch-retention-s", "1")
    b = start_clustered(redis, "gw-b", [sim], "--data-dir", data, "--batch-retention-s", "1")
    wait_cluster((a, b), ["gw-a", "gw-b"])
    r = Resp(redis.port)
    real = "batch_0123456789abcdef01234567"
    messages = {
        "data_batch": [b"b evil ../../x", b"b evil batch_/../../x", b"b evil /" + sentinel.encode(),
                       b"b evil " + b"a" * 1000],
        "data_cancel": [b"c evil ../../x", b"c evil " + real.encode() + b" extra"],
        "data_progress": [b"p evil ../../x 1 1 1", b"p evil " + real.encode() + b" -5 nan 99999999999999",
                          b"p evil " + real.encode() + b" 9223372036854775807 0 0"],
        "data_file": [b"f evil ../../x/precious.txt", b"d evil file-../../x", b"f evil file-0123"],
        "data_message": [b"B evil x", b"b", b"b ev\x1b[2Jil " + real.encode(), b"b evil\x00 ../../x",
                         b"bb evil x", b"b  evil x"],
    }
    resp = [b"gw-evil -1 http://127.0.0.1:9 resp_1", b"gw evil 1 u i", b"gw-evil 1 http://x \x1b[31m",
            b"gw-evil 4294967296 http://x r", b"gw-evil"]
    for _ in range(3):       # each kind several times: counted each time, logged once
        for msgs in messages.values():
            for m in msgs:
                r.cmd("PUBLISH", "infergate:data", m)
        for m in resp:
            r.cmd("PUBLISH", "infergate:resp", m)
        r.cmd("PUBLISH", "infergate:data", b"z evil a kind of a newer gateway")  # not counted: not read
    wait_until(lambda: bad_counts(a)["data_message"] >= 18 and bad_counts(b)["data_message"] >= 18, timeout=5,
               what="every message seen")
    time.sleep(3.5)          # three sweeps at least (batches.retention_s 1, a sweep a second)
    assert os.path.exists(os.path.join(sentinel, "precious.txt")), "a file outside data_dir was removed"
    assert os.path.exists(os.path.join(sentinel, "batch.json"))
    for gw in (a, b):
        c = bad_counts(gw)
        for kind, msgs in messages.items():
            assert c[kind] == 3 * len(msgs), (kind, c)
        assert c["resp_message"] == 3 * len(resp), c
        logged_once(gw, list(messages) + ["resp_message"])
        st, _, raw = http_json("GET", gw.url + "/v1/batches")
        assert st == 200 and raw["data"] == [], raw          # nothing listed
        st, _, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("still here", max_tokens=2))
        assert st == 200
        assert gw.poll() is None
    r.close()
    stops_cleanly(a, b)


@test
def a_fake_member_with_garbage_for_a_state_leaves_each_gateway_alone_and_limited():
    """The sync's reply lists the members of a sorted set and the states they wrote, both of which
    anyone can ZADD and SET: a fake member whose state is garbage, names this gateway, or claims
    2^63 slots; a member whose name is not one; a score from the future. The whole reply is then
    refused (nothing of it read) and each gateway serves alone on its even part of the limits,
    and joins again when the garbage is gone."""
    redis, sim, auth, digest, a, b = limited_pair()
    states = [b"g gw-evil\nb " + sim.url.encode() + b" 9223372036854775807\n",
              b"g gw-a\n",
              b"g gw-evil\nk " + digest.encode() + b" -1 5000 99999999999\n",
              b"garbage\x1b[31m\x00\n",
              b"g gw-evil\nm sim-model nan\n"]

    def poison(r, i):
        now = r.now_ms()
        phase = (i // 20) % (len(states) + 2)
        if phase < len(states):
            r.cmd("SET", "infergate:st:gw-evil", states[phase])
            r.cmd("ZADD", "infergate:gws", now, "gw-evil")
        elif phase == len(states):
            r.cmd("ZADD", "infergate:gws", now, b"gw evil\n\x1b[2J")      # not a name
        else:
            r.cmd("ZADD", "infergate:gws", now + 10 ** 9, "gw-future")     # a score from the future

    attacker = Attacker(redis.port, poison)
    attacker.start()
    try:
        wait_until(lambda: http_json("GET", a.url + "/health/backends")[2]["cluster"]["joined"] is False, timeout=5,
                   what="gw-a alone")
        ok, refused, elapsed = requests_over_the_limit((a, b), auth, 6.0)
    finally:
        attacker.stop()
    print(f"# rpm 10 over two gateways, the sync poisoned for {elapsed:.1f} s: {ok} answered, {refused} x 429")
    assert refused > 0 and ok <= 10 + elapsed * 10 / 60 + 2, (ok, refused, elapsed)
    r = Resp(redis.port)
    r.cmd("ZREM", "infergate:gws", "gw-evil", b"gw evil\n\x1b[2J", "gw-future")
    r.close()
    wait_cluster((a, b), ["gw-a", "gw-b"])      # together again
    for gw in (a, b):
        c = bad_counts(gw)
        assert c["sync"] >= 1 and c["sync_state"] >= 1, c
        logged_once(gw, ["sync", "sync_state"])
        assert "cluster: serving alone (sync: a bad sync" in gw.read_log()
        assert gw.poll() is None
    stops_cleanly(a, b)


@test
def an_idempotency_keys_value_made_into_a_header_injection_is_not_answered():
    """What Redis holds under an Idempotency-Key is replayed to the client as status, Content-Type
    and body: a value whose Content-Type holds a line break (a header of the attacker's) is
    refused whole, and the duplicate runs instead, answered by the backend."""
    redis = start_redis()
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "1500", "--output-tokens", "4")
    a = start_clustered(redis, "gw-a", [sim])
    b = start_clustered(redis, "gw-b", [sim])
    wait_cluster((a, b), ["gw-a", "gw-b"])
    body = chat_body("once", max_tokens=4)
    first = {}
    t = threading.Thread(target=lambda: first.update(
        r=http("POST", a.url + "/v1/chat/completions", body, headers={"Idempotency-Key": "k-1"})))
    t.start()
    r = Resp(redis.port)
    wait_until(lambda: r.cmd("KEYS", "infergate:idem:*"), timeout=5, what="the claim in Redis")
    key = r.cmd("KEYS", "infergate:idem:*")[0]
    claim = r.cmd("GET", key)
    assert claim.startswith(b"R "), claim
    digest = claim.split(b" ")[1]
    r.cmd("SET", key, b"D " + digest + b" 200 text/html\rSet-Cookie: evil=1\n<h1>owned</h1>", "PX", 60000)
    st, h, raw = http("POST", b.url + "/v1/chat/completions", body, headers={"Idempotency-Key": "k-1"})
    t.join(30)
    r.close()
    assert st == 200 and b"owned" not in raw and "set-cookie" not in h, (st, h, raw)
    assert json.loads(raw)["object"] == "chat.completion", raw
    assert first["r"][0] == 200
    c = bad_counts(b)
    assert c["idempotency"] == 1 and sum(c.values()) == 1, c
    logged_once(b, ["idempotency"])
    stops_cleanly(a, b)


@test
def a_fencing_counter_set_back_does_not_make_two_writers_of_a_batch():
    """A batch's single writer rests on fencing tokens that only grow (Redis's infergate:bfence):
    set back while its holder is paused past its lease, the gateway taking the batch over got the
    holder's own token, and both wrote the batch's results (lines answered twice). A token not
    above the one the batch's fence file holds is refused (counted, the counter raised), the
    next round takes the batch with a token above it, and every line ends once."""
    import signal
    d = Dir()
    redis = start_redis()
    # slow enough that the batch runs for a while (test_cluster.py's batch tests alike)
    sims = [start_sim("--model", "m", "--tokens-per-second", "0", "--ttft-ms", "150", "--output-tokens", "4",
                      "--max-running", "16") for _ in range(2)]
    a, b = (start_clustered(redis, name, sims, "--cluster-lease-s", "2", "--data-dir", d("data"))
            for name in ("gw-a", "gw-b"))
    n = 2000
    with open(d("c.jsonl"), "w") as f:
        for i in range(n):
            f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}}) + "\n")
    st, up = upload(a, open(d("c.jsonl"), "rb").read())
    st, _, made = http_json("POST", a.url + "/v1/batches", {"input_file_id": up["id"], "completion_window": "24h",
                                                            "endpoint": "/v1/chat/completions"})
    assert st == 200, made
    bid = made["id"]

    def batch(gw):
        return http_json("GET", f"{gw.url}/v1/batches/{bid}")[2]
    wait_until(lambda: batch(a)["request_counts"]["completed"] >= 300, timeout=60, what="300 done")
    fence_a = batch(a)["infergate"]["run_here"]["fencing_token"]
    os.killpg(a.pid, signal.SIGSTOP)   # A holds its lines in flight, its lease lapses
    try:
        r = Resp(redis.port)
        r.cmd("SET", "infergate:bfence", fence_a - 1)   # the next token taken is A's own
        r.close()
        wait_until(lambda: batch(b)["infergate"]["run_here"]["held"], timeout=20, what="B takes it over")
        fence_b = batch(b)["infergate"]["run_here"]["fencing_token"]
        wait_until(lambda: batch(b)["request_counts"]["completed"] >= 600, timeout=60, what="B goes on")
    finally:
        os.killpg(a.pid, signal.SIGCONT)
    assert fence_b > fence_a, (fence_a, fence_b)
    done = None

    def finished():
        nonlocal done
        done = batch(b)
        return done["status"] == "completed"
    wait_until(finished, timeout=120, interval=0.2, what="completed")
    st, _, raw = http("GET", f"{b.url}/v1/files/{done['output_file_id']}/content")
    ids = [json.loads(x)["custom_id"] for x in raw.decode().splitlines()]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    assert not twice and set(ids) == {f"r{i}" for i in range(n)}, (len(ids), twice[:10])   # every line once
    assert bad_counts(b)["batch_lease"] == 1, bad_counts(b)
    assert f"fencing token {fence_a} is not above its fence's {fence_a}" in b.read_log(), b.read_log()[-3000:]


if __name__ == "__main__":
    from harness import run
    run()
