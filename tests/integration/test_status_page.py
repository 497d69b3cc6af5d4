"""The live status page (GET / and GET /status) in a real browser.

Debian's headless Chromium loads the page from a gateway with infergate-sim
processes behind it, runs its JavaScript (which polls health/backends), and
dumps the resulting DOM; the test checks what a person would see: every
backend, which one is down, the request counters, the chart. A screenshot is
kept as a test artefact in <build>/tests/status-page.png.

Chromium is required, not optional: without it this test fails and says how
to install it (CI installs it)."""

import html.parser
import json
import os
import shutil
import struct
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import (BUILDDIR, SRCDIR, Dir, chat_body, free_port, http, http_json, keys_file, run, start, start_gateway,
                     start_sim, start_sims, test, upload, wait_until)

FAST = ("--tokens-per-second", "0", "--ttft-ms", "0")
QUICK_HEALTH = ("--health-interval-ms", "100", "--health-timeout-ms", "500")
PAGE = os.path.join(SRCDIR, "src", "gateway", "api", "status.html")
SCREENSHOT = os.path.join(BUILDDIR, "tests", "status-page.png")


def chromium_path():
    path = os.environ.get("IG_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        raise AssertionError("chromium is not installed; the status page test needs a real browser: "
                             "apt-get install -y chromium")
    return path


def chromium(url, *extra, budget_ms=5000):
    """Run headless Chromium on url with a fresh profile; returns its stdout.
    The virtual time budget lets the page's timers and fetches run that long."""
    with tempfile.TemporaryDirectory(prefix="ig-chromium-") as profile, \
            tempfile.TemporaryFile() as out:
        p = start([chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                   "--no-first-run", "--disable-background-networking", "--disable-component-update",
                   "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}", *extra, url],
                  stdout=out)
        rc = p.wait(timeout=120)
        out.seek(0)
        data = out.read().decode(errors="replace")
        assert rc == 0, f"chromium exited with {rc}:\n{p.read_log()[-2000:]}"
        return data


