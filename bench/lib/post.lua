-- wrk script: every request is a small non-streamed chat completion (POST, JSON body).
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
-- IG_BENCH_KEY: a bearer key to send (bench/proxy.py --keys)
if os.getenv("IG_BENCH_KEY") then
  wrk.headers["Authorization"] = "Bearer " .. os.getenv("IG_BENCH_KEY")
end
wrk.body = '{"model":"sim-model","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}'

-- Count non-2xx answers so a proxy that "wins" by failing fast is caught.
-- (wrk reports them as "Non-2xx or 3xx responses" too; done() prints a parseable line.)
function done(summary, latency, requests)
  io.write(string.format("IG_RESULT requests=%d duration_us=%d errors_connect=%d errors_read=%d errors_write=%d errors_status=%d errors_timeout=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.status, summary.errors.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
