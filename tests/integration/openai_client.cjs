// The official OpenAI Node client, unmodified, pointed at infergate.
// Usage: node openai_client.cjs BASE_URL MODEL  -> prints one JSON line of results.
//        node openai_client.cjs BASE_URL MODEL errors  -> what the client makes of a
//        backend's error answer (max_tokens 100000) and of an error event in a stream.
//        node openai_client.cjs BASE_URL MODEL responses N  -> the Responses API and
//        embeddings, with N follow-ups.
//        node openai_client.cjs BASE_URL MODEL batch CORPUS OUTPUT  -> the Batch API, end to end.
const OpenAI = require('openai');

function described(e) {
  return { status: e.status === undefined ? null : e.status, name: e.constructor.name,
           isAPIError: e instanceof OpenAI.APIError, message: e.message,
           error: e.error === undefined ? null : e.error };
}

async function errors(client, model) {
  const out = {};
  try {
    await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 100000 });
    out.flat = null;
  } catch (e) {
    out.flat = described(e);
  }
  let chunks = 0;
  try {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'a stream that fails' }], max_tokens: 20, stream: true });
    for await (const chunk of stream) chunks++;
    out.stream = null;
  } catch (e) {
    out.stream = described(e);
  }
  out.stream_chunks = chunks;
  console.log(JSON.stringify(out));
}

// A loop of n chat completions with the client's default retries (2) and
// the key in IG_API_KEY: how many completed, and the statuses the client
// got on the wire (it retries a 429 after the server's retry-after-ms).
async function loop(baseURL, model, n) {
  const statuses = {};
  const counting = async (url, init) => {
    const r = await fetch(url, init);
    statuses[r.status] = (statuses[r.status] || 0) + 1;
    return r;
  };
  const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: process.env.IG_API_KEY, fetch: counting });
  let completed = 0;
  const t0 = Date.now();
  for (let i = 0; i < n; i++) {
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: `request ${i}` }], max_tokens: 2 });
    if (r.choices[0].message.content) completed++;
  }
  console.log(JSON.stringify({ completed, statuses, seconds: (Date.now() - t0) / 1000 }));
}

// The Responses API and embeddings: one response plain and one streamed,
// n follow-ups naming the first (previous_response_id), and which backend
// answered each (X-Infergate-Backend, through the client's withResponse());
// then the first retrieved, deleted and retrieved again.
async function responses(client, model, n) {
  const out = {};
  const first = await client.responses.create({ model, input: 'Hello from the official client' }).withResponse();
  const r = first.data;
  out.plain = { id: r.id, status: r.status, text: r.output_text, usage: r.usage,
                backend: first.response.headers.get('x-infergate-backend') };
  const stream = await client.responses.create({ model, input: 'Hello again', stream: true });
  const types = [];
  let completed = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.completed') completed = ev.response;
  }
  out.stream = { types, id: completed && completed.id, usage: completed && completed.usage };
  out.follow = [];
  for (let i = 0; i < n; i++) {
    const f = await client.responses.create({ model, input: `more ${i}`, previous_response_id: r.id }).withResponse();
    out.follow.push({ id: f.data.id, backend: f.response.headers.get('x-infergate-backend') });
  }
  // the stored response's own routes: retrieve, then delete, then retrieve again (a 404)
  const got = await client.responses.retrieve(r.id).withResponse();
  const del = await client.responses.delete(r.id);
  let gone = null;
  try {
    await client.responses.retrieve(r.id);
  } catch (err) {
    gone = { status: err.status, message: err.message };
  }
  out.stored = { id: got.data.id, text: got.data.output_text, backend: got.response.headers.get('x-infergate-backend'),
                 deleted: del === undefined ? null : del, gone };
  const e = await client.embeddings.create({ model, input: ['one', 'two'] });
  out.embeddings = { n: e.data.length, dims: e.data[0].embedding.length, usage: e.usage };
  console.log(JSON.stringify(out));
}

