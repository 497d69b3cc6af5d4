"""The session policy with real processes: requests with the same session
key (X-Session-Id, else the body's "user", else the API key) go to the same
backend of their model; a backend that other clients load past the bound
(1.25x the pool's mean, from its own load reports) hands its sessions to the
next backend in hash order, and gets them back once its load is gone;
requests without a session are spread as least-loaded. What a user sees:
which backend served each request (X-Infergate-Backend)."""

import collections

from harness import chat_body, http, http_json, raw_post, start_gateway, start_sim, test, wait_until, run

KEYS = [f"session-{k:02d}" for k in range(20)]


def ask(gw, headers=None, **body):
    st, h, _ = http("POST", gw.url + "/v1/chat/completions", chat_body("hello", max_tokens=2, **body),
                    headers=headers or {})
    assert st == 200, st
    return h["x-infergate-backend"]


def by_session(gw, rounds):
    """rounds requests of each key, one at a time (keys interleaved): the
    backends each key was sent to."""
    seen = collections.defaultdict(list)
    for _ in range(rounds):
        for k in KEYS:
            seen[k].append(ask(gw, {"X-Session-Id": k}))
    return seen


def backends(gw):
    return {b["url"]: b for b in http_json("GET", gw.url + "/health/backends")[2]["backends"]}


@test
def sessions_stick_move_past_the_bound_and_come_back():
    sims = [start_sim("--tokens-per-second", "200", "--ttft-ms", "0", "--max-running", "64") for _ in range(7)]
    gw = start_gateway(sims, "--policy", "session", "--health-interval-ms", "100")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2].get("healthy_backends") == 7, timeout=15,
               what="7 healthy backends")
    # 50 requests of each of 20 sessions: each session on one backend.
    seen = by_session(gw, 50)
    home = {}
    for k, urls in seen.items():
        assert len(urls) == 50 and len(set(urls)) == 1, (k, collections.Counter(urls))
        home[k] = urls[0]
    spread = collections.Counter(home.values())
    print(f"# 20 sessions over {len(spread)} backends: {sorted(spread.values(), reverse=True)}")
    assert len(spread) >= 4, spread
    # The session key from the body's "user" works the same way, and is
    # not the header's: a user lands on one backend too.
    users = [ask(gw, user="alice") for _ in range(10)]
    assert len(set(users)) == 1, users

    # Other clients load the home of the most sessions, straight to it (12
    # long streams): its own load reports show it; its sessions move.
    hot = spread.most_common(1)[0][0]
    hot_sim = next(s for s in sims if s.url == hot)
    moved_keys = [k for k in KEYS if home[k] == hot]
    socks = [raw_post(hot_sim.port, chat_body(f"direct {i}", max_tokens=20000, stream=True)) for i in range(12)]
    try:
        wait_until(lambda: backends(gw)[hot].get("external_load", 0) >= 10, timeout=15,
                   what="the loaded backend's own report")
        during = {k: ask(gw, {"X-Session-Id": k}) for k in KEYS}
        for k in KEYS:
            if home[k] == hot:
                assert during[k] != hot, (k, during[k])
                # the next backend in hash order: the same on every request
                assert all(ask(gw, {"X-Session-Id": k}) == during[k] for _ in range(3)), k
            else:
                assert during[k] == home[k], (k, home[k], during[k])
        print(f"# {len(moved_keys)} session(s) moved off the loaded backend, the other "
              f"{len(KEYS) - len(moved_keys)} stayed")
    finally:
        for s in socks:
            s.close()
    # Its load gone, its sessions come back.
    wait_until(lambda: backends(gw)[hot].get("external_load", 0) == 0, timeout=20,
               what="the loaded backend idle again")
    after = {k: ask(gw, {"X-Session-Id": k}) for k in KEYS}
    assert after == home, {k: (home[k], after[k]) for k in KEYS if after[k] != home[k]}

    # Without a session: least-loaded, so one at a time they take turns.
    keyless = collections.Counter(ask(gw) for _ in range(70))
    print(f"# 70 requests without a session: {sorted(keyless.values())}")
    assert len(keyless) == 7 and max(keyless.values()) - min(keyless.values()) <= 2, keyless


@test
def session_is_a_policy_choice_and_a_typo_is_refused():
    sim = start_sim()
    gw = start_gateway([sim], "--policy", "session")
    assert ask(gw, {"X-Session-Id": "x"}) == sim.url
    import subprocess
    from harness import binary
    r = subprocess.run([binary("infergate"), "--backend", sim.url, "--policy", "sesion"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode != 0
    assert "unknown policy 'sesion'" in r.stderr and "session" in r.stderr, r.stderr
    h = subprocess.run([binary("infergate"), "--help"], capture_output=True, text=True, timeout=10).stdout
    assert "session (one backend per session" in h.replace("\n", " ").replace("  ", " ") or "session (" in h, h


run()
