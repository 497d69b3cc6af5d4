"""The cluster's Redis link as a trust boundary. A scripted hostile Redis (fake_redis.py) sends replies
no command asked for, protocol errors, arrays nested too deep, a bulk of 2 GB, an array of 2 billion
elements and pub/sub pushes of every wrong shape: the gateway stays up and keeps serving, counts each
in infergate_cluster_bad_messages_total{kind}, logs each kind once, drops the connection (or the push
alone) and joins again, and its RSS comes back. rediss:// against Debian's redis-server with TLS
(--tls-port, --port 0): two gateways share over TLS with an ACL user and a password; a wrong CA or a
wrong server name leaves a gateway alone, saying why; a client certificate when Redis asks for one;
TLS settings that cannot work stop the gateway at start naming the key."""

import json
import os
import shutil
import subprocess
import tempfile

from fake_redis import FakeRedis, resp
from harness import (binary, chat_body, cluster_members, free_port, http, http_json, metric, rss_kb, run,
                     sanitized, start_gateway, start_redis, start_sim, stateful_backend, test, wait_cluster,
                     wait_until)


def cluster(gw):
    return http_json("GET", gw.url + "/health/backends")[2]["cluster"]


def bad(gw, kind):
    return metric(http("GET", gw.url + "/metrics")[2], f'infergate_cluster_bad_messages_total{{kind="{kind}"}}')


def healthy(gw):
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] >= 1, timeout=20,
               what="a healthy backend")


def serving(gw):
    """/health and a chat completion answered."""
    st, _, raw = http("GET", gw.url + "/health", timeout=5)
    assert st == 200, raw
    st, _, raw = http("POST", gw.url + "/v1/chat/completions", chat_body("still there?"), timeout=10)
    assert st == 200, raw


# Pushes a subscriber must drop one by one (hiredis 0.14 asserted on the first five: the process aborted).
BAD_PUSHES = [
    resp(["message", 5, "NAME 0 URL ID"]),                       # an integer channel
    resp(["message"]),                                            # one element
    resp(["message", ["infergate:resp"], "x"]),                   # a nested array as the channel
    resp([1, "infergate:resp", "x"]),                             # an integer first
    resp([]),                                                     # no element
    resp(["message", "infergate:resp", ["x", ["y"]]]),            # a nested array as the payload
    resp(["message", "infergate:other", "x"]),                    # a channel not subscribed to
    b"*1\r\n" * 8 + b":1\r\n",                                    # arrays 8 deep
    b"+OK\r\n",                                                   # not an array
]