class Dom(html.parser.HTMLParser):
    """The parts of the dumped DOM the test reads: elements with an id (attrs
    and text), backend rows (attrs and cell texts), tag counts inside #chart."""
    VOID = {"meta", "link", "br", "img", "input", "hr", "col", "wbr", "source", "area", "base"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.by_id = {}       # id -> {"tag", "attrs", "text"}
        self.rows = {}        # backend url -> {"attrs", "cells": {class: text}}
        self.batches = {}     # batch id -> the row's attrs
        self.named = {}       # a models' or keys' row's data-name -> its cells' texts
        self.body = {}
        self.chart_tags = []
        self._stack = []      # [tag, attrs, text parts]
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = {k: (v if v is not None else "") for k, v in attrs}
        if tag == "body":
            self.body = a
        if any(e[1].get("id") == "chart" for e in self._stack):
            self.chart_tags.append(tag)
        if tag in self.VOID:
            return
        self._stack.append([tag, a, []])

    def handle_startendtag(self, tag, attrs):
        if any(e[1].get("id") == "chart" for e in self._stack):
            self.chart_tags.append(tag)

    def handle_data(self, data):
        for e in self._stack:
            e[2].append(data)

    def handle_endtag(self, tag):
        while self._stack:
            t, a, parts = self._stack.pop()
            text = " ".join("".join(parts).split())
            if "id" in a:
                self.by_id[a["id"]] = {"tag": t, "attrs": a, "text": text}
            if t in ("td", "th") and self._stack and self._stack[-1][0] == "tr":
                self._stack[-1][1].setdefault("_cells", {})[a.get("class", "").split(" ")[0]] = text
                self._stack[-1][1].setdefault("_texts", []).append(text)
            if t == "tr" and "data-batch" in a:
                self.batches[a["data-batch"]] = a
            if t == "tr" and "data-name" in a:   # the models' and keys' panels: their cells in order
                self.named.setdefault(a["data-name"], a.get("_texts", []))
            if t == "tr" and "data-backend-url" in a:
                self.rows[a["data-backend-url"]] = {"attrs": a, "cells": a.get("_cells", {})}
            if t == tag:
                break

    def text(self, id_):
        assert id_ in self.by_id, f"the page has no element #{id_}"
        return self.by_id[id_]["text"]

    def attr(self, id_, name):
        assert id_ in self.by_id, f"the page has no element #{id_}"
        return self.by_id[id_]["attrs"].get(name)


def as_int(text):
    return int(text.replace(",", ""))


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def backends_json(gw):
    st, _, obj = http_json("GET", gw.url + "/health/backends")
    assert st == 200, st
    return obj


@test
def status_page_shows_backends_counters_and_chart():
    chromium_path()
    sims = start_sims(3, *FAST)
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 3,
               what="3 healthy backends")
    for i in range(30):
        st, _, body = http("POST", gw.url + "/v1/chat/completions",
                           chat_body(f"status page prompt {i}", max_tokens=20))
        assert st == 200, (st, body)
    dead = sims[1]
    dead.stop()
    wait_until(lambda: {b["url"]: b["state"] for b in backends_json(gw)["backends"]}[dead.url] == "down",
               what=f"{dead.url} down")

    # The gateway serves the page itself, the same at / and /status.
    st, hdrs, page = http("GET", gw.url + "/status")
    assert st == 200, (st, page[:300])
    assert hdrs.get("content-type", "").startswith("text/html"), hdrs
    st_root, hdrs_root, page_root = http("GET", gw.url + "/")
    assert st_root == 200 and page_root == page, (st_root, page_root[:300])
    with open(PAGE, "rb") as f:
        assert page == f.read(), "GET /status does not serve the current src/gateway/api/status.html " \
                                 "(is the embedded copy rebuilt when the file changes?)"

    def kept(t):   # the headroom kept over the models (/health/backends)
        return sum(m["headroom"]["kept_slots"] for m in t.get("models", {}).values() if "headroom" in m)
    kept_before = kept(backends_json(gw))
    dom = Dom(chromium(gw.url + "/status", "--dump-dom"))
    # The script ran and read the gateway more than once (rates need two reads).
    assert dom.body.get("data-status") == "ok", (dom.body, dom.by_id.get("banner"))
    assert int(dom.body.get("data-polls", "0")) >= 2, dom.body

    truth = backends_json(gw)
    want = {b["url"]: b for b in truth["backends"]}
    assert set(dom.rows) == {s.url for s in sims} == set(want), (sorted(dom.rows), [s.url for s in sims])
    for s in sims:
        row = dom.rows[s.url]
        expect = "down" if s is dead else "up"
        assert row["attrs"].get("data-state") == expect, (s.url, row)
        assert row["cells"].get("state") == expect, (s.url, row["cells"])
        assert row["cells"].get("url") == s.url, row["cells"]
        # No traffic after the kill: what the page shows is what the gateway counts.
        assert int(row["attrs"]["data-served"]) == want[s.url]["served"], (row, want[s.url])
        assert as_int(row["cells"]["served"]) == want[s.url]["served"], (row, want[s.url])
        if "admin" in want[s.url]:
            assert row["attrs"].get("data-admin") == want[s.url]["admin"] == "enabled", row
    assert sum(int(r["attrs"]["data-served"]) for r in dom.rows.values()) == 30, dom.rows

    requests = as_int(dom.text("sum-requests"))
    assert requests > 0 and int(dom.attr("sum-requests", "data-value")) == requests, dom.by_id["sum-requests"]
    assert dom.text("sum-healthy") == "2 / 3", dom.text("sum-healthy")
    if "gateway" in truth:
        g = truth["gateway"]
        assert dom.text("version") == g["version"], (dom.text("version"), g)
        assert requests >= 30, requests
        assert as_int(dom.text("sum-ctokens")) == g["completion_tokens"] > 0, (dom.text("sum-ctokens"), g)
        # Per priority class: running / waiting (idle now: 0 / 0 each).
        for c in ("high", "normal", "low"):
            k = g["classes"][c]
            assert dom.text(f"cls-{c}") == f"{k['inflight']} / {k['waiting']}", (c, dom.text(f"cls-{c}"), k)
    # Rates: nothing moved while the page watched.
    assert dom.text("sum-rps") == "0", dom.text("sum-rps")
    # The learned headroom over the models: the 30 requests were interactive, and with no more
    # it only falls (to 0 once they stopped), so the page's reading lies between the test's
    # readings before and after it.
    if "models" in truth:
        assert kept(backends_json(gw)) <= as_int(dom.text("sum-headroom")) <= kept_before, \
            (dom.text("sum-headroom"), kept_before)

    assert dom.by_id.get("chart", {}).get("tag") == "svg", "no <svg id=chart>"
    assert int(dom.attr("chart", "data-points")) >= 1, dom.by_id["chart"]
    assert "path" in dom.chart_tags and "text" in dom.chart_tags, dom.chart_tags

    os.makedirs(os.path.dirname(SCREENSHOT), exist_ok=True)
    if os.path.exists(SCREENSHOT):
        os.unlink(SCREENSHOT)
    # Traffic while the screenshot is taken, so the artefact shows the chart
    # and rates moving (the numbers follow Chromium's virtual clock).
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            http("POST", gw.url + "/v1/chat/completions", chat_body(f"screenshot prompt {i}", max_tokens=20))
            i += 1
    workers = [threading.Thread(target=load, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        chromium(gw.url + "/status", f"--screenshot={SCREENSHOT}", "--window-size=1280,800", budget_ms=8000)
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    assert os.path.getsize(SCREENSHOT) > 10000, os.path.getsize(SCREENSHOT)
    assert png_size(SCREENSHOT) == (1280, 800), png_size(SCREENSHOT)


@test
def the_page_shows_the_minutes_before_it_opened():
    # The gateway keeps its headline figures once a second (GET /status/history, 30 minutes);
    # the page, opened after a 2-minute run, charts those 2 minutes at once instead of
    # "collecting...".
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim])
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    stop = threading.Event()
    sent = [0]

    def load():
        while not stop.is_set():
            http("POST", gw.url + "/v1/chat/completions", chat_body(f"h{sent[0]}", max_tokens=4, stream=True))
            sent[0] += 1
            time.sleep(0.05)
    t = threading.Thread(target=load, daemon=True)
    t.start()
    time.sleep(120)
    stop.set()
    t.join(10)
    h = http_json("GET", gw.url + "/status/history")[2]
    assert h["interval_s"] == 1 and h["window_s"] == 1800 and h["fields"][:3] == ["t_ms", "requests",
                                                                                 "completion_tokens"], h
    samples = h["samples"]
    assert len(samples) >= 118, len(samples)
    # one sample per second, in order, counters that only grow
    assert all(b[0] // 1000 > a[0] // 1000 and b[1] >= a[1] and b[2] >= a[2] for a, b in zip(samples, samples[1:])), \
        samples
    assert samples[-1][1] - samples[0][1] >= sent[0] * 0.8 > 100, (samples[0], samples[-1], sent[0])
    assert samples[-1][5] == 1, samples[-1]     # healthy backends
    # opened now, with no traffic: the chart is the run's, from the history
    dom = Dom(chromium(gw.url + "/status", "--dump-dom", budget_ms=1500))
    assert int(dom.body.get("data-history", "0")) >= 115, dom.body       # the 2 minutes, at open
    assert int(dom.attr("chart", "data-points")) >= 115, dom.by_id["chart"]
    assert "path" in dom.chart_tags, dom.chart_tags
    # the models' panel: the one model, its backend up, nothing running or waiting, the slots its
    # headroom keeps (learned from the run's requests), its TTFT p95 (the histogram's bucket)
    model = dom.named["sim-model"]
    assert model[:4] == ["sim-model", "1 / 1", "0", "0 / 0 / 0"] and model[5].endswith(" ms"), model
    m = http_json("GET", gw.url + "/health/backends")[2]["models"]["sim-model"]
    assert int(model[4]) >= m["headroom"]["kept_slots"] and model[5] == f"{round(m['ttft_p95_s'] * 1000)} ms", (model, m)
    assert dom.attr("models-panel", "hidden") is None and dom.attr("keys-panel", "hidden") is not None, dom.by_id
    shot = os.path.join(BUILDDIR, "tests", "status-page-history.png")
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    chromium(gw.url + "/status", f"--screenshot={shot}", "--window-size=1280,800", budget_ms=1500)
    assert os.path.getsize(shot) > 10000 and png_size(shot) == (1280, 800), shot


@test
def the_page_lists_the_keys_that_used_the_most_tokens():
    d = Dir()
    alice, bob = keys_file(d("keys.json"), "alice", "bob")
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim], "--api-keys-file", d("keys.json"), "--auth-status", "0")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, timeout=10, what="up")
    for key, n, tokens in ((bob, 1, 3), (alice, 3, 9)):
        for i in range(n):
            st, _, _ = http("POST", gw.url + "/v1/chat/completions", chat_body(f"k{i}", max_tokens=tokens),
                            headers=key)
            assert st == 200
    dom = Dom(chromium(gw.url + "/status", "--dump-dom", budget_ms=1500))
    keys = [n for n in dom.named if n in ("alice", "bob")]
    assert keys == ["alice", "bob"], dom.named             # most tokens first
    top = http_json("GET", gw.url + "/health/backends")[2]["top_keys"]
    assert [k["name"] for k in top] == ["alice", "bob"] and top[0]["tokens"] > top[1]["tokens"] > 3, top
    assert dom.named["alice"][:3] == ["alice", f"{top[0]['tokens']:,}", "0"], dom.named["alice"]
    assert dom.attr("keys-panel", "hidden") is None