// The Files API: files.create of the file at `path` (a stream, as a user
// uploads a corpus), then retrieve, list, content and delete.
async function files(client, path) {
  const fs = require('fs');
  const f = await client.files.create({ file: fs.createReadStream(path), purpose: 'batch' });
  const got = await client.files.retrieve(f.id);
  const list = await client.files.list();
  const content = Buffer.from(await (await client.files.content(f.id)).arrayBuffer());
  const del = await client.files.delete(f.id);
  let gone = null;
  try {
    await client.files.retrieve(f.id);
  } catch (err) {
    gone = err.status;
  }
  console.log(JSON.stringify({ file: f, same: JSON.stringify(got) === JSON.stringify(f),
                               listed: list.data.map((x) => x.id),
                               content_equal: content.equals(fs.readFileSync(path)), bytes: content.length,
                               deleted: del, gone }));
}

// The Batch API: files.create of the corpus at `path`, batches.create,
// batches.retrieve every 200 ms until the batch ends (each status seen is
// recorded), then files.content of its output file written to `out`; also
// batches.list. Prints the last Batch object and what was seen.
async function batch(client, path, out) {
  const fs = require('fs');
  const f = await client.files.create({ file: fs.createReadStream(path), purpose: 'batch' });
  let b = await client.batches.create({ input_file_id: f.id, endpoint: '/v1/chat/completions',
                                        completion_window: '24h', metadata: { run: 'npm' } });
  const seen = [b.status];
  while (!['completed', 'failed', 'expired', 'cancelled'].includes(b.status)) {
    await new Promise((r) => setTimeout(r, 200));
    b = await client.batches.retrieve(b.id);
    if (seen[seen.length - 1] !== b.status) seen.push(b.status);
  }
  if (b.output_file_id) {
    const content = Buffer.from(await (await client.files.content(b.output_file_id)).arrayBuffer());
    fs.writeFileSync(out, content);
  }
  const list = await client.batches.list();
  const listed = [];
  for await (const x of list) listed.push(x.id);
  console.log(JSON.stringify({ batch: b, seen, listed, input_file: f.id }));
}

// One chat completion with an Idempotency-Key header (a request option,
// sent again with each of the client's own retries, 2 by default). What it
// got, and how many attempts its fetch made.
async function idempotent(baseURL, model) {
  let attempts = 0;
  const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'unused', maxRetries: 2,
                              fetch: (url, init) => { attempts++; return fetch(url, init); } });
  const { data, response } = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'once and only once' }], max_tokens: 12,
  }, { headers: { 'Idempotency-Key': 'order-' + process.pid } }).withResponse();
  console.log(JSON.stringify({ id: data.id, content: data.choices[0].message.content, usage: data.usage,
                               replayed: response.headers.get('idempotent-replayed'), attempts }));
}

async function main() {
  const [baseURL, model, mode, n] = process.argv.slice(2);
  if (mode === 'idempotent') return idempotent(baseURL, model);
  if (mode === 'files') return files(new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'unused', maxRetries: 0 }), n);
  if (mode === 'loop') return loop(baseURL, model, Number(n));
  if (mode === 'batch') return batch(new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'unused', maxRetries: 0 }), n,
                                     process.argv[6]);
  if (mode === 'responses') return responses(new OpenAI({ baseURL: baseURL + '/v1',
                                                           apiKey: process.env.IG_API_KEY || 'unused', maxRetries: 0 }),
                                             model, Number(n));
  const client = new OpenAI({ baseURL: baseURL + '/v1', apiKey: 'unused', maxRetries: 0 });
  if (mode === 'errors') return errors(client, model);
  const out = {};
  const chat = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello from the official client' }], max_tokens: 12,
  });
  out.chat = { object: chat.object, model: chat.model, content: chat.choices[0].message.content,
               finish_reason: chat.choices[0].finish_reason, usage: chat.usage };
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello from the official client' }], max_tokens: 12,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '', chunks = 0, usage = null;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text += (c.delta && c.delta.content) || '';
  }
  out.stream = { text, chunks, usage };
  const cmpl = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 7 });
  out.completion = { object: cmpl.object, text: cmpl.choices[0].text, usage: cmpl.usage };
  const models = await client.models.list();
  out.models = [];
  for await (const m of models) out.models.push(m.id);
  try {
    await client.chat.completions.create({ model, messages: 'not a list' });
    out.error = null;
  } catch (e) {
    out.error = { status: e.status, name: e.constructor.name };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
