"""The traffic scheduler with real processes: who runs next when a slot
frees. One backend slot (--max-inflight 1) makes the order of the access
log's lines the order of dispatch, so every rule is asserted as an order or
a count, never as a time: classes, low's guaranteed turn, fair shares
between keys and their weights, a key's cap, timeouts per class, a bad
header, and infergate-bulk's class."""

import collections
import json
import os
import subprocess
import tempfile
import threading
import time

from harness import (written_lines, Dir, FakeBackend, assert_openai_error, binary, chat_body, http, http_json, raw_post, run,
                     sim_requests, start_gateway, start_sim, test, wait_until)


def digest(key):
    p = subprocess.run([binary("infergate"), "--hash-key"], input=key, capture_output=True, text=True, timeout=10)
    return p.stdout.strip()


def waiting(gw):
    return http_json("GET", gw.url + "/health/backends")[2]["gateway"]["classes"]


def total_waiting(gw):
    return sum(c["waiting"] for c in waiting(gw).values())


def log_lines(path, n):
    """The first n access-log lines of proxied requests, waiting for them."""
    def lines():
        # Proxied requests only (the gateway's own endpoints are logged too).
        return [o for o in written_lines(path) if "request_id" in o]
    wait_until(lambda: len(lines()) >= n, timeout=60, what=f"{n} access log lines")
    return lines()[:n]


