// The reference renderer for tests/integration/test_chattmpl_ref.py: a model's
// chat template rendered by @huggingface/jinja (the renderer transformers.js
// uses), with the variables transformers.js's apply_chat_template passes
// (@lenml/tokenizers src/tokenizers/tokenizers.js: messages,
// add_generation_prompt, tools (null when absent), documents (null), and the
// special tokens that are set; here bos_token and eos_token, which
// src/common/chattmpl.c passes too).
//
//   node chattmpl_ref.mjs TOKENIZER_CONFIG.json [--bench N] < requests.jsonl
//   node chattmpl_ref.mjs --templates < templates.jsonl
//
// A request's chat_template_kwargs are spread last, as transformers.js's
// apply_chat_template spreads its extra options. Input and output lines as
// tests/tools/igtmpl.c's: the prompt as a JSON
// string, or {"error": "..."}; --bench N prints "renders/s R" on stderr.
// IG_NODE_MODULES names the node_modules directory holding @huggingface/jinja.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const require = createRequire(process.env.IG_NODE_MODULES + "/");
const { Template } = require("@huggingface/jinja");

if (process.argv[2] === "--templates") {
	// one {"template", "vars"} a line, rendered with those variables alone
	const out = [];
	for (const l of readFileSync(0, "utf8").split("\n").filter((x) => x.length > 0)) {
		const r = JSON.parse(l);
		let t;
		try {
			t = new Template(r.template);
		} catch (e) {
			out.push(JSON.stringify({ parse_error: String(e && e.message) }));
			continue;
		}
		try {
			out.push(JSON.stringify(t.render(r.vars ?? {})));
		} catch (e) {
			out.push(JSON.stringify({ error: String(e && e.message) }));
		}
	}
	// a pipe's write is asynchronous: leave when it is flushed (process.exit
	// at once cut the output at the pipe's 64 KiB)
	process.stdout.write(out.join("\n") + "\n", () => process.exit(0));
} else {

	const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
	const bench = process.argv[3] === "--bench" ? Number(process.argv[4]) : 0;
	const token = (t) => (t && typeof t === "object" ? t.content : t);
	let text = cfg.chat_template, toolUse = null;
	if (Array.isArray(text)) {
		toolUse = text.find((e) => e.name === "tool_use")?.template ?? null;
		text = text.find((e) => e.name === "default").template;
	}
	const tmpl = new Template(text);
	const toolTmpl = toolUse ? new Template(toolUse) : null;
	const specials = {};
	for (const k of ["bos_token", "eos_token"]) if (token(cfg[k])) specials[k] = token(cfg[k]);

	function render(req) {
		const tools = req.tools ?? null;
		const t = tools !== null && toolTmpl ? toolTmpl : tmpl;
		return t.render({
			messages: req.messages,
			add_generation_prompt: req.add_generation_prompt === true,
			tools,
			documents: null,
			...specials,
			...(req.chat_template_kwargs ?? {}),
		});
	}

	const reqs = readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
	const out = [];
	for (const r of reqs) {
		try {
			out.push(JSON.stringify(render(r)));
		} catch (e) {
			out.push(JSON.stringify({ error: String(e && e.message ? e.message : e) }));
		}
	}
	process.stdout.write(out.join("\n") + "\n");
	if (bench > 0) {
		let n = 0;
		const t0 = process.hrtime.bigint();
		for (let k = 0; k < bench; k++)
			for (const r of reqs) {
				try {
					render(r);
				} catch (e) {}
				n++;
			}
		const s = Number(process.hrtime.bigint() - t0) / 1e9;
		process.stderr.write(`renders/s ${Math.round(n / s)}\n`);
	}
}
