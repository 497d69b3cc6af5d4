"""A reactor that cannot go on stops the whole gateway, and it does stop.

When a reactor's epoll_wait fails, every reactor stops at once and reactor 0
ends last (it waits until the others have left their loops), so the process
exits with code 1 and says why, whichever reactor failed and whatever the
others were doing (streams held on each of them, an admin call in flight).
Before issue 31, reactor 0 left its loop at once on its own failure, and a
reactor waiting on it never returned: the process hung in pthread_join.

The failure is made by the test build's fault hook (tests/infergate-faults,
built with IG_TEST_FAULTS): IG_TEST_FAULT_EPOLL="K PATH" makes reactor K's
epoll_wait fail once the file PATH exists. The installed program has no
such hook. Each test waits a bounded time for the exit and kills the
process if it does not come (then fails, saying it hung)."""

import hashlib
import os
import socket
import subprocess
import tempfile

from harness import (binary, chat_body, free_port, http, http_json, metric, raw_post, run, start, start_sim, test,
                     wait_until)

HANG_S = 30  # far above a stop's real time (well under a second): only a hang reaches it


def start_faulty(sim, workers, fault_rx, *extra):
    """tests/infergate-faults in front of sim, with reactor fault_rx's
    epoll_wait set to fail once the returned trigger file exists."""
    d = tempfile.mkdtemp(prefix="ig-stop-")
    trigger = os.path.join(d, "fail-now")
    for attempt in range(3):  # a free port may be taken before it binds, as start_gateway retries
        port = free_port()
        try:
            gw = start([binary("tests/infergate-faults"), "--listen", f"127.0.0.1:{port}", "--backend", sim.url,
                        "--workers", str(workers), "--shutdown-grace-s", "30", *extra],
                       port=port, env={"IG_TEST_FAULT_EPOLL": f"{fault_rx} {trigger}"})
            break
        except RuntimeError:
            if attempt == 2:
                raise
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 1, timeout=10, what="up")
    return gw, trigger, d


def reactor_connections(gw, n):
    text = http("GET", gw.url + "/metrics")[2]
    return [int(metric(text, f'infergate_reactor_connections{{reactor="{i}"}}')) for i in range(n)]


def hold_streams(gw, sim, n):
    """n slow streams, started and left open (each would last 30 s)."""
    socks = [raw_post(gw.port, chat_body(f"held {i}", max_tokens=300, stream=True)) for i in range(n)]
    wait_until(lambda: http_json("GET", sim.url + "/sim/state")[2]["requests_received"] >= n, timeout=10,
               what=f"{n} streams at the backend")
    return socks


def fail_and_wait(gw, trigger):
    """Trigger the fault; the exit code, or a failed assert if the process
    hangs (it is killed then)."""
    open(trigger, "w").close()
    try:
        return gw.wait(HANG_S)
    except subprocess.TimeoutExpired:
        gw.kill()
        gw.wait()
        raise AssertionError(f"the gateway hung after its epoll_wait failed:\n{gw.read_log()[-3000:]}")


def assert_failed_stop(gw, rc, fault_rx):
    log = gw.read_log()
    assert rc == 1, (rc, log[-2000:])
    assert f"reactor {fault_rx}: epoll_wait: Bad file descriptor; stopping" in log, log[-2000:]
    assert "stopped" in log, log[-2000:]


def assert_cut(socks):
    """Every held stream ends (the gateway closed it) rather than hanging."""
    for s in socks:
        s.settimeout(HANG_S)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
        except socket.timeout:
            raise AssertionError("a held stream was left open by a gateway that stopped")
        finally:
            s.close()


def failure_on(fault_rx, workers=2):
    sim = start_sim("--tokens-per-second", "10", "--ttft-ms", "0")
    gw, trigger, _ = start_faulty(sim, workers, fault_rx)
    socks = hold_streams(gw, sim, 4)
    if workers > 1:  # streams on every reactor (and the connection asking)
        wait_until(lambda: min(reactor_connections(gw, workers)) >= 2, timeout=10, what="streams on each reactor")
    rc = fail_and_wait(gw, trigger)
    assert_failed_stop(gw, rc, fault_rx)
    assert_cut(socks)


@test
def reactor_0_failing_stops_every_reactor_and_exits_1():
    failure_on(0)


@test
def reactor_1_failing_stops_every_reactor_and_exits_1():
    failure_on(1)


@test
def the_one_reactor_failing_exits_1():
    failure_on(0, workers=1)


@test
def admin_calls_on_every_reactor_as_reactor_0_fails_do_not_hold_the_stop():
    """The hang of before: an admin call that reached reactor 1 waited for
    reactor 0 to answer it. Calls keep coming on connections of both
    reactors while reactor 0 fails; the process still ends, with code 1."""
    sim = start_sim("--tokens-per-second", "10", "--ttft-ms", "0")
    d = tempfile.mkdtemp(prefix="ig-stop-")
    keys = os.path.join(d, "admin.keys")
    with open(keys, "w") as f:
        f.write(hashlib.sha256(b"admin-secret").hexdigest() + "\n")
    gw, trigger, _ = start_faulty(sim, 2, 0, "--admin-keys-file", keys)
    held = hold_streams(gw, sim, 1)
    conns = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(3)]
    # four connections, two on each reactor, so an admin one on each (and the one asking)
    wait_until(lambda: sorted(reactor_connections(gw, 2)) == [2, 3], timeout=10, what="two connections a reactor")
    req = b"GET /admin/backends HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer admin-secret\r\n\r\n"
    for c in conns:
        c.sendall(req)
        assert c.recv(65536).startswith(b"HTTP/1.1 200"), "an admin call answered before the fault"
        c.settimeout(1)
    open(trigger, "w").close()
    live = list(conns)
    for _ in range(200):  # calls on every connection until the gateway is gone
        for c in list(live):
            try:
                c.sendall(req)
                if not c.recv(65536):
                    live.remove(c)
            except OSError:
                live.remove(c)
        if not live:
            break
    for c in conns:
        c.close()
    rc = fail_and_wait(gw, trigger)
    assert_failed_stop(gw, rc, 0)
    assert_cut(held)


run()