@test
def a_hostile_redis_is_counted_and_dropped_and_the_gateway_keeps_serving():
    fake = FakeRedis()
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    # a sync every second: a command unanswered for 3 s drops the connection, which a busy machine
    # (or a sanitizer's build) taking in 16 MiB from this Python Redis must not cause by itself
    gw = start_gateway([sim], "--cluster-redis", fake.url, "--cluster-name", "gw-a", "--cluster-sync-ms", "1000")
    wait_until(lambda: cluster_members(gw) == ["gw-a"], timeout=20, what="joined through the fake Redis")
    wait_until(lambda: fake.subscribed() == {"infergate:resp", "infergate:data"}, timeout=20, what="subscribed")
    healthy(gw)
    serving(gw)
    for kind in ("protocol", "oversize", "unsolicited", "pubsub_shape"):
        assert bad(gw, kind) == 0, kind
    rss0 = rss_kb(gw.pid)

    # On the subscriber's connection, each bad push is dropped alone: the connection stays.
    for i, push in enumerate(BAD_PUSHES):
        fake.push(push)
        wait_until(lambda: bad(gw, "pubsub_shape") == i + 1, timeout=20, what=f"push {i} counted")
    assert fake.count("sub") == 1 and len(fake.live("sub")) == 1, fake.count("sub")
    # ... and a good message after them still arrives: a stored response's backend, told by "gw-b"
    fake.push(resp(["message", "infergate:resp", f"gw-b 0 {sim.url} resp_from_b"]))
    wait_until(lambda: cluster(gw)["responses_learned"] == 1, timeout=20, what="the good message taken")
    serving(gw)

    # On the command connection, a bad reply drops the connection; it comes back and joins again.
    depth9 = b"*1\r\n" * 9 + b":1\r\n"
    cases = [
        ("unsolicited", None, b"+OK\r\n"),                            # a reply no command asked for
        ("protocol", b"!x\r\n", None),                                # a bad type byte
        ("protocol", depth9, None),                                   # arrays nested deeper than 7
        ("oversize", b"*2000000000\r\n", None),                       # 16 GB of pointers at once
        ("oversize", b"$2000000000\r\n" + b"x" * ((16 << 20) + 65536), None),   # a bulk that never ends
    ]
    for kind, instead, then in cases:
        before, conns = bad(gw, kind), fake.count("cmd")
        fake.script("EVAL", instead=instead, then=then)
        wait_until(lambda: bad(gw, kind) == before + 1, timeout=20, what=f"{kind} counted")
        wait_until(lambda: fake.count("cmd") > conns and cluster_members(gw) == ["gw-a"], timeout=20,
                   what=f"joined again after {kind}")
        serving(gw)
    # a protocol error on the subscriber's connection: dropped, subscribed again
    fake.push(b"!x\r\n")
    wait_until(lambda: bad(gw, "protocol") == 3, timeout=20, what="the subscriber's protocol error")
    wait_until(lambda: fake.count("sub") == 2 and fake.subscribed() == {"infergate:resp", "infergate:data"},
               timeout=20, what="subscribed again")

    assert gw.poll() is None
    serving(gw)
    m = http("GET", gw.url + "/metrics")[2]
    counts = {k: metric(m, f'infergate_cluster_bad_messages_total{{kind="{k}"}}')
              for k in ("protocol", "oversize", "unsolicited", "pubsub_shape")}
    assert counts == {"protocol": 3, "oversize": 2, "unsolicited": 1, "pubsub_shape": len(BAD_PUSHES)}, counts
    assert cluster(gw)["bad_messages"] == counts, cluster(gw)
    log = gw.read_log()
    for k in counts:   # each kind said once, not once per message
        lines = [ln for ln in log.splitlines() if f"cluster: a bad {k} from Redis, dropped:" in ln]
        assert len(lines) == 1, (k, lines)
    assert "a bad pubsub_shape from Redis, dropped: array of 3: bulk \"message\", integer, bulk" in log, log
    assert "a bad oversize from Redis, dropped: an array of 2000000000 elements (at most 1048576)" in log, log
    rss1 = rss_kb(gw.pid)
    print(f"# {sum(counts.values())} bad messages; gateway RSS {rss0} kB before, {rss1} kB after")
    assert sanitized(gw.pid) or rss1 < rss0 + 16384, (rss0, rss1)
    assert gw.stop() == 0, gw.read_log()[-3000:]    # a clean stop (under ASan: no leak either)
    fake.close()


class Certs:
    """A CA, another CA, Redis's certificate (127.0.0.1 and localhost) and a client's, made with the
    openssl command line in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ig-rediss-")
        for ca in ("ca", "other-ca"):
            self.ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=test {ca}",
                     "-keyout", self(f"{ca}.key"), "-out", self(f"{ca}.pem"))
        self.leaf("redis", "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self.leaf("client", "subjectAltName=DNS:gw")

    def __call__(self, name):
        return os.path.join(self.dir, name)

    def __del__(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def ssl(self, *args):
        p = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, (args, p.stderr)

    def leaf(self, name, ext):
        with open(self(f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        self.ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", self(f"{name}.key"),
                 "-out", self(f"{name}.csr"))
        self.ssl("x509", "-req", "-in", self(f"{name}.csr"), "-CA", self("ca.pem"), "-CAkey", self("ca.key"),
                 "-set_serial", str(0x2000 + len(os.listdir(self.dir))), "-days", "2", "-extfile",
                 self(f"{name}.ext"), "-out", self(f"{name}.pem"))


def start_tls_redis(certs, *extra):
    """Debian's redis-server speaking TLS only (--port 0) on a free port."""
    port = free_port()
    r = start_redis("--port", "0", "--tls-port", str(port), "--tls-cert-file", certs("redis.pem"),
                    "--tls-key-file", certs("redis.key"), "--tls-ca-cert-file", certs("ca.pem"), *extra, port=port)
    r.tls_port = port
    return r


def redis_cli(certs, redis, *args):
    return subprocess.run(["redis-cli", "--tls", "--cacert", certs("ca.pem"), "--cert", certs("client.pem"), "--key",
                           certs("client.key"), "-p", str(redis.tls_port), "--no-auth-warning", *args],
                          capture_output=True, text=True, timeout=5).stdout.strip()