class PageServer:
    """Serves status.html under path prefixes, the way a reverse proxy would,
    with health/backends broken in chosen ways (the gateway itself cannot be
    made unreachable while it serves the page)."""

    def __init__(self, gateway_url):
        with open(PAGE, "rb") as f:
            page = f.read()
        calls = {"flaky": 0}
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                prefix, _, rest = self.path.lstrip("/").partition("/")
                status, ctype, body = 404, "text/plain", b"not found"
                if rest == "status":
                    status, ctype, body = 200, "text/html; charset=utf-8", page
                elif rest == "health/backends" and prefix == "down":
                    status, body = 503, b"upstream gone"
                elif rest == "health/backends" and prefix == "flaky":
                    with lock:
                        calls["flaky"] += 1
                        n = calls["flaky"]
                    if n <= 2:
                        status, body = 502, b"bad gateway"
                    else:
                        status, _, body = http("GET", gateway_url + "/health/backends")
                        ctype = "application/json"
                elif rest == "health/backends" and prefix == "limits":
                    # the gateway's answer, with a set max_inflight and a learned count (and,
                    # as an older gateway sends it, the second without "limit")
                    status, _, body = http("GET", gateway_url + "/health/backends")
                    j = json.loads(body)
                    j["backends"][0].update(max_inflight=5, limit=5, limit_from="max_inflight")
                    j["backends"][1]["max_inflight"] = 0
                    j["backends"][1]["learned_slots"] = 7
                    del j["backends"][1]["limit"]
                    body, ctype = json.dumps(j).encode(), "application/json"
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.calls = calls
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@test
def status_page_shows_unreachable_and_recovers_behind_a_prefix():
    chromium_path()
    sims = start_sims(2, *FAST)
    gw = start_gateway(sims, *QUICK_HEALTH)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 2,
               what="2 healthy backends")
    srv = PageServer(gw.url)
    try:
        # Every read fails: a banner says so, and the page keeps trying.
        dom = Dom(chromium(srv.url + "/down/status", "--dump-dom"))
        assert dom.body.get("data-status") == "unreachable", dom.body
        assert "unreachable" in dom.text("banner").lower(), dom.text("banner")
        assert "503" in dom.text("banner"), dom.text("banner")
        assert dom.rows == {}, dom.rows

        # The first two reads fail, then the gateway answers (relative URL:
        # /flaky/status reads /flaky/health/backends).
        dom = Dom(chromium(srv.url + "/flaky/status", "--dump-dom"))
        assert srv.calls["flaky"] >= 4, srv.calls
        assert dom.body.get("data-status") == "ok", (dom.body, dom.by_id.get("banner"))
        assert set(dom.rows) == {s.url for s in sims}, sorted(dom.rows)
        assert all(r["attrs"]["data-state"] == "up" for r in dom.rows.values()), dom.rows
        assert dom.text("sum-healthy") == "2 / 2", dom.text("sum-healthy")

        # A backend's limit follows its in-flight count: the one in force (with where it comes
        # from), or from an older gateway max_inflight, else the learned one.
        dom = Dom(chromium(srv.url + "/limits/status", "--dump-dom"))
        cells = [dom.rows[s.url]["cells"]["inflight"] for s in sims]
        assert cells == ["0 / 5", "0 / 7"], cells
    finally:
        srv.close()


