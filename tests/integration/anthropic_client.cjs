// The official Anthropic Node client (npm @anthropic-ai/sdk), unmodified, pointed at a server's
// Messages API. Usage: node anthropic_client.cjs BASE_URL MODEL -> one JSON line: a message, a
// streamed message (its events' types in order, the text the SDK assembled, its final message),
// a token count, and what the SDK makes of an error answer. The key: $ANTHROPIC_API_KEY, else "unused".
const Anthropic = require('@anthropic-ai/sdk');

async function main() {
  const [base, model] = process.argv.slice(2);
  const client = new Anthropic({ baseURL: base, apiKey: process.env.ANTHROPIC_API_KEY || 'unused', maxRetries: 0 });
  const out = {};
  const params = { model, max_tokens: 12, system: 'You are terse.',
                   messages: [{ role: 'user', content: 'Tell me about the sea.' }] };

  const m = await client.messages.create(params);
  out.message = m;

  const stream = client.messages.stream(params);
  const types = [];
  let text = '';
  stream.on('streamEvent', (ev) => types.push(ev.type));
  stream.on('text', (t) => { text += t; });
  const fin = await stream.finalMessage();
  out.stream = { types, text, final: fin };

  // ANTHROPIC_SKIP_COUNT: a gateway translating for chat-only servers, which count no tokens
  out.count = process.env.ANTHROPIC_SKIP_COUNT ? null
    : await client.messages.countTokens({ model, system: params.system, messages: params.messages });

  try {
    await client.messages.create({ model, max_tokens: 0, messages: params.messages });
    out.error = null;
  } catch (e) {
    out.error = { status: e.status === undefined ? null : e.status, name: e.constructor.name,
                  isAPIError: e instanceof Anthropic.APIError, body: e.error === undefined ? null : e.error };
  }
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e && e.stack ? e.stack : String(e)); process.exit(1); });