class Slot:
    """One slot, held by a request the simulator never answers (fault mode hang) until
    release() closes its client: everything queued meanwhile waits, whatever the machine's
    speed, and then goes out in the gateway's order."""

    def __init__(self, *gw_extra, sim_extra=()):
        self.sim = start_sim("--tokens-per-second", "200", "--ttft-ms", "0", *sim_extra)
        self.dir = tempfile.TemporaryDirectory()
        self.log = os.path.join(self.dir.name, "access.log")
        self.gw = start_gateway([self.sim], "--max-inflight", "1", "--access-log", self.log,
                                "--queue-size", "5000", *gw_extra)
        wait_until(lambda: http_json("GET", self.gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
        assert http("POST", self.sim.url + "/sim/fault", {"mode": "hang"})[0] == 200
        self.blocker = raw_post(self.gw.port, chat_body("block", max_tokens=2), [("X-Request-Id", "blocker")])
        wait_until(lambda: http_json("GET", self.sim.url + "/sim/state")[2]["num_hung_reqs"] == 1, timeout=10,
                   what="the blocker held by the simulator")
        assert http("POST", self.sim.url + "/sim/fault", {"mode": "ok"})[0] == 200
        self.socks = []
        self.seen = {}           # request id -> when the test saw it in the queue
        self.freed = None        # when the test let the blocker go

    def queue(self, rid, klass=None, key=None, max_tokens=1):
        headers = [("X-Request-Id", rid)]
        if klass:
            headers.append(("X-Infergate-Priority", klass))
        if key:
            headers.append(("Authorization", f"Bearer {key}"))
        n = total_waiting(self.gw)
        self.socks.append(raw_post(self.gw.port, chat_body(rid, max_tokens=max_tokens), headers))
        wait_until(lambda: total_waiting(self.gw) == n + 1, timeout=10, what=f"{rid} queued")
        self.seen[rid] = time.monotonic()

    def release(self):
        """The blocker's client leaves: the gateway aborts it and its slot frees."""
        if self.blocker:
            self.freed = time.monotonic()
            self.blocker.close()
            self.blocker = None

    def order(self, n):
        """Request ids in dispatch order (the access log's "dispatch": the gateway's count of
        requests sent; lines are written as requests complete, which two requests finishing
        in the same loop turn can swap), the blocker excluded."""
        self.release()

        def sent():
            return [o for o in written_lines(self.log) if o.get("dispatch") is not None]
        wait_until(lambda: len(sent()) >= n + 1, timeout=60, what=f"{n + 1} requests sent and logged")
        lines = sorted(sent(), key=lambda x: x["dispatch"])[:n + 1]
        assert lines[0]["request_id"] == "blocker", lines[0]
        self.blocker_line = lines[0]
        return [x["request_id"] for x in lines[1:]], lines[1:]

    def close(self):
        self.release()
        for s in self.socks:
            s.close()
        self.dir.cleanup()


@test
def classes_are_served_in_strict_order():
    slot = Slot()
    try:
        for i in range(4):
            slot.queue(f"low{i}", "low")
        for i in range(3):
            slot.queue(f"normal{i}")              # no header: normal
        for i in range(2):
            slot.queue(f"high{i}", "high")
        assert waiting(slot.gw)["low"]["waiting"] == 4 and waiting(slot.gw)["high"]["waiting"] == 2
        ids, lines = slot.order(9)
        assert ids == ["high0", "high1", "normal0", "normal1", "normal2", "low0", "low1", "low2", "low3"], ids
        assert [x["priority"] for x in lines] == ["high"] * 2 + ["normal"] * 3 + ["low"] * 4
        assert all(x["status"] == 200 for x in lines), lines
        # queue_ms, the wait a request's log line reports: none for the blocker, which found
        # the slot free; for the others at least the time the test saw each waiting (from
        # seeing it queued to freeing the slot: the same monotonic clock, truncated to ms), and
        # a longer one for each that came earlier and went later: every low came before every
        # normal and high and went after them.
        assert slot.blocker_line["queue_ms"] == 0, slot.blocker_line
        wait = {x["request_id"]: x["queue_ms"] for x in lines}
        for rid, ms in wait.items():
            seen_ms = int((slot.freed - slot.seen[rid]) * 1000)
            assert ms >= seen_ms - 1, (rid, ms, seen_ms)
        assert min(wait[f"low{i}"] for i in range(4)) >= max(wait[f"normal{i}"] for i in range(3)), wait
        assert min(wait[f"normal{i}"] for i in range(3)) >= max(wait[f"high{i}"] for i in range(2)), wait
        _, _, text = http("GET", slot.gw.url + "/metrics")
        assert 'infergate_queue_wait_seconds_count{class="low"} 4' in text.decode()
        assert 'infergate_queue_wait_seconds_count{class="high"} 2' in text.decode()
    finally:
        slot.close()


@test
def low_keeps_its_share_while_high_floods():
    slot = Slot("--low-share-percent", "25")     # one dispatch in 4
    try:
        for i in range(6):
            slot.queue(f"low{i}", "low")
        for i in range(12):
            slot.queue(f"high{i}", "high")
        ids, _ = slot.order(18)
        classes = "".join("L" if i.startswith("low") else "H" for i in ids)
        assert classes == "HHHLHHHLHHHLHHHLLL", classes
        assert ids[3] == "low0" and ids[7] == "low1", ids   # FIFO within the class
    finally:
        slot.close()


@test
def keys_share_slots_by_weight():
    a, b, c = "sk-team-a", "sk-team-b", "sk-team-c"
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "c.json")
        with open(cfg, "w") as f:
            json.dump({"api_key_settings": {digest(c): {"weight": 3}}}, f)
        # Key a queued 60 first, then the other key 60. Equal weights (b): they alternate, FIFO
        # within each key; weights 3:1 (c has weight 3 in the configuration): c gets 75%.
        for other, n, lo, hi in ((b, 120, 0.45, 0.55), (c, 80, 0.20, 0.30)):
            slot = Slot("--config", cfg)
            try:
                for i in range(60):
                    slot.queue(f"a{i}", key=a)
                for i in range(60):
                    slot.queue(f"{other[-1]}{i}", key=other)
                ids, _ = slot.order(n)
                for w in range(0, min(n, 100), 20):     # every window of 20 while both wait
                    share = sum(1 for x in ids[w:w + 20] if x.startswith("a")) / 20
                    assert lo <= share <= hi, (other, w, share, ids[w:w + 20])
                mine = [x for x in ids if x.startswith("a")]
                assert mine == [f"a{i}" for i in range(len(mine))], mine               # FIFO per key
            finally:
                slot.close()


def configured(config, backends=(), *extra):
    """A gateway started on `config` (a dict, written to a file of its own) and `extra`, once it
    knows its models."""
    d = Dir()
    with open(d("c.json"), "w") as f:
        json.dump(config, f)
    gw = start_gateway(list(backends), "--config", d("c.json"), *extra)
    gw.conf_dir = d   # removed with the gateway's object
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    return gw


def low_flood(gw, n, max_tokens):
    """n streams of class low held open on gw (their sockets: close them)."""
    return [raw_post(gw.port, chat_body(f"bulk{i}", max_tokens=max_tokens), [("X-Infergate-Priority", "low")])
            for i in range(n)]


def chat_queued(gw, prompt):
    """A normal chat request through gw, answered: whether it waited in the gateway's queue."""
    st, hdrs, _ = http_json("POST", gw.url + "/v1/chat/completions", chat_body(prompt, max_tokens=2))
    assert st == 200, (st, hdrs)
    return "x-infergate-queued-ms" in hdrs


@test
def a_key_over_its_cap_waits_while_others_run():
    sim = start_sim("--tokens-per-second", "20", "--ttft-ms", "0")
    gw = configured({"api_key_settings": {digest("sk-capped"): {"max_inflight": 1}}}, [sim], "--max-inflight", "8")
    results = {}

    def call(name, key):
        results[name] = http_json("POST", gw.url + "/v1/chat/completions", chat_body(name, max_tokens=20),
                                  headers={"Authorization": f"Bearer {key}"}, timeout=60)
    ts = [threading.Thread(target=call, args=(f"capped{i}", "sk-capped")) for i in range(3)]
    for t in ts:
        t.start()
    wait_until(lambda: waiting(gw)["normal"]["waiting"] == 2, timeout=10, what="two capped requests waiting")
    keys = {k["key"]: k for k in http_json("GET", gw.url + "/health/backends")[2]["keys"]}
    capped = keys[digest("sk-capped")[:12]]          # a digest's first 12 hex digits name it
    assert capped["inflight"] == 1 and capped["max_inflight"] == 1, keys
    # Another key runs at once, beside the capped one's single request (8 slots are free).
    ts.append(threading.Thread(target=call, args=("free", "sk-free")))
    ts[-1].start()
    ts[-1].join(60)
    for t in ts:
        t.join(60)
    assert all(r[0] == 200 for r in results.values()), results
    assert "x-infergate-queued-ms" not in results["free"][1], results["free"][1]
    assert sum("x-infergate-queued-ms" in results[f"capped{i}"][1] for i in range(3)) == 2


@test
def reserved_slots_stay_free_for_interactive_requests():
    sim = start_sim("--tokens-per-second", "20", "--ttft-ms", "0")
    gw = configured({"backends": [{"url": sim.url, "max_inflight": 3, "reserve_slots": 1}]})
    socks = low_flood(gw, 5, 400)
    try:
        # 2 of the 3 slots run low requests; 3 wait although a slot is free.
        wait_until(lambda: waiting(gw)["low"]["waiting"] == 3, timeout=10, what="3 low requests waiting")
        assert waiting(gw)["low"]["inflight"] == 2, waiting(gw)
        # A normal request takes the reserved slot at once.
        assert not chat_queued(gw, "chat")
        assert waiting(gw)["low"]["waiting"] == 3 and waiting(gw)["low"]["inflight"] == 2, waiting(gw)
    finally:
        for s in socks:
            s.close()


@test
def a_headroom_learned_from_interactive_traffic_keeps_a_slot_free_and_goes_when_it_stops():
    # Four slots, 60 low requests of about a second each (15 s of bulk work). No knob: with no
    # interactive request, low takes all four; the first normal one waits for a slot, and from
    # then on one slot is kept free of low work, so the next ones are not queued; once they
    # stop, low has all four again. With headroom.max_percent 0: priority alone.
    sim = start_sim("--tokens-per-second", "20", "--ttft-ms", "0")
    for learned in (True, False):
        gw = configured({"backends": [{"url": sim.url, "max_inflight": 4}]}, [],
                        *(() if learned else ("--headroom-max-percent", "0")))
        socks = low_flood(gw, 60, 20)
        try:
            wait_until(lambda: waiting(gw)["low"]["inflight"] == 4 and waiting(gw)["low"]["waiting"] > 40,
                       timeout=10, what="four low running, the rest waiting")
            model = lambda: http_json("GET", gw.url + "/health/backends")[2]["models"]["sim-model"]["headroom"]
            assert model()["slots"] == 0, model()
            assert chat_queued(gw, "first")   # every slot was low's
            queued = []
            for i in range(3):
                if learned:   # low's next ends leave one slot free
                    wait_until(lambda: waiting(gw)["low"]["inflight"] == 3, timeout=10, what="a slot kept free")
                queued.append(chat_queued(gw, f"chat {i}"))
            if not learned:
                assert queued == [True] * 3, queued
                assert model()["slots"] == 0 and "max_percent is 0" in model()["why"], model()
                continue
            assert queued == [False] * 3, queued
            h = model()
            assert h["slots"] >= 1 and h["pool_slots"] == 4 and "requests/s" in h["why"], h
            m = http("GET", gw.url + "/metrics")[2].decode()
            assert 'infergate_model_headroom_slots{model="sim-model"} ' in m, m
            # quiet: after five mean gaps (2 s at least), or the window's 10 s, the headroom
            # is gone and low has all four
            wait_until(lambda: model()["slots"] == 0, timeout=15, what="the headroom gone")
            wait_until(lambda: waiting(gw)["low"]["inflight"] == 4, timeout=5, what="low on all four")
            assert waiting(gw)["low"]["waiting"] > 0, waiting(gw)
        finally:
            for s in socks:
                s.close()
            gw.stop()


@test
def an_interactive_request_goes_over_the_slots_of_a_backend_that_preempts():
    # The simulator as SGLang started with --enable-priority-scheduling (4 slots) says so in its
    # /server_info; the gateway learns it and sends the class as "priority", low -11 and normal 0
    # (more than the server's preemption threshold of 10 apart). A normal request that finds
    # every slot taken by low work goes to it over its slots (headroom.overshoot 2): the server
    # preempts a low request, which resumes later and is answered whole. With
    # headroom.overshoot 0 the normal request waits in the gateway's queue for a slot instead,
    # and nothing is preempted.
    for overshoot in (2, 0):
        sim = start_sim("--enable-priority-scheduling", "--max-running", "4", "--tokens-per-second", "20",
                        "--ttft-ms", "0")
        d = Dir()
        gw = start_gateway([sim], "--headroom-overshoot", str(overshoot), "--access-log", d("access.log"))
        backend = lambda: http_json("GET", gw.url + "/health/backends")[2]["backends"][0]
        wait_until(lambda: backend().get("learned_slots") == 4 and backend()["state"] == "up", timeout=10,
                   what="4 slots learned")
        assert backend()["priority_scheduling"] == {"sent_as": "larger first", "from": "server_info",
                                                     "preempts": True, "high_value": 11,
                                                     "preemption_threshold": 10}, backend()
        answers = {}

        def low(i):
            answers[i] = http_json("POST", gw.url + "/v1/chat/completions", chat_body(f"bulk{i}", max_tokens=20),
                                   headers={"X-Infergate-Priority": "low"}, timeout=60)
        ts = [threading.Thread(target=low, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        try:
            wait_until(lambda: waiting(gw)["low"]["inflight"] == 4 and waiting(gw)["low"]["waiting"] == 4,
                       timeout=10, what="four low running, four waiting")
            queued = chat_queued(gw, "chat")
            state = http_json("GET", sim.url + "/sim/state")[2]
            assert queued == (overshoot == 0), queued
            assert state["requests_preempted"] == (1 if overshoot else 0), state
            headroom = http_json("GET", gw.url + "/health/backends")[2]["models"]["sim-model"]["headroom"]
            assert headroom["overshoot_slots"] == overshoot, headroom
            assert headroom["kept_slots"] == max(0, headroom["slots"] - overshoot), headroom
        finally:
            for t in ts:
                t.join(60)
        # every low request answered whole, the preempted one too
        assert sorted(answers) == list(range(8)), answers
        for st, _, obj in answers.values():
            assert st == 200 and obj["usage"]["completion_tokens"] == 20, obj
        logged = log_lines(d("access.log"), 9)
        chat = [x for x in logged if x["priority"] == "normal"]
        assert len(chat) == 1 and chat[0]["over_slots"] == (overshoot > 0), chat
        assert not any(x["over_slots"] for x in logged if x["priority"] == "low"), logged
        gw.stop()
        sim.stop()


@test
def queue_timeouts_are_per_class():
    slot = Slot("--queue-timeout-ms", "300", "--queue-timeout-low-ms", "60000")
    try:
        slot.queue("low0", "low")
        before = sim_requests(slot.sim)
        st, hdrs, obj = http_json("POST", slot.gw.url + "/v1/chat/completions", chat_body("n", max_tokens=1))
        assert_openai_error(st, obj, 503)
        assert obj["error"]["code"] == "queue_timeout" and "class normal" in obj["error"]["message"], obj
        assert hdrs.get("retry-after") == "1", hdrs
        # The normal request's 503 is logged, never sent; the low one outlived it and runs
        # once the slot frees.
        lines = log_lines(slot.log, 1)
        assert lines[0]["status"] == 503 and lines[0]["dispatch"] is None, lines[0]
        ids, ran = slot.order(1)
        assert ids == ["low0"] and ran[0]["status"] == 200 and ran[0]["priority"] == "low", ran
        assert sim_requests(slot.sim) == before + 1
    finally:
        slot.close()


@test
def a_bad_priority_header_is_a_400_that_reaches_no_backend():
    sim = start_sim("--tokens-per-second", "0")
    gw = start_gateway([sim])
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    before = sim_requests(sim)
    for bad in ("urgent", "HIGH", ""):
        st, _, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("x"),
                               headers={"X-Infergate-Priority": bad})
        assert_openai_error(st, obj, 400, "invalid_request_error")
        assert obj["error"]["param"] == "X-Infergate-Priority" and obj["error"]["code"] == "invalid_priority", obj
    assert sim_requests(sim) == before
    st, _, _ = http_json("POST", gw.url + "/v1/chat/completions", chat_body("x"),
                         headers={"X-Infergate-Priority": "high"})
    assert st == 200


@test
def the_class_reaches_backends_that_schedule_by_priority():
    fbs = [FakeBackend(), FakeBackend(), FakeBackend()]
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "c.json")
        with open(cfg, "w") as f:
            json.dump({"policy": "round-robin", "backends": [
                {"url": fbs[0].url, "priority_field": "sglang"}, {"url": fbs[1].url, "priority_field": "vllm"},
                {"url": fbs[2].url}]}, f)
        gw = start_gateway([], "--config", cfg)
        wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 3, timeout=10,
                   what="3 backends")
        wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
        sent = {}
        for klass in ("high", "normal", "low"):
            body = json.dumps(chat_body("x", max_tokens=2)).encode()
            for _ in range(3):           # round-robin: one to each backend
                st, hdrs, _ = http("POST", gw.url + "/v1/chat/completions", body,
                                   headers={"X-Infergate-Priority": klass, "Content-Type": "application/json"})
                assert st == 200
                fb = next(f for f in fbs if f.url == hdrs["x-infergate-backend"])
                sent[(fb.url, klass)] = fb.posts()[-1]["body"]
        # SGLang runs larger values first, vLLM smaller; the rest of the body is untouched.
        want = {"sglang": {"high": 10, "normal": 0, "low": -10}, "vllm": {"high": -10, "normal": 0, "low": 10}}
        for klass in ("high", "normal", "low"):
            for fb, flavour in ((fbs[0], "sglang"), (fbs[1], "vllm")):
                got = sent[(fb.url, klass)]
                assert got.startswith(b'{"priority":%d,' % want[flavour][klass]), got[:60]
                assert json.loads(got) == dict(chat_body("x", max_tokens=2), priority=want[flavour][klass])
            assert sent[(fbs[2].url, klass)] == json.dumps(chat_body("x", max_tokens=2)).encode()