@test
def status_page_shows_the_batches():
    chromium_path()
    d = Dir()
    sims = start_sims(1, *FAST, "--model", "m")
    gw = start_gateway(sims, "--data-dir", d("data"), *QUICK_HEALTH)
    dom = Dom(chromium(gw.url + "/status", "--dump-dom", budget_ms=1500))
    assert dom.attr("batches-panel", "hidden") is not None and not dom.batches   # no batch: no panel
    good = "".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}}) + "\n"
                   for i in range(20))
    want = {}
    for data in (good, good + "{torn\n"):
        st, f = upload(gw, data.encode())
        st, _, b = http_json("POST", gw.url + "/v1/batches", {"input_file_id": f["id"], "completion_window": "24h",
                                                              "endpoint": "/v1/chat/completions"})
        assert st == 200, b
        want[b["id"]] = "completed" if data == good else "failed"
    for bid, status in want.items():
        wait_until(lambda: http_json("GET", f"{gw.url}/v1/batches/{bid}")[2]["status"] == status, what=status)
    dom = Dom(chromium(gw.url + "/status", "--dump-dom", budget_ms=2500))
    assert dom.attr("batches-panel", "hidden") is None, dom.by_id["batches-panel"]
    got = {bid: (a["data-status"], int(a["data-done"])) for bid, a in dom.batches.items()}
    assert got == {bid: (st, 20 if st == "completed" else 0) for bid, st in want.items()}, got


