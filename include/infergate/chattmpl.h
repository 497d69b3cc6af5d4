/* A model's chat template, rendered in the gateway byte for byte as the
 * engine's tokenizer renders it, so the gateway can tokenize a chat request
 * the way the engine will (issue 49: routing on the engines' KV events needs
 * the prompt's tokens). The reference is @huggingface/jinja 0.5.13, the
 * renderer of transformers.js, called with the variables transformers'
 * apply_chat_template passes (messages, tools, add_generation_prompt and the
 * special tokens; vLLM's vllm/entrypoints/chat_utils.py
 * apply_hf_chat_template and SGLang hand their requests to that same
 * function). The Jinja subset is include/infergate/jinja.h's.
 *
 * Two things this does not do, which matching an engine needs:
 * - the engine's rewriting of the messages before its template sees them
 *   (vLLM's vllm/entrypoints/chat_utils.py parse_chat_messages and
 *   _postprocess_messages: a null content becomes "", text parts are
 *   joined, tool calls' JSON-string arguments become objects): the caller
 *   hands messages already rewritten;
 * - Python's Jinja: the engines render with transformers' jinja2, which
 *   differs from the JavaScript reference where a template strips with an
 *   argument (Qwen3's lstrip('\n') strips only newlines there, all white
 *   space here), prints floats in tojson (1.0 and 1e-07 there, 1 and 1e-7
 *   here), orders keys (insertion order there; integer-like keys first
 *   here) or trims (Python's and JavaScript's white space differ). */
#ifndef IG_CHATTMPL_H
#define IG_CHATTMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct ig_chattmpl;

/* From a tokenizer_config.json (its chat_template, a string, or the "default"
 * entry of a list of {name, template} (and its "tool_use" entry, used when a
 * request has tools, as transformers picks it); and its bos_token/eos_token,
 * strings or {content: ...} objects). NULL with a clear reason in err: the
 * file, or the template's unsupported construct with its line. */
struct ig_chattmpl *ig_chattmpl_load(const char *tokenizer_config_path, char *err, size_t errlen);
/* From a template's text; bos and eos may be NULL (the template sees them
 * undefined). NULL with the reason in err. */
struct ig_chattmpl *ig_chattmpl_new(const char *template_text, const char *bos, const char *eos, char *err,
                                    size_t errlen);
void ig_chattmpl_free(struct ig_chattmpl *t);
/* Renders messages (a JSON array as the OpenAI chat request carries it), tools
 * (JSON array or NULL), add_generation_prompt; the text into a malloc'd
 * NUL-terminated *out (*len bytes). Returns 0, or -1 with the reason in err
 * (a template's raise_exception message, a type error, a limit). Safe on one
 * template from many threads at once. */
int ig_chattmpl_render(const struct ig_chattmpl *t, const json_t *messages, const json_t *tools,
                       bool add_generation_prompt, char **out, size_t *len, char *err, size_t errlen);
/* The same, with a request's chat_template_kwargs (a JSON object or NULL):
 * each key a variable of the template, over the special tokens (Qwen3's
 * enable_thinking; vLLM passes them on to apply_chat_template, and
 * transformers.js spreads them last). -1 when one would replace messages,
 * tools, documents or add_generation_prompt (Python's apply_chat_template
 * refuses a second value for them too). */
int ig_chattmpl_render_kw(const struct ig_chattmpl *t, const json_t *messages, const json_t *tools,
                          bool add_generation_prompt, const json_t *template_kwargs, char **out, size_t *len,
                          char *err, size_t errlen);

/* A chat request's prompt as vLLM renders it (vllm/entrypoints/chat_utils.py
 * parse_chat_messages, _postprocess_messages, apply_hf_chat_template): its
 * messages with content parts joined by newlines (the "string" content
 * format), a null content as "", tool calls' arguments parsed from their
 * JSON strings; its tools, add_generation_prompt (true unless false) and
 * chat_template_kwargs. The gateway (prompt.c) and infergate-sim render
 * with it. Returns 0, or -1 with the reason in err. */
int ig_chattmpl_render_request(const struct ig_chattmpl *t, const json_t *req, char **out, size_t *len, char *err,
			       size_t errlen);

/* The tokenizer_config.json beside a tokenizer.json (the same folder, as
 * Hugging Face ships a model), malloc'd, when it is there and carries a
 * chat_template; else NULL. Where the gateway (models[].tokenizer) and
 * infergate-sim (--tokenizer) find a model's template. */
char *ig_chattmpl_beside(const char *tokenizer_path);

#endif
