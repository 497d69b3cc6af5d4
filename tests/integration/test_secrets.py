"""Secrets and ids (issue 46): the batch runner's internal header is the
gateway's own. Its secret comes from the kernel, ids tell nothing about it or
about each other, and the header is believed only on the gateway's own Unix
socket in data_dir: on the public listener it is ignored and never reaches a
backend.

Up to dc13d34 every id came from a per-thread splitmix64 seeded from the
clock, the same stream that drew the secret: one X-Request-Id gave the
generator's state, and stepping it back found the secret. The predictor
below is that attack (invert splitmix64's output, step the state); it must
find nothing now."""

import hashlib
import json
import os
import tempfile

from harness import (FakeBackend, assert_openai_error, chat_body, exchange, http, http_json, rss_kb, sanitized,
                     start_gateway, test, wait_until)

MASK = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
M1, M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
KEY_A, KEY_B = "key-of-tenant-a", "key-of-tenant-b"


def digest(key):
    return hashlib.sha256(key.encode()).hexdigest()


def mix(z):
    z = ((z ^ (z >> 30)) * M1) & MASK
    z = ((z ^ (z >> 27)) * M2) & MASK
    return z ^ (z >> 31)


def unxorshift(x, s):
    y = x
    for _ in range(64 // s + 1):
        y = x ^ (y >> s)
    return y


def unmix(out):
    z = unxorshift(out, 31)
    z = (z * pow(M2, -1, 1 << 64)) & MASK
    z = unxorshift(z, 27)
    z = (z * pow(M1, -1, 1 << 64)) & MASK
    return unxorshift(z, 30)


def word_of(hex_id):
    """The generator output behind the first 16 hex digits of an id, as
    ig_random_hex wrote them up to dc13d34 (low nibble first)."""
    return sum(int(c, 16) << (4 * i) for i, c in enumerate(hex_id[:16]))


def hex_of(word):
    return "".join("0123456789abcdef"[(word >> (4 * i)) & 15] for i in range(16))


def gateway(backends, tmp):
    keys = os.path.join(tmp, "keys.json")
    with open(keys, "w") as f:
        json.dump({"keys": [{"name": "tenant-a", "sha256": digest(KEY_A), "models": ["sim-model"], "rpm": 100000},
                            {"name": "tenant-b", "sha256": digest(KEY_B), "models": ["other-model"]}]}, f)
    gw = start_gateway(backends, "--api-keys-file", keys, "--data-dir", os.path.join(tmp, "data"),
                       "--access-log", os.path.join(tmp, "access.log"))
    gw.access_log = os.path.join(tmp, "access.log")
    gw.data_dir = os.path.join(tmp, "data")
    wait_until(lambda: http("GET", gw.url + "/health")[0] == 200, timeout=10, what="gateway healthy")
    return gw


def request_ids(gw, n):
    """n X-Request-Id values, on one keep-alive connection."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", int(gw.url.rsplit(":", 1)[1]), timeout=30)
    body = json.dumps(chat_body("id", max_tokens=1))
    out = []
    for _ in range(n):
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"Authorization": "Bearer " + KEY_A, "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        assert r.status == 200, r.status
        out.append(r.getheader("X-Request-Id"))
    c.close()
    return out


def batch_header_request(gw, value, bearer=None, model="sim-model"):
    headers = {"X-Infergate-Batch": value}
    if bearer:
        headers["Authorization"] = "Bearer " + bearer
    return http_json("POST", gw.url + "/v1/chat/completions", chat_body("as another", model=model),
                     headers=headers)


@test
def ids_are_unpredictable_and_the_batch_header_does_nothing_on_the_public_port():
    tmp = tempfile.mkdtemp(prefix="ig-secrets-")
    fb = FakeBackend()
    gw = gateway([fb], tmp)
    ids = request_ids(gw, 10000)
    assert all(i and len(i) == 32 and all(c in "0123456789abcdef" for c in i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids), "a request id came twice"
    # The attack that worked up to dc13d34: each id's first word is a
    # splitmix64 output; its state predicts the ids after it (other draws
    # on the same thread come between, so look up to 200 steps ahead).
    seen = {i[:16] for i in ids}
    predicted = 0
    guesses = set()
    for i in ids[:2000]:
        state = unmix(word_of(i))
        for step in range(1, 200):
            nxt = hex_of(mix((state + step * GOLDEN) & MASK))
            if step <= 3:
                guesses.add(nxt + hex_of(mix((state + (step + 1) * GOLDEN) & MASK)))
            if nxt in seen:
                predicted += 1
                break
    assert predicted == 0, f"{predicted} of 2000 request ids predicted a later one"
    # Nibble frequencies of 320,000 hex digits: each of 16 near 20,000 (a
    # clock-seeded or biased draw would show).
    counts = [0] * 16
    for i in ids:
        for c in i:
            counts[int(c, 16)] += 1
    assert all(18500 < c < 21500 for c in counts), counts

    # Stepped back from the first ids: where the secret sat in that stream
    # (two outputs, 32 hex digits).
    for i in ids[:3]:
        state = unmix(word_of(i))
        for back in range(1, 400):
            s0 = (state - back * GOLDEN) & MASK
            guesses.add(hex_of(mix(s0)) + hex_of(mix((s0 + GOLDEN) & MASK)))
    rss0 = rss_kb(gw.pid)
    # Any guess, with tenant A's digest as the owner, on the public port:
    # no Authorization, so 401, and nothing reaches the backend.
    before = len(fb.posts())
    candidates = sorted(guesses) + ids[:100] + ["0" * 32, "f" * 32]
    for g in candidates:
        st, _, obj = batch_header_request(gw, f"{g} {digest(KEY_A)}")
        assert_openai_error(st, obj, 401)
    assert len(fb.posts()) == before, "a request with only the batch header reached the backend"
    # With tenant B's own key, the header does not make it tenant A: B's
    # model list still applies (sim-model is A's only) ...
    st, _, obj = batch_header_request(gw, f"{ids[0]} {digest(KEY_A)}", bearer=KEY_B)
    assert st in (403, 404), (st, obj)
    assert len(fb.posts()) == before
    # ... and what B may use is served as B, and the header is not passed on.
    st, _, obj = batch_header_request(gw, f"{ids[1]} {digest(KEY_A)}", bearer=KEY_A)
    assert st == 200, (st, obj)
    last = fb.posts()[-1]
    names = [k.lower() for k, _ in last["headers"]]
    assert "x-infergate-batch" not in names, last["raw"]
    # The gateway's own socket takes no guess either.
    sock_path = [os.path.join(gw.data_dir, n) for n in os.listdir(gw.data_dir) if n.endswith(".sock")]
    assert sock_path, os.listdir(gw.data_dir)
    body = json.dumps(chat_body("inside")).encode()
    data, _ = exchange(sock_path[0], b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Type: application/json\r\nX-Infergate-Batch: %s %s\r\nContent-Length: %d\r\n"
                       b"Connection: close\r\n\r\n%s" % (ids[2].encode(), digest(KEY_A).encode(), len(body), body),
                       wait=10, until_close=True)
    assert data.startswith(b"HTTP/1.1 401"), data[:200]
    assert len(fb.posts()) == before + 1
    # It serves on, its memory where it was before the guesses.
    st, _, obj = batch_header_request(gw, "-", bearer=KEY_A)
    assert st == 200, (st, obj)
    rss1 = rss_kb(gw.pid)
    print(f"# {len(candidates) + 3} requests with a guessed secret; gateway RSS {rss0} kB before, {rss1} kB after")
    assert sanitized(gw.pid) or rss1 < rss0 + 8192, (rss0, rss1)
    # The gateway logged nobody as tenant A for the refused requests: A's
    # lines in the access log are the 10,000 ids and the two A made itself.
    with open(gw.access_log) as f:
        a_lines = [ln for ln in f if "tenant-a" in ln]
    assert len(a_lines) == 10002, len(a_lines)


if __name__ == "__main__":
    from harness import run
    run()
