#!/usr/bin/env python3
"""Tracing with real processes: a client's W3C traceparent continued through the gateway to
the backend (the simulator keeps the traceparents it received in /sim/state, as an engine
continues the trace it is given), the spans the gateway exports over OTLP/HTTP as JSON to a
receiver (a FakeBackend taking POST /v1/traces): the server span a child of the client's, a
queue span, one attempt span per attempt with the GenAI attributes; a malformed traceparent
ignored, an unsampled one continued unrecorded, sampling by ratio; the OpenTelemetry
variables; a collector that is down, slow or failing never failing a request; bad settings
refused at start naming them."""
import json
import os
import subprocess
import threading
import time

from harness import (SRCDIR, Collector, Dir, FakeBackend, binary, bulk, chat_body, ensure_otel, generate, http,
                     http_json, lines, metric, run, span_attrs, start_gateway, start_sim, test, wait_until)

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def traced(collector, *extra, **kw):
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim], "--tracing-endpoint", collector.url + "/v1/traces",
                       "--tracing-schedule-delay-ms", "100", *extra, **kw)
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    return sim, gw


def chat(gw, headers=None, **extra):
    st, hdrs, obj = http_json("POST", gw.url + "/v1/chat/completions", chat_body("hi", max_tokens=5, **extra),
                              headers=headers or {})
    assert st == 200, (st, obj)
    return hdrs, obj


def sim_traceparents(sim):
    return http_json("GET", sim.url + "/sim/state")[2]["traceparents"]


@test
def a_clients_trace_goes_on_through_the_gateway_to_the_backend():
    col = Collector()
    sim, gw = traced(col)
    hdrs, obj = chat(gw, {"traceparent": TP, "tracestate": "vendor=1"})
    # the response names the gateway's span in the client's trace
    version, trace, span, flags = hdrs["traceparent"].split("-")
    assert (version, trace, flags) == ("00", TRACE, "01") and span != "00f067aa0ba902b7", hdrs["traceparent"]
    wait_until(lambda: len(col.spans()) >= 3, timeout=10, what="3 spans exported")
    spans = col.spans()
    by_name = {s["name"]: s for s in spans}
    server = by_name["POST /v1/chat/completions"]
    queue = by_name["queue"]
    attempt = by_name["chat sim-model"]
    assert all(s["traceId"] == TRACE for s in spans), spans
    assert server["spanId"] == span and server["parentSpanId"] == "00f067aa0ba902b7" and server["kind"] == 2
    assert queue["parentSpanId"] == span and attempt["parentSpanId"] == span and attempt["kind"] == 3
    assert server["traceState"] == "vendor=1"
    a = span_attrs(server)
    assert a["gen_ai.request.model"] == "sim-model" and a["gen_ai.operation.name"] == "chat", a
    assert a["gen_ai.usage.input_tokens"] == obj["usage"]["prompt_tokens"], (a, obj["usage"])
    assert a["gen_ai.usage.output_tokens"] == obj["usage"]["completion_tokens"] == 5, (a, obj["usage"])
    assert a["http.response.status_code"] == 200 and a["infergate.class"] == "normal", a
    assert a["server.address"] == sim.url and a["infergate.request_id"] == hdrs["x-request-id"], a
    b = span_attrs(attempt)
    assert b["server.address"] == sim.url and b["http.response.status_code"] == 200, b
    assert b["infergate.attempt.kind"] == "first" and b["gen_ai.request.model"] == "sim-model", b
    assert int(server["startTimeUnixNano"]) <= int(attempt["startTimeUnixNano"]) <= \
        int(attempt["endTimeUnixNano"]) <= int(server["endTimeUnixNano"]), (server, attempt)
    # the engine was given the attempt's span as its parent, in the same trace; the state too
    assert sim_traceparents(sim)[-1] == f"00-{TRACE}-{attempt['spanId']}-01", sim_traceparents(sim)
    sent = col.bodies[0][1]["resourceSpans"][0]
    assert {"key": "service.name", "value": {"stringValue": "infergate"}} in sent["resource"]["attributes"], sent
    assert col.bodies[0][0]["content-type"] == "application/json"
    m = http("GET", gw.url + "/metrics")[2].decode()
    wait_until(lambda: metric(http("GET", gw.url + "/metrics")[2].decode(),
                              "infergate_trace_spans_exported_total") >= 3, timeout=5, what="exported counted")
    assert "infergate_trace_spans_dropped_total 0" in m, m