@test
def fifo_scheduling_ignores_classes():
    slot = Slot("--scheduling", "fifo")
    try:
        slot.queue("low0", "low")
        slot.queue("high0", "high")
        slot.queue("normal0")
        ids, lines = slot.order(3)
        assert ids == ["low0", "high0", "normal0"], ids
        assert {x["priority"] for x in lines} == {"normal"}, lines
    finally:
        slot.close()


@test
def bulk_runs_at_low_priority():
    sim = start_sim("--tokens-per-second", "0")
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "a.log")
        gw = start_gateway([sim], "--access-log", log)
        wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
        corpus = os.path.join(d, "c.jsonl")
        with open(corpus, "w") as f:
            for i in range(20):
                f.write(json.dumps({"custom_id": f"r{i}", **chat_body(f"q{i}", max_tokens=2)}) + "\n")
        for extra, want in (((), "low"), (("--priority", "normal"), "normal")):
            out = os.path.join(d, f"o-{want}.jsonl")
            p = subprocess.run([binary("infergate-bulk"), "--input", corpus, "--output", out, "--url", gw.url,
                                *extra], capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr[-2000:]
        lines = log_lines(log, 40)
        assert collections.Counter(x["priority"] for x in lines) == {"low": 20, "normal": 20}, lines[:3]
        p = subprocess.run([binary("infergate-bulk"), "--input", corpus, "--output", os.path.join(d, "x.jsonl"),
                            "--url", gw.url, "--priority", "urgent"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "--priority: 'urgent' is not high, normal, low or none" in p.stderr, p.stderr


run()