@test
def status_page_shows_the_halves_of_prefill_decode_pairs():
    chromium_path()
    port = free_port()
    pre = start_sim(*FAST, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port))
    dec = start_sim(*FAST, "--disaggregation-mode", "decode")
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"backends": [{"url": pre.url, "role": "prefill", "engine": "sglang", "bootstrap_port": port},
                            {"url": dec.url, "role": "decode", "engine": "sglang"}]}, cfg)
    cfg.close()
    gw = start_gateway([], *QUICK_HEALTH, config=cfg.name)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 2, what="2 healthy backends")
    for i in range(3):
        st, _, _ = http("POST", gw.url + "/v1/chat/completions", chat_body(f"pair {i} " * 20, max_tokens=4))
        assert st == 200
    dom = Dom(chromium(gw.url + "/status", "--dump-dom"))
    assert dom.rows[pre.url]["attrs"]["data-role"] == "prefill", dom.rows[pre.url]
    assert dom.rows[dec.url]["attrs"]["data-role"] == "decode", dom.rows[dec.url]
    assert dom.rows[pre.url]["cells"]["url"] == f"{pre.url} (prefill, 3 pairs)", dom.rows[pre.url]["cells"]
    assert dom.rows[dec.url]["cells"]["url"] == f"{dec.url} (decode, 3 pairs)", dom.rows[dec.url]["cells"]


@test
def status_page_shows_a_servers_data_parallel_ranks_as_rows():
    """backends[].dp_ranks: a row per rank, keyed URL#dpR, its cell naming the rank
    and its own count of requests served."""
    chromium_path()
    sim = start_sim(*FAST, "--flavor", "vllm", "--dp-ranks", "2")
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"backends": [{"url": sim.url, "dp_ranks": 2}]}, cfg)
    cfg.close()
    gw = start_gateway([], *QUICK_HEALTH, config=cfg.name)
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 2, what="2 ranks up")
    served = [0, 0]
    for i in range(5):
        st, h, _ = http("POST", gw.url + "/v1/chat/completions", chat_body(f"rank row {i}", max_tokens=2))
        assert st == 200
        served[int(h["x-infergate-dp-rank"])] += 1
    dom = Dom(chromium(gw.url + "/status", "--dump-dom"))
    for r in (0, 1):
        row = dom.rows[f"{sim.url}#dp{r}"]
        assert row["attrs"]["data-dp-rank"] == str(r), row
        assert row["cells"]["url"] == f"{sim.url} (DP rank {r})", row["cells"]
        assert row["attrs"]["data-served"] == str(served[r]), (row, served)


@test
def status_page_is_small_and_self_contained():
    with open(PAGE, "rb") as f:
        page = f.read()
    assert len(page) < 32 * 1024, len(page)   # 25 KiB before its history, models and keys panels
    text = page.decode()
    for needle in ("<script src", "<link", "@import", "url(http", "src=\"http", "href=\"http"):
        assert needle not in text, f"status.html refers to an external asset: {needle}"


if __name__ == "__main__":
    run()
