// The reference tokenizers for tests/integration/test_tokenizer_ref.py and
// bench/tokenizer.py, on the same JSON lines igtok reads:
//
//   node tokenizer_ref.mjs IMPL TOKENIZER.json INPUT.jsonl [--bench SECONDS]
//
// (--bench: encodes the lines over and over; prints tokens, seconds, the
// process's CPU seconds over that loop, tokens/s and tokens per CPU second.)
//
// IMPL is "hf": Hugging Face's own tokenizers (the npm package `tokenizers`,
// bindings over the Rust crate that transformers' fast tokenizers, and so
// SGLang and vLLM, run), or "lenml": @lenml/tokenizers (transformers.js's
// JavaScript port). Each line {"text": "...", "special": bool} prints its
// ids as a JSON array. HF's encode adds the post-processor's tokens
// (addSpecialTokens true, its default; igtok does the same).
//
// special false (a special added token is text, Rust's
// encode_special_tokens): neither package takes that setting, so HF's
// tokenizer is built a second time with its special added tokens renamed to
// strings no text here holds (and lenml's splitter without them, below). Not left out: HF numbers the added tokens anew
// at load (serialization.rs only warns when a file's id differs), so the
// others would move. For these files that is the same as the setting: no
// non-special added token overlaps a special one.
//
// The packages are found in IG_NODE_MODULES (the test installs them there).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [impl, file, input, flag, secs] = process.argv.slice(2);
if (!impl || !file || !input) {
  console.error("usage: node tokenizer_ref.mjs hf|lenml TOKENIZER.json INPUT.jsonl [--bench SECONDS]");
  process.exit(2);
}
const require = createRequire(path.join(process.env.IG_NODE_MODULES || ".", "x.js"));
const json = JSON.parse(fs.readFileSync(file, "utf8"));
const config = (() => {
  const p = path.join(path.dirname(file), "tokenizer_config.json");
  return fs.existsSync(p) ? JSON.parse(fs.readFileSync(p, "utf8")) : {};
})();
const plain = {
  ...json,
  added_tokens: json.added_tokens.map((t, i) => (t.special ? { ...t, content: `\uf8ff\uf8fe${i}\uf8fd` } : t)),
};

function hf() {
  const { Tokenizer } = require("tokenizers");
  const both = [Tokenizer.fromString(JSON.stringify(plain)), Tokenizer.fromString(JSON.stringify(json))];
  return async (text, special) => (await both[+special].encode(text, null, { addSpecialTokens: true })).getIds();
}

function lenml() {
  const { TokenizerLoader } = require("@lenml/tokenizers");
  // No chat template needed: encode only.
  const cfg = { ...config, chat_template: undefined };
  const both = [json, json].map((j) => TokenizerLoader.fromPreTrained({ tokenizerJSON: j, tokenizerConfig: cfg }));
  // Its post-processor finds a template's tokens by name, so the special
  // tokens keep theirs here: only the splitter of the text (its class,
  // transformers.js's DictionarySplitter) is made again without them.
  const splitter = both[0].added_tokens_splitter;
  both[0].added_tokens_splitter = new splitter.constructor(json.added_tokens.filter((t) => !t.special).map((t) => t.content));
  return async (text, special) => both[+special].encode(text, { add_special_tokens: true });
}

const encode = impl === "hf" ? hf() : impl === "lenml" ? lenml() : null;
if (!encode) {
  console.error(`unknown implementation ${impl}`);
  process.exit(2);
}
const lines = fs
  .readFileSync(input, "utf8")
  .split("\n")
  .filter((l) => l.length)
  .map((l) => JSON.parse(l))
  .map((o) => [o.text, o.special ?? true]);

if (flag === "--bench") {
  const limit = Number(secs) * 1000;
  let tokens = 0, bytes = 0;
  const t0 = performance.now(), cpu0 = process.cpuUsage();
  do {
    for (const [text, special] of lines) {
      tokens += (await encode(text, special)).length;
      bytes += Buffer.byteLength(text);
    }
  } while (performance.now() - t0 < limit);
  const seconds = (performance.now() - t0) / 1000;
  const used = process.cpuUsage(cpu0), cpu_s = (used.user + used.system) / 1e6;
  console.log(JSON.stringify({ tokens, bytes, seconds, cpu_s, tokens_per_s: Math.round(tokens / seconds),
                               tokens_per_cpu_s: Math.round(tokens / cpu_s) }));
} else {
  const out = [];
  for (const [text, special] of lines) out.push(JSON.stringify(Array.from(await encode(text, special))));
  process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
}
