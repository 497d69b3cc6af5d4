"""DNS discovery without a cluster: the gateway runs in its own mount
namespace (unshare --mount, as root) with a bind-mounted hosts file that lists
one name several times (glibc returns every address, "multi on"). Changing the
file adds and drains backends while requests are in flight."""

import collections
import json
import os
import tempfile
import threading
import time

from harness import (binary, chat_body, free_port, http, http_json, parallel, run, sse_events, start,
                     test, wait_listening, wait_until)

NAME = "sglang-discovery-test"


def write_hosts(path, addrs):
    # Rewritten in place: the bind mount follows the inode, not the name.
    with open(path, "r+") as f:
        f.seek(0)
        f.truncate()
        f.write("127.0.0.1 localhost\n" + "".join(f"{a} {NAME}\n" for a in addrs))


def start_sim_on(addr, port, *extra):
    p = start([binary("infergate-sim"), "--listen", f"{addr}:{port}", *extra])
    wait_listening(port, host=addr, proc=p)
    p.url = f"http://{addr}:{port}"
    return p


def table(gw):
    _, _, obj = http_json("GET", gw.url + "/health/backends")
    return {b["url"]: b for b in obj["backends"]}


@test
def hosts_file_changes_add_and_drain_backends():
    port = free_port()
    sims = {a: start_sim_on(a, port, "--tokens-per-second", "40", "--ttft-ms", "0", "--output-tokens", "20")
            for a in ("127.0.0.2", "127.0.0.3", "127.0.0.4")}
    hosts = tempfile.NamedTemporaryFile("w", prefix="ig-hosts-", delete=False)
    hosts.close()
    write_hosts(hosts.name, ["127.0.0.2", "127.0.0.3"])
    gport = free_port()
    gw = start(["unshare", "--mount", "sh", "-c",
                f'mount --bind "{hosts.name}" /etc/hosts && exec "$0" "$@"',
                binary("infergate"), "--listen", f"127.0.0.1:{gport}",
                "--discover", f"http://{NAME}:{port}", "--discover-interval-s", "1",
                "--health-interval-ms", "100"], port=gport)
    a, b, c = (sims[x].url for x in ("127.0.0.2", "127.0.0.3", "127.0.0.4"))
    wait_until(lambda: {u for u, x in table(gw).items() if x["state"] == "up"} == {a, b}, timeout=10,
               what="two discovered backends up")
    assert all(x["discovered_from"] == f"http://{NAME}:{port}" for x in table(gw).values())

    results = collections.Counter()
    lock = threading.Lock()

    def one(i):
        st, hdrs, data = http("POST", gw.url + "/v1/chat/completions", chat_body(f"d{i}", stream=True),
                              timeout=60)
        ok = st == 200 and sse_events(data)[-1] == "[DONE]"
        with lock:
            results[(ok, hdrs.get("x-infergate-backend"))] += 1

    def churn():
        wait_until(lambda: table(gw)[a]["inflight"] > 0, timeout=10, what="streams on .2")
        write_hosts(hosts.name, ["127.0.0.3", "127.0.0.4"])   # .2 leaves, .4 joins
    t = threading.Thread(target=churn)
    t.start()
    parallel(one, range(120), workers=24)   # 0.5 s streams, ~3 s in all
    t.join()
    wait_until(lambda: set(table(gw)) == {b, c}, timeout=10, what=".2 drained and removed, .4 added")
    wait_until(lambda: table(gw)[c]["state"] == "up", timeout=5)
    assert all(ok for ok, _ in results), results           # nothing dropped
    assert sum(results.values()) == 120
    st, hdrs, _ = http("POST", gw.url + "/v1/completions", {"model": "sim-model", "prompt": "x", "max_tokens": 1})
    assert st == 200 and hdrs["x-infergate-backend"] in (b, c)
    log = gw.read_log()
    assert f"discover: backend {c} added" in log and f"{a} no longer in" in log, log[-3000:]
    # A name that stops resolving changes nothing.
    write_hosts(hosts.name, [])
    time.sleep(2.5)
    assert set(table(gw)) == {b, c}
    assert "cannot resolve" in gw.read_log()
    os.unlink(hosts.name)


run()
