// The official `openai` npm client, instrumented with the OpenTelemetry JS
// SDK (its undici/fetch instrumentation, unmodified, from npm), calls the
// gateway inside a span of its own: prints the spans the client recorded
// (in memory) as one JSON line. Usage: node otel_client.cjs URL MODEL
'use strict';
const api = require('@opentelemetry/api');
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node');
const { InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { UndiciInstrumentation } = require('@opentelemetry/instrumentation-undici');

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
provider.register(); // W3C trace context propagation, async context
const undici = new UndiciInstrumentation();
undici.setTracerProvider(provider);
undici.enable();
const OpenAI = require('openai');

(async () => {
  const [url, model] = process.argv.slice(2);
  const client = new OpenAI({ baseURL: url + '/v1', apiKey: 'sk-test', maxRetries: 0 });
  const tracer = api.trace.getTracer('infergate-test');
  let answer;
  await tracer.startActiveSpan('user-request', async (root) => {
    answer = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 });
    root.end();
  });
  await provider.forceFlush();
  const spans = exporter.getFinishedSpans().map((s) => ({
    name: s.name, kind: s.kind, traceId: s.spanContext().traceId, spanId: s.spanContext().spanId,
    parentSpanId: (s.parentSpanContext && s.parentSpanContext.spanId) || s.parentSpanId || null,
  }));
  console.log(JSON.stringify({ spans, usage: answer.usage }));
  await provider.shutdown();
})().catch((e) => { console.error(e); process.exit(1); });
