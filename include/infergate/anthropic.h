/* Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens)
 * spoken over an OpenAI chat completions backend: the request translated to
 * a chat request, the chat completion (whole or streamed) translated back
 * to a Message or to Anthropic's stream events, and Anthropic's error
 * bodies. Pure functions on jansson values: no I/O, no clock, no globals,
 * so the gateway and the simulator share one translation and the tests and
 * the fuzz target can drive it alone.
 *
 * The shapes follow Anthropic's API reference and its TypeScript SDK
 * (@anthropic-ai/sdk resources/messages/messages.d.ts: MessageCreateParams,
 * Message, RawMessageStreamEvent; resources/shared.d.ts: ErrorType), and the
 * same translation as SGLang's (sgl-project/sglang
 * python/sglang/srt/entrypoints/anthropic/serving.py) and vLLM's
 * (vllm-project/vllm vllm/entrypoints/anthropic/serving.py) servers do.
 *
 * What is translated, and what is not:
 *   request   model, max_tokens, system (a string or text blocks, joined
 *             with "\n"), messages (content a string or blocks: text; image
 *             with a base64 or url source -> image_url; assistant tool_use
 *             -> tool_calls with JSON-string arguments; user tool_result ->
 *             a "tool" message with tool_call_id, before the rest of that
 *             user turn; its images open the user message of the rest;
 *             a "system" turn amid them, text only, -> a system message in
 *             its place, as Claude Code sends one),
 *             stop_sequences -> stop, temperature, top_p, top_k, tools
 *             (input_schema -> function.parameters, strict -> function.strict;
 *             type absent or "custom"), tool_choice (auto, any
 *             -> required, tool -> {type function, name}, none;
 *             disable_parallel_tool_use -> parallel_tool_calls false),
 *             stream (-> stream_options.include_usage), metadata.user_id ->
 *             user.
 *   ignored   as Anthropic's own API accepts them without a change a chat
 *             backend could make: cache_control and citations on any block
 *             or tool (prompt caching hints; the backends cache prefixes by
 *             themselves), service_tier, thinking (the backend reasons as
 *             its chat template says), thinking and redacted_thinking blocks
 *             of earlier assistant turns (dropped, as vLLM drops redacted
 *             ones), is_error of a tool_result, and anthropic_version in the
 *             body (Bedrock's and Vertex's clients put it there), a
 *             top-level cache_control; context_management with its
 *             clear_thinking_20251015 edit (done: thinking blocks are
 *             dropped) and clear_tool_uses_20250919 (a saving of context:
 *             the backend sees every tool result), output_config.effort (as
 *             thinking), and a tool's defer_loading (the tool goes in whole).
 *             Claude Code sends thinking adaptive, clear_thinking, effort
 *             and defer_loading.
 *   refused   any other field, each with a message naming its path in
 *             Anthropic's own style ("messages.0.content.1.source.type:
 *             ..."): server tools (web search, bash...), document, search
 *             result and container upload blocks, file image sources,
 *             container, mcp_servers, other context_management edits,
 *             output_config.format, output_format, inference_geo; a system
 *             turn's other blocks (tool_addition) and members (clear_at,
 *             output_config), which Claude Code answers by resending
 *             without system turns; in count_tokens, the generation
 *             fields (max_tokens, stream, stop_sequences, sampling), as
 *             Anthropic's count_tokens refuses them; a role other than user,
 *             assistant and system; and every value of the wrong type or range
 *             (temperature and top_p in 0..1, max_tokens >= 1, top_k >= 0).
 *   response  text -> a text block, tool_calls -> tool_use blocks (input
 *             parsed; arguments that are not a JSON object are an error),
 *             finish_reason stop -> end_turn, or stop_sequence with the
 *             string when the backend names the stop string it matched (vLLM
 *             choices[].stop_reason, SGLang matched_stop) and it is one of
 *             the request's stop_sequences; length -> max_tokens;
 *             tool_calls -> tool_use; usage with cache_read_input_tokens
 *             from prompt_tokens_details.cached_tokens. Reasoning text
 *             (reasoning_content) is not carried: a thinking block needs a
 *             signature a backend cannot give. */
#ifndef IG_ANTHROPIC_H
#define IG_ANTHROPIC_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "infergate/buf.h"