@test
def the_official_client_instrumented_with_the_opentelemetry_sdk_sees_one_trace_into_the_engine():
    # The openai npm client inside a span of its own, its fetch instrumented by the SDK's undici
    # instrumentation (unmodified, from npm): the client's HTTP span is the gateway's server
    # span's parent, the attempt is the server span's child, and the engine was given the
    # attempt's span, all in the client's trace.
    col = Collector()
    sim, gw = traced(col)
    p = subprocess.run(["node", os.path.join(SRCDIR, "tests", "integration", "otel_client.cjs"), gw.url, "sim-model"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "NODE_PATH": ensure_otel()})
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    root = next(s for s in out["spans"] if s["name"] == "user-request")
    http_span = next(s for s in out["spans"] if s["parentSpanId"] == root["spanId"])
    trace = root["traceId"]
    assert http_span["traceId"] == trace, out
    wait_until(lambda: len([s for s in col.spans() if s["traceId"] == trace]) >= 3, timeout=10,
               what="the gateway's spans of the client's trace")
    spans = [s for s in col.spans() if s["traceId"] == trace]
    server = next(s for s in spans if s["kind"] == 2)
    attempt = next(s for s in spans if s["kind"] == 3)
    queue = next(s for s in spans if s["name"] == "queue")
    assert server["parentSpanId"] == http_span["spanId"], (server, http_span)
    assert attempt["parentSpanId"] == queue["parentSpanId"] == server["spanId"], spans
    assert span_attrs(server)["gen_ai.usage.output_tokens"] == out["usage"]["completion_tokens"] == 5, (server, out)
    assert span_attrs(attempt)["gen_ai.request.model"] == "sim-model", attempt
    assert sim_traceparents(sim)[-1] == f"00-{trace}-{attempt['spanId']}-01", sim_traceparents(sim)