@test
def hostile_bytes_over_tls_are_dropped_alike():
    certs = Certs()
    fake = FakeRedis(certfile=certs("redis.pem"), keyfile=certs("redis.key"))
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim], "--cluster-redis", fake.url, "--cluster-name", "gw-a", "--cluster-sync-ms", "1000",
                       "--cluster-redis-tls-ca-file", certs("ca.pem"))
    wait_until(lambda: cluster_members(gw) == ["gw-a"], timeout=20, what="joined over TLS")
    wait_until(lambda: fake.subscribed() == {"infergate:resp", "infergate:data"}, timeout=20, what="subscribed")
    healthy(gw)
    fake.push(resp(["message", 5, "x"]))
    wait_until(lambda: bad(gw, "pubsub_shape") == 1, timeout=20, what="the push counted")
    # 16 MiB and more in TLS records of 16 KiB: read whole, dropped at the limit
    fake.script("EVAL", instead=b"$2000000000\r\n" + b"x" * ((16 << 20) + 65536))
    wait_until(lambda: bad(gw, "oversize") == 1, timeout=20, what="the bulk counted")
    fake.script("EVAL", then=b"+OK\r\n")
    wait_until(lambda: bad(gw, "unsolicited") == 1, timeout=20, what="the extra reply counted")
    wait_until(lambda: fake.count("cmd") >= 3 and cluster_members(gw) == ["gw-a"], timeout=20, what="joined again")
    assert fake.count("sub") == 1
    serving(gw)
    assert gw.stop() == 0, gw.read_log()[-3000:]
    fake.close()