enum ig_anth_kind {
	IG_ANTH_MESSAGES,     /* POST /v1/messages */
	IG_ANTH_COUNT_TOKENS, /* POST /v1/messages/count_tokens: no max_tokens, stream... */
};

/* The chat completions request for an Anthropic request (a parsed body).
 * Returns a new object, or NULL with *err a malloc'd message naming the
 * field, for a 400 invalid_request_error. */
json_t *ig_anth_to_chat(json_t *req, enum ig_anth_kind kind, char **err);

/* The Message for a non-streamed chat completion. stop_sequences: the
 * request's (an array of strings, or NULL), for telling a stop sequence
 * from the end of the turn. The id is "msg_" and the completion's id
 * without its "chatcmpl-". Returns a new object, or NULL with *err
 * malloc'd when the completion is not one (no choices, a wrong type). */
json_t *ig_anth_from_chat(json_t *completion, json_t *stop_sequences, char **err);

/* The streaming translator: OpenAI chat stream chunks in, Anthropic's
 * events out, in Anthropic's order: message_start; per content block
 * content_block_start, content_block_delta (text_delta, or input_json_delta
 * for a tool call's arguments), content_block_stop, indexes from 0;
 * message_delta (stop_reason, stop_sequence, usage); message_stop. An error
 * chunk of the backend becomes an `error` event, which ends the stream.
 * Each event is appended to `events` as {"event": name, "data": object}. */
struct ig_anth_stream;

/* model: the Message's model until a chunk names one (may be NULL);
 * stop_sequences as for ig_anth_from_chat (borrowed: kept referenced).
 * NULL when out of memory. */
struct ig_anth_stream *ig_anth_stream_new(const char *model, json_t *stop_sequences);
void ig_anth_stream_free(struct ig_anth_stream *st);
/* The prompt's tokens when the caller knows them (a gateway that counted
 * them): message_start carries them when the first chunk has no usage, as
 * only vLLM's with continuous_usage_stats has. Call before the first feed. */
void ig_anth_stream_input_tokens(struct ig_anth_stream *st, long n);
/* One parsed chunk (the JSON of a `data:` line). Returns 0, or -1 with
 * *err malloc'd when the chunk is not a chat chunk (the caller then sends
 * an error event with ig_anth_stream_fail, or ends). Chunks after the
 * end are ignored. */
int ig_anth_stream_feed(struct ig_anth_stream *st, json_t *chunk, json_t *events, char **err);
/* One `data:` payload of the backend's stream as ig_sse_feed hands it
 * over: "[DONE]" ends the stream (ig_anth_stream_done); a payload that is
 * not JSON, or not a chat chunk, ends it with an api_error event. */
void ig_anth_stream_data(struct ig_anth_stream *st, const char *data, size_t len, json_t *events);
/* The end: [DONE], or the backend's stream ended. Closes the open block
 * and appends message_delta and message_stop (message_start first when no
 * chunk came). Nothing after an error event. */
void ig_anth_stream_done(struct ig_anth_stream *st, json_t *events);
/* Ends the stream with an `error` event of the type for `status`. */
void ig_anth_stream_fail(struct ig_anth_stream *st, unsigned status, const char *message, json_t *events);
/* True once message_stop or an error event went out. */
bool ig_anth_stream_ended(const struct ig_anth_stream *st);

/* Appends events (as the functions above make them) as SSE:
 * "event: NAME\ndata: JSON\n\n" each. Returns 0, or -1 out of memory. */
int ig_anth_sse_append(struct ig_buf *out, json_t *events);

/* Anthropic's error type for an HTTP status: 400 and other 4xx
 * invalid_request_error, 401 authentication_error, 402 billing_error, 403
 * permission_error, 404 not_found_error, 413 request_too_large, 429
 * rate_limit_error, 504 timeout_error, 503 and 529 overloaded_error, other
 * 5xx api_error. */
const char *ig_anth_error_type(unsigned status);
/* {"type": "error", "error": {"type", "message"}} as a malloc'd JSON text;
 * type NULL: the one for status. */
char *ig_anth_error_json(unsigned status, const char *type, const char *message);
/* A backend's error answer (any shape oaerror.h reads; a body that is not
 * JSON becomes the message) in Anthropic's shape, malloc'd. */
char *ig_anth_error_from_backend(unsigned status, const char *body, size_t len);

#endif