@test
def a_malformed_traceparent_starts_a_new_trace_and_an_unsampled_one_is_not_recorded():
    col = Collector()
    sim, gw = traced(col)
    for bad in ("00-xyz", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01"):
        hdrs, _ = chat(gw, {"traceparent": bad})
        trace = hdrs["traceparent"].split("-")[1]
        assert trace not in (TRACE, "0" * 32), hdrs["traceparent"]
        assert sim_traceparents(sim)[-1].split("-")[1] == trace, (sim_traceparents(sim), trace)
        wait_until(lambda: any(s["traceId"] == trace and "parentSpanId" not in s for s in col.spans()),
                   timeout=10, what="a new root span")
    n = len(col.spans())
    hdrs, _ = chat(gw, {"traceparent": TP[:-2] + "00"})
    assert hdrs["traceparent"].startswith(f"00-{TRACE}-") and hdrs["traceparent"].endswith("-00"), hdrs
    assert sim_traceparents(sim)[-1].startswith(f"00-{TRACE}-") and sim_traceparents(sim)[-1].endswith("-00")
    chat(gw, {"traceparent": TP})      # a sampled one after it: exported, so the unsampled one had its turn
    wait_until(lambda: any(s["traceId"] == TRACE for s in col.spans()), timeout=10, what="the sampled trace")
    unsampled = [s for s in col.spans()[n:] if s["traceId"] == TRACE and
                 s.get("parentSpanId") == "00f067aa0ba902b7"]
    assert len(unsampled) == 1, unsampled   # the sampled request's server span only


@test
def a_retry_is_an_attempt_span_of_its_own():
    col = Collector()

    def fail(fb, req, sock):
        if req["method"] == "POST":
            FakeBackend.reply(sock, 503, {"error": {"message": "busy"}})
            return True
        return FakeBackend.answer_ok(fb, req, sock)
    bad = FakeBackend(handler=fail)
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([bad, sim], "--tracing-endpoint", col.url + "/v1/traces", "--tracing-schedule-delay-ms",
                       "100", "--policy", "round-robin")
    wait_until(lambda: http_json("GET", gw.url + "/health")[2]["healthy_backends"] == 2, timeout=10, what="up")
    for _ in range(2):     # round-robin: one of them starts on the failing backend
        chat(gw, {"traceparent": TP})
    wait_until(lambda: len([s for s in col.spans() if s["kind"] == 3]) >= 3, timeout=10, what="3 attempts")
    attempts = [s for s in col.spans() if s["kind"] == 3]
    failed = [a for a in attempts if span_attrs(a)["server.address"] == bad.url]
    assert len(failed) == 1 and failed[0]["status"]["code"] == 2, failed
    assert span_attrs(failed[0])["http.response.status_code"] == 503, failed
    retried = [a for a in attempts if span_attrs(a)["infergate.attempt.kind"] == "retry"]
    assert len(retried) == 1 and span_attrs(retried[0])["server.address"] == sim.url, attempts
    # both attempts of that request sent their own span id to their backend
    assert bad.posts()[-1]["headers"] and dict((k.lower(), v) for k, v in bad.posts()[-1]["headers"])[
        "traceparent"].split("-")[2] == failed[0]["spanId"]


@test
def sampling_by_ratio_for_new_traces_a_sampled_parent_always():
    col = Collector()
    sim, gw = traced(col, "--tracing-sample-ratio", "0.1")
    for _ in range(200):
        chat(gw)
    for _ in range(20):
        chat(gw, {"traceparent": TP})
    time.sleep(0.5)
    wait_until(lambda: len([s for s in col.spans() if s["kind"] == 2 and s["traceId"] == TRACE]) == 20,
               timeout=10, what="every sampled parent's server span")
    roots = [s for s in col.spans() if s["kind"] == 2 and "parentSpanId" not in s]
    assert 4 <= len(roots) <= 45, len(roots)   # about 20 of 200 (binomial: 4..45 is 1e-4 away)


@test
def a_collector_down_slow_or_failing_never_fails_a_request():
    for name in ("down", "slow", "failing"):
        col = Collector(status=500 if name == "failing" else 200, delay=5 if name == "slow" else 0)
        if name == "down":
            col.sock.close()
            col.closed = True
        sim, gw = traced(col)
        started = time.monotonic()
        for i in range(40):
            chat(gw, {"traceparent": TP})
        assert time.monotonic() - started < 30
        if name == "slow":
            assert len(col.bodies) <= 1, len(col.bodies)
            continue
        want = "infergate_trace_spans_failed_total"
        wait_until(lambda: metric(http("GET", gw.url + "/metrics")[2].decode(), want) > 0, timeout=10,
                   what=f"{name}: failed spans counted")
        # SIGTERM is the gateway's to handle, not the exporter thread's (up to
        # 5f86654 that thread left it open: the process died of it, exit -15)
        rc = gw.stop()
        assert rc == 0, f"{name}: the traced gateway's exit status at SIGTERM: {rc}"


@test
def the_opentelemetry_variables_are_read_and_bad_settings_stop_the_start():
    col = Collector()
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim], env={"OTEL_EXPORTER_OTLP_ENDPOINT": col.url + "/", "OTEL_SERVICE_NAME": "edge-7",
                                   "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=a%20b",
                                   "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    chat(gw, {"traceparent": TP})
    wait_until(lambda: col.bodies, timeout=10, what="an export to OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces")
    headers, body = col.bodies[0]
    assert headers["x-tenant"] == "a b", headers
    assert {"key": "service.name", "value": {"stringValue": "edge-7"}} in body["resourceSpans"][0]["resource"][
        "attributes"], body
    cases = [
        (["--tracing-endpoint", "ftp://x"], {}, "tracing.endpoint"),
        (["--tracing-sample-ratio", "1.5"], {}, "--tracing-sample-ratio"),
        (["--tracing-endpoint", "http://127.0.0.1:9/v1/traces"], {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
         "OTEL_EXPORTER_OTLP_PROTOCOL"),
        (["--tracing-endpoint", "http://127.0.0.1:9/v1/traces"], {"OTEL_TRACES_SAMPLER_ARG": "lots"},
         "OTEL_TRACES_SAMPLER_ARG"),
        (["--tracing-endpoint", "http://127.0.0.1:9/v1/traces", "--tracing-headers", "novalue"], {},
         "tracing.headers"),
    ]
    for args, env, needle in cases:
        p = subprocess.run([binary("infergate"), "--backend", sim.url, "--listen", "127.0.0.1:1", *args],
                           capture_output=True, text=True, timeout=10, env=dict(os.environ, **env))
        assert p.returncode == 2 and needle in p.stderr, (args, env, p.returncode, p.stderr)


@test
def infergate_bulk_trace_writes_each_lines_trace_id_and_the_gateway_traces_it():
    col = Collector()
    sim, gw = traced(col)
    d = Dir()
    generate(d("c.jsonl"), 30)
    rc, _, err = bulk("--input", d("c.jsonl"), "--output", d("o.jsonl"), "--url", gw.url, "--model", "sim-model",
                      "--trace")
    assert rc == 0, err
    out = lines(d("o.jsonl"))
    traces = {x["custom_id"]: x["trace_id"] for x in out}
    assert len(out) == 30 and len(set(traces.values())) == 30, out[:2]
    assert all(len(t) == 32 and int(t, 16) for t in traces.values()), traces
    # each line's trace is the one the gateway recorded, with the line's request id on it
    wait_until(lambda: len([s for s in col.spans() if s["kind"] == 2]) >= 30, timeout=10, what="30 server spans")
    servers = {s["traceId"]: span_attrs(s) for s in col.spans() if s["kind"] == 2}
    for x in out:
        assert servers[x["trace_id"]]["infergate.request_id"] == x["response"]["request_id"], (x, servers)
    assert {tp.split("-")[1] for tp in sim_traceparents(sim)} <= set(traces.values())


@test
def without_tracing_the_clients_traceparent_goes_on_unchanged():
    sim = start_sim("--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway([sim])
    wait_until(lambda: http_json("GET", gw.url + "/v1/models")[2]["data"], timeout=10, what="models")
    hdrs, _ = chat(gw, {"traceparent": TP})
    assert "traceparent" not in hdrs, hdrs
    assert sim_traceparents(sim)[-1] == TP


if __name__ == "__main__":
    threading.current_thread().name = "main"
    run()