@test
def two_gateways_share_over_tls_with_an_acl_user_and_a_password():
    certs = Certs()
    redis = start_tls_redis(certs, "--tls-auth-clients", "no", "--requirepass", "s3cret",
                            "--user", "gw", "on", ">gwpass", "~*", "&*", "+@all")
    port = redis.tls_port
    fbs = [stateful_backend() for _ in range(3)]
    ca = ("--cluster-redis-tls-ca-file", certs("ca.pem"))
    # gw-a: the ACL user, the certificate's IP address; gw-b: the default user's password, the
    # certificate's DNS name (the server name told apart from the address connected to)
    a = start_gateway(fbs, "--cluster-redis", f"rediss://gw:gwpass@127.0.0.1:{port}", "--cluster-name", "gw-a",
                      "--cluster-sync-ms", "1000", *ca)
    b = start_gateway(fbs, "--cluster-redis", f"rediss://:s3cret@127.0.0.1:{port}", "--cluster-name", "gw-b",
                      "--cluster-sync-ms", "1000", "--cluster-redis-tls-server-name", "localhost", *ca)
    wait_cluster([a, b], ["gw-a", "gw-b"])
    c = cluster(a)
    assert c["redis"] == "up" and c["redis_url"] == f"rediss://***@127.0.0.1:{port}/0", c
    assert redis_cli(certs, redis, "-a", "s3cret", "EXISTS", "infergate:gw:gw-a") == "1"
    # a stored response's backend, published through one and learned by the other, over TLS
    st, hdrs, raw = http("POST", a.url + "/v1/responses", {"model": "m", "input": "first"})
    assert st == 200, raw
    holder, rid = hdrs["x-infergate-backend"], json.loads(raw)["id"]
    wait_until(lambda: cluster(b)["responses_learned"] >= 1, timeout=20, what="gw-b told")
    for i in range(6):
        st, hdrs, raw = http("POST", b.url + "/v1/responses", {"model": "m", "input": f"more {i}",
                                                               "previous_response_id": rid})
        assert st == 200 and hdrs["x-infergate-backend"] == holder, (i, st, raw)
    assert cluster(a)["bad_messages"] == {}   # only the kinds seen are shown
    for g in (a, b):
        assert "s3cret" not in g.read_log() and "gwpass" not in g.read_log()
    # the stop leaves through a blocking TLS connection: the name is free at once (not 3 s later)
    assert a.stop() == 0, a.read_log()[-3000:]
    assert redis_cli(certs, redis, "-a", "s3cret", "EXISTS", "infergate:gw:gw-a") == "0"
    # a wrong password over TLS is refused at start, naming the key
    r = subprocess.run([binary("infergate"), "--listen", "127.0.0.1:0", "--backend", fbs[0].url, "--cluster-redis",
                        f"rediss://gw:wrong@127.0.0.1:{port}", "--cluster-name", "gw-c", *ca],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "cluster.redis_url: Redis at" in r.stderr and "refused the password" in r.stderr, \
        r.stderr


@test
def a_wrong_ca_or_name_leaves_a_gateway_alone_saying_why_and_a_client_certificate_when_asked():
    certs = Certs()
    redis = start_tls_redis(certs, "--tls-auth-clients", "optional")
    port = redis.tls_port
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    url = f"rediss://127.0.0.1:{port}"
    wrong_ca = start_gateway([sim], "--cluster-redis", url, "--cluster-name", "gw-x",
                             "--cluster-redis-tls-ca-file", certs("other-ca.pem"))
    wrong_name = start_gateway([sim], "--cluster-redis", url, "--cluster-name", "gw-y",
                               "--cluster-redis-tls-ca-file", certs("ca.pem"),
                               "--cluster-redis-tls-server-name", "redis.example")
    # (Redis sends its chain up to its CA: a root the gateway was not given)
    for gw, why in ((wrong_ca, "TLS: the server's certificate: self-signed certificate in certificate chain"),
                    (wrong_name, "TLS: the server's certificate: hostname mismatch")):
        wait_until(lambda: why in gw.read_log(), timeout=20, what=why)
        log = gw.read_log()
        assert f"cluster: Redis at rediss://127.0.0.1:{port}/0 does not answer ({why})" in log, log
        c = cluster(gw)
        assert c["redis"] != "up" and not c["joined"], c
        assert metric(http("GET", gw.url + "/metrics")[2], "infergate_cluster_redis_up") == 0
        healthy(gw)
        serving(gw)    # alone, as without Redis
    # tried again and again (Redis refuses each handshake), said once
    wait_until(lambda: redis.read_log().count("Error accepting a client connection") >= 10, timeout=20,
               what="tries after the backoff")
    for gw in (wrong_ca, wrong_name):
        assert gw.read_log().count("cluster: serving alone (") == 1, gw.read_log()
    assert redis_cli(certs, redis, "ZCARD", "infergate:gws") == "0"   # neither joined

    # Redis asking for a client certificate: none shown, refused; shown, in
    strict = start_tls_redis(certs, "--tls-auth-clients", "yes")
    url = f"rediss://127.0.0.1:{strict.tls_port}"
    ca = ("--cluster-redis-tls-ca-file", certs("ca.pem"))
    anon = start_gateway([sim], "--cluster-redis", url, "--cluster-name", "gw-anon", *ca)
    wait_until(lambda: "certificate required" in anon.read_log(), timeout=20, what="Redis's alert said")
    assert not cluster(anon)["joined"]
    known = start_gateway([sim], "--cluster-redis", url, "--cluster-name", "gw-known", *ca,
                          "--cluster-redis-tls-client-cert", certs("client.pem"),
                          "--cluster-redis-tls-client-key", certs("client.key"))
    wait_until(lambda: cluster_members(known) == ["gw-known"], timeout=20, what="joined with its certificate")
    healthy(known)
    serving(known)
    assert not cluster(anon)["joined"]


@test
def tls_settings_that_cannot_work_stop_the_gateway_at_start_naming_the_key():
    certs = Certs()
    with open(certs("not.pem"), "w") as f:
        f.write("not a certificate\n")
    url = "rediss://127.0.0.1:6379"
    cases = [
        (["--cluster-redis-tls-ca-file", certs("missing.pem")],
         f"cluster.redis_tls_ca_file: {certs('missing.pem')}: No such file or directory"),
        (["--cluster-redis-tls-ca-file", certs("not.pem")],
         f"cluster.redis_tls_ca_file: {certs('not.pem')}: no PEM certificate in it"),
        (["--cluster-redis-tls-client-cert", certs("client.pem")],
         "cluster.redis_tls_client_cert: given without cluster.redis_tls_client_key"),
        (["--cluster-redis-tls-client-cert", certs("client.pem"), "--cluster-redis-tls-client-key", certs("redis.key")],
         f"cluster.redis_tls_client_key: {certs('redis.key')} is not the key of cluster.redis_tls_client_cert"),
        (["--cluster-redis-tls-client-cert", certs("not.pem"), "--cluster-redis-tls-client-key", certs("client.key")],
         f"cluster.redis_tls_client_cert: {certs('not.pem')}: not a PEM certificate"),
        (["--cluster-redis-tls-server-name", "a b"],
         "cluster.redis_tls_server_name: 'a b' is not a DNS name or an IP address"),
    ]
    for args, want in cases:
        r = subprocess.run([binary("infergate"), "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:9",
                            "--cluster-redis", url, *args], capture_output=True, text=True, timeout=20)
        assert r.returncode == 2 and want in r.stderr, (args, r.returncode, r.stderr)


run()
