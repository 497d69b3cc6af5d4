"""https:// backends: a local TLS server with certificates this test makes
with the openssl command line. The gateway verifies it against tls.ca_file,
reuses its connections, shows a client certificate when the server asks for
one (mutual TLS), refuses a server signed by another CA (the backend shown
down with the TLS error), and refuses at start files that cannot be read or
do not go together, naming the key."""

import json
import os
import shutil
import ssl
import subprocess
import tempfile

from harness import FakeBackend, binary, http_json, run, start_gateway, test, wait_until


class Certs:
    """A CA, a server certificate for 127.0.0.1 and a client certificate it
    signed, and a second CA that signed nothing here."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="ig-tls-")
        for ca in ("ca", "other-ca"):
            self.ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=test {ca}",
                     "-keyout", self(f"{ca}.key"), "-out", self(f"{ca}.pem"))
        with open(self("san.cnf"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        for who in ("server", "client"):
            self.ssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}", "-keyout", self(f"{who}.key"),
                     "-out", self(f"{who}.csr"))
            self.ssl("x509", "-req", "-in", self(f"{who}.csr"), "-CA", self("ca.pem"), "-CAkey", self("ca.key"),
                     "-CAcreateserial", "-days", "2", "-extfile", self("san.cnf"), "-out", self(f"{who}.pem"))

    def __call__(self, name):
        return os.path.join(self.dir, name)

    def ssl(self, *args):
        p = subprocess.run(["openssl", *args], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr

    def server(self, require_client=False):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self("server.pem"), self("server.key"))
        if require_client:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self("ca.pem"))
        return ctx

    def __del__(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def backend_state(gw, url):
    return {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}[url]


def chat(gw):
    return http_json("POST", gw.url + "/v1/chat/completions",
                     {"model": "m", "messages": [{"role": "user", "content": "hi"}]})


@test
def verified_against_the_ca_file_and_connections_are_reused():
    c = Certs()
    fb = FakeBackend(model="m", tls=c.server())
    gw = start_gateway([fb], "--tls-ca-file", c("ca.pem"), "--health-interval-ms", "200")
    wait_until(lambda: backend_state(gw, fb.url)["state"] == "up", timeout=10, what="the https backend up")
    for _ in range(30):
        st, hdrs, obj = chat(gw)
        assert st == 200 and hdrs["x-infergate-backend"] == fb.url, (st, obj)
    assert len(fb.posts()) == 30
    # keep-alive: thirty requests and the probes over a handful of TLS connections
    assert len(fb.conns) <= 6, len(fb.conns)
    assert fb.tls_errors == [], fb.tls_errors


@test
def a_client_certificate_is_shown_when_the_server_asks():
    c = Certs()
    fb = FakeBackend(model="m", tls=c.server(require_client=True))
    # without one: the handshake fails, the backend is down and says why
    gw = start_gateway([fb], "--tls-ca-file", c("ca.pem"), "--health-interval-ms", "200")
    wait_until(lambda: backend_state(gw, fb.url)["last_probe"].get("ok") is False, timeout=10,
               what="a failed probe")
    assert backend_state(gw, fb.url)["state"] != "up"
    gw.kill()
    gw = start_gateway([fb], "--tls-ca-file", c("ca.pem"), "--tls-client-cert", c("client.pem"),
                       "--tls-client-key", c("client.key"), "--health-interval-ms", "200")
    wait_until(lambda: backend_state(gw, fb.url)["state"] == "up", timeout=10, what="the mTLS backend up")
    st, _, obj = chat(gw)
    assert st == 200, obj


@test
def a_server_signed_by_another_ca_is_refused_and_shown_down_with_the_tls_error():
    c = Certs()
    fb = FakeBackend(model="m", tls=c.server())
    gw = start_gateway([fb], "--tls-ca-file", c("other-ca.pem"), "--health-interval-ms", "200")
    wait_until(lambda: backend_state(gw, fb.url)["last_probe"].get("ok") is False, timeout=10,
               what="a failed probe")
    b = backend_state(gw, fb.url)
    assert b["state"] != "up" and "certificate" in b["last_probe"]["error"].lower(), b
    st, _, obj = chat(gw)
    assert st in (502, 503) and obj["error"]["message"], (st, obj)
    assert fb.posts() == []          # nothing was sent over an unverified connection
    # tls.verify 0 (tests only) accepts it
    gw.kill()
    gw = start_gateway([fb], "--tls-ca-file", c("other-ca.pem"), "--tls-verify", "0", "--health-interval-ms", "200")
    wait_until(lambda: backend_state(gw, fb.url)["state"] == "up", timeout=10, what="the backend up unverified")


@test
def unreadable_or_mismatched_files_exit_2_naming_the_key():
    c = Certs()
    cases = [
        (["--tls-ca-file", c("missing.pem")], "tls.ca_file: " + c("missing.pem") + ": No such file"),
        (["--tls-ca-file", c("san.cnf")], "tls.ca_file: " + c("san.cnf") + ": no PEM certificate"),
        (["--tls-client-cert", c("client.pem")], "tls.client_cert: given without tls.client_key"),
        (["--tls-client-cert", c("client.pem"), "--tls-client-key", c("server.key")],
         "tls.client_key: " + c("server.key") + " is not the key of tls.client_cert"),
        (["--tls-client-cert", c("client.key"), "--tls-client-key", c("client.key")],
         "tls.client_cert: " + c("client.key") + ": not a PEM certificate"),
    ]
    for args, want in cases:
        p = subprocess.run([binary("infergate"), "--backend", "https://127.0.0.1:9", "--check-config", *args],
                           capture_output=True, text=True, timeout=10)
        assert p.returncode == 2 and want in p.stderr, (args, p.returncode, p.stderr)
    # the same from a configuration file
    cfg = c("gw.json")
    with open(cfg, "w") as f:
        json.dump({"backends": ["https://127.0.0.1:9"], "tls": {"ca_file": c("missing.pem"), "verify": 1}}, f)
    p = subprocess.run([binary("infergate"), "--config", cfg, "--check-config"], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 2 and "tls.ca_file" in p.stderr, p.stderr


run()
