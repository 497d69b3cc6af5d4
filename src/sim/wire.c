/* The simulator's wire formats: the bytes of its answers in the shapes of
 * the servers it imitates. OpenAI's chat and text completions (whole, and
 * as SSE chunks with the usage chunk of include_usage), OpenAI's Responses
 * API (the object, and its typed stream events), SGLang's native /generate,
 * and the error events of a stream that fails midway, as SGLang and vLLM
 * write each. Given a request's counts and seed, it writes bytes into a
 * buffer; when a token is due, how many, and the slots and queues are the
 * engine's (engine.c), parsing is parse.c's, HTTP is server.c's. */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "wire.h"

/* The answer's whole text, regenerated from its seed: the same words a
 * stream sends token by token. */
void sim_wire_answer_text(struct ig_buf *o, const struct sim_req *r)
{
	struct sim_text gen;
	char tok[SIM_TOKEN_MAX + 1];
	sim_text_start(&gen, r->text_seed, r->text_skip);
	sim_text_doc(&gen, r->doc, r->doc_len);
	for (long i = 0; i < r->n_tokens; i++)
		ig_buf_append(o, tok, sim_text_next(&gen, tok));
}

/* ---- the Responses API ----
 * OpenAI's shapes, as vLLM (vllm/entrypoints/openai/serving_responses.py)
 * and SGLang (python/sglang/srt/entrypoints/openai/serving_responses.py)
 * write them for a text answer: the response object (created_at, status,
 * output: one message with one output_text part, usage with input_tokens
 * and output_tokens); streamed, typed events each with its
 * sequence_number: response.created, response.in_progress,
 * response.output_item.added, response.content_part.added, one
 * response.output_text.delta per token, then the .done events and
 * response.completed (response.incomplete when max_output_tokens cut it),
 * and no [DONE]. */

/* The message item; done: with its text. */
static void resp_item(struct ig_buf *o, const struct sim_req *r, bool done)
{
	ig_buf_printf(o, "{\"type\":\"message\",\"id\":\"msg_%s\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[",
		      r->id + 5, done ? "completed" : "in_progress");
	if (done) {
		ig_buf_printf(o, "{\"type\":\"output_text\",\"text\":\"");
		sim_wire_answer_text(o, r);
		ig_buf_printf(o, "\",\"annotations\":[]}");
	}
	ig_buf_printf(o, "]}");
}

/* The response object; done: finished, with its output and usage. */
static void resp_object(struct ig_buf *o, const struct sim_req *r, bool done)
{
	ig_buf_printf(o, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"model\":%s,",
		      r->id, (long long)r->created, !done ? "in_progress" : r->length_cut ? "incomplete" : "completed",
		      r->model_json);
	if (r->prev_id[0])
		ig_buf_printf(o, "\"previous_response_id\":\"%s\",", r->prev_id);
	else
		ig_buf_printf(o, "\"previous_response_id\":null,");
	ig_buf_printf(o, "\"incomplete_details\":%s,\"output\":[",
		      done && r->length_cut ? "{\"reason\":\"max_output_tokens\"}" : "null");
	if (done)
		resp_item(o, r, true);
	ig_buf_printf(o, "],\"usage\":");
	if (done)
		ig_buf_printf(o, "{\"input_tokens\":%ld,\"input_tokens_details\":{\"cached_tokens\":%ld},"
			      "\"output_tokens\":%ld,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%ld}",
			      r->prompt_tokens, r->cache_report ? r->cached_tokens : 0, r->n_tokens,
			      r->prompt_tokens + r->n_tokens);
	else
		ig_buf_printf(o, "null");
	ig_buf_printf(o, "}");
}

void sim_wire_response_object(struct ig_buf *o, const struct sim_req *r)
{
	resp_object(o, r, true);
}

/* `event: TYPE` and the data's start up to its sequence_number; the caller
 * adds the rest and resp_close(). */
static void resp_event(struct ig_buf *o, struct sim_req *r, const char *type)
{
	ig_buf_printf(o, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%ld", type, type, r->seq++);
}

static void resp_close(struct ig_buf *o)
{
	ig_buf_printf(o, "}\n\n");
}

static void resp_start(struct ig_buf *o, struct sim_req *r)
{
	static const char *const opening[] = {"response.created", "response.in_progress"};
	for (int i = 0; i < 2; i++) {
		resp_event(o, r, opening[i]);
		ig_buf_printf(o, ",\"response\":");
		resp_object(o, r, false);
		resp_close(o);
	}
	resp_event(o, r, "response.output_item.added");
	ig_buf_printf(o, ",\"output_index\":0,\"item\":");
	resp_item(o, r, false);
	resp_close(o);
	resp_event(o, r, "response.content_part.added");
	ig_buf_printf(o, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,"
		      "\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}", r->id + 5);
	resp_close(o);
}

static void resp_delta(struct ig_buf *o, struct sim_req *r, const char *tok)
{
	resp_event(o, r, "response.output_text.delta");
	ig_buf_printf(o, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,\"delta\":\"%s\"", r->id + 5,
		      tok);
	resp_close(o);
}

static void resp_end(struct ig_buf *o, struct sim_req *r)
{
	resp_event(o, r, "response.output_text.done");
	ig_buf_printf(o, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,\"text\":\"", r->id + 5);
	sim_wire_answer_text(o, r);
	ig_buf_printf(o, "\"");
	resp_close(o);
	resp_event(o, r, "response.content_part.done");
	ig_buf_printf(o, ",\"item_id\":\"msg_%s\",\"output_index\":0,\"content_index\":0,"
		      "\"part\":{\"type\":\"output_text\",\"text\":\"", r->id + 5);
	sim_wire_answer_text(o, r);
	ig_buf_printf(o, "\",\"annotations\":[]}");
	resp_close(o);
	resp_event(o, r, "response.output_item.done");
	ig_buf_printf(o, ",\"output_index\":0,\"item\":");
	resp_item(o, r, true);
	resp_close(o);
	resp_event(o, r, r->length_cut ? "response.incomplete" : "response.completed");
	ig_buf_printf(o, ",\"response\":");
	resp_object(o, r, true);
	resp_close(o);
}

/* ---- SGLang's /generate ----
 * After sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py
 * (_handle_batch_output: "text", "output_ids", "meta_info" with id,
 * finish_reason, prompt_tokens, weight_version, num_retractions,
 * reasoning_tokens, completion_tokens, cached_tokens, then e2e_latency and
 * response_sent_to_client_ts once finished) and
 * python/sglang/srt/entrypoints/http_server.py generate_request (streamed:
 * `data: {...}` per output, then `data: [DONE]`). Streamed outputs are
 * cumulative, as with SGLang's default (--incremental-streaming-output
 * off): each carries the whole text and output_ids so far. finish_reason
 * (python/sglang/srt/managers/schedule_batch.py FINISH_*.to_json):
 * {"type": "length", "length": N}, or {"type": "stop", "matched": the
 * end-of-sequence id} (SIM_EOS_ID here); null until the end. An output id
 * is the token's first four bytes packed as /tokenize packs them. */
#define SIM_EOS_ID 2

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void gen_token_id(struct ig_buf *ids, const char *tok)
{
	uint32_t id = 0;
	for (size_t k = 0; k < 4 && tok[k]; k++)
		id |= (uint32_t)(unsigned char)tok[k] << (8 * k);
	ig_buf_printf(ids, "%s%lu", ids->len ? "," : "", (unsigned long)id);
}

/* One output object; done: the last, with finish_reason and latency. */
static void gen_output(struct ig_buf *o, const struct sim_req *r, const struct ig_buf *text,
		       const struct ig_buf *ids, long k, bool done)
{
	ig_buf_printf(o, "{\"text\":\"%.*s\",\"output_ids\":[%.*s],\"meta_info\":{\"id\":\"%s\",\"finish_reason\":",
		      (int)text->len, text->data ? text->data : "", (int)ids->len, ids->data ? ids->data : "", r->id);
	if (!done)
		ig_buf_printf(o, "null");
	else if (r->length_cut)
		ig_buf_printf(o, "{\"type\":\"length\",\"length\":%ld}", r->n_tokens);
	else
		ig_buf_printf(o, "{\"type\":\"stop\",\"matched\":%d}", SIM_EOS_ID);
	ig_buf_printf(o, ",\"prompt_tokens\":%ld,\"weight_version\":\"default\",\"num_retractions\":0,"
		      "\"reasoning_tokens\":0,\"completion_tokens\":%ld,\"cached_tokens\":%ld",
		      r->prompt_tokens, k, r->cache_report ? r->cached_tokens : 0);
	if (done)
		ig_buf_printf(o, ",\"e2e_latency\":%.6f", (double)(ig_now_us() - r->t_recv_us) / 1e6);
	if (done || k <= 1)
		ig_buf_printf(o, ",\"response_sent_to_client_ts\":%.6f", wall_s());
	ig_buf_printf(o, "}}");
}

/* The whole answer's text and ids, regenerated from the seed. */
static void gen_whole(const struct sim_req *r, struct ig_buf *text, struct ig_buf *ids)
{
	struct sim_text gen;
	char tok[SIM_TOKEN_MAX + 1];
	sim_text_start(&gen, r->text_seed, r->text_skip);
	sim_text_doc(&gen, r->doc, r->doc_len);
	for (long i = 0; i < r->n_tokens; i++) {
		ig_buf_append(text, tok, sim_text_next(&gen, tok));
		gen_token_id(ids, tok);
	}
}

/* `data: {"id":...,"object":...,"created":...,"model":...,"choices":[` */
static void chunk_head(struct ig_buf *o, const struct sim_req *r)
{
	ig_buf_printf(o, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":%s,\"choices\":[",
		      r->id, r->kind == SIM_CHAT ? "chat.completion.chunk" : "text_completion",
		      (long long)r->created, r->model_json);
}

/* Closes a chunk. No "usage" member, with include_usage or without: SGLang
 * leaves it out of every chunk but the last (python/sglang/srt/entrypoints/
 * openai/sse_utils.py: StreamChunk is encoded with omit_defaults), as vLLM
 * does (serving_chat.py: model_dump_json(exclude_unset=True)); OpenAI
 * itself sends "usage": null. */
static void chunk_tail(struct ig_buf *o, const struct sim_req *r IG_UNUSED)
{
	ig_buf_printf(o, "]}\n\n");
}

/* Step profiles: the prompt tokens found in the prefix cache, as SGLang
 * reports them with --enable-cache-report (usage.prompt_tokens_details,
 * python/sglang/srt/entrypoints/openai/usage_processor.py) and vLLM does. */
static void usage_details(struct ig_buf *o, const struct sim_req *r)
{
	if (r->cache_report)
		ig_buf_printf(o, ",\"prompt_tokens_details\":{\"cached_tokens\":%ld}", r->cached_tokens);
}

void sim_wire_stream_open(struct ig_buf *o, struct sim_req *r)
{
	if (r->kind == SIM_RESPONSES && r->seq == 0) {
		resp_start(o, r);
	} else if (r->kind == SIM_CHAT) {
		chunk_head(o, r);
		ig_buf_printf(o, "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
			      "\"logprobs\":null,\"finish_reason\":null}");
		chunk_tail(o, r);
	}
}

void sim_wire_stream_token(struct ig_buf *o, struct sim_req *r)
{
	char tok[SIM_TOKEN_MAX + 1];
	size_t n = sim_text_next(&r->text, tok);
	if (r->kind == SIM_RESPONSES) {
		resp_delta(o, r, tok);
		return;
	}
	if (r->kind == SIM_GENERATE) {
		ig_buf_append(&r->gen_text, tok, n);
		gen_token_id(&r->gen_ids, tok);
		if (r->emitted + 1 == r->n_tokens)
			return; /* the last one goes out with its finish_reason (sim_wire_stream_end) */
		ig_buf_printf(o, "data: ");
		gen_output(o, r, &r->gen_text, &r->gen_ids, r->emitted + 1, false);
		ig_buf_printf(o, "\n\n");
		return;
	}
	chunk_head(o, r);
	if (r->kind == SIM_CHAT)
		ig_buf_printf(o, "{\"index\":0,\"delta\":{\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":null}", tok);
	else
		ig_buf_printf(o, "{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":null}", tok);
	chunk_tail(o, r);
}

static const char *finish_reason(const struct sim_req *r)
{
	return r->length_cut ? "length" : "stop";
}

void sim_wire_stream_end(struct ig_buf *o, struct sim_req *r)
{
	if (r->kind == SIM_RESPONSES) {
		resp_end(o, r);
		return;
	}
	if (r->kind == SIM_GENERATE) {
		ig_buf_printf(o, "data: ");
		gen_output(o, r, &r->gen_text, &r->gen_ids, r->n_tokens, true);
		ig_buf_printf(o, "\n\ndata: [DONE]\n\n");
		return;
	}
	chunk_head(o, r);
	if (r->kind == SIM_CHAT)
		ig_buf_printf(o, "{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"%s\"}", finish_reason(r));
	else
		ig_buf_printf(o, "{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"%s\"}", finish_reason(r));
	chunk_tail(o, r);
	if (r->include_usage) {
		chunk_head(o, r);
		ig_buf_printf(o, "],\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld",
			      r->prompt_tokens, r->n_tokens, r->prompt_tokens + r->n_tokens);
		usage_details(o, r);
		ig_buf_printf(o, "}}\n\n");
	}
	ig_buf_printf(o, "data: [DONE]\n\n");
}

void sim_wire_answer(struct ig_buf *o, const struct sim_req *r)
{
	if (r->kind == SIM_RESPONSES || r->kind == SIM_GENERATE) {
		if (r->kind == SIM_RESPONSES) {
			resp_object(o, r, true);
		} else {
			struct ig_buf text, ids;
			ig_buf_init(&text);
			ig_buf_init(&ids);
			gen_whole(r, &text, &ids);
			gen_output(o, r, &text, &ids, r->n_tokens, true);
			ig_buf_free(&text);
			ig_buf_free(&ids);
		}
		return;
	}
	ig_buf_printf(o, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":%s,\"choices\":[{\"index\":0,",
		      r->id, r->kind == SIM_CHAT ? "chat.completion" : "text_completion",
		      (long long)r->created, r->model_json);
	if (r->kind == SIM_CHAT)
		ig_buf_printf(o, "\"message\":{\"role\":\"assistant\",\"content\":\"");
	else
		ig_buf_printf(o, "\"text\":\"");
	sim_wire_answer_text(o, r);
	ig_buf_printf(o, "\"%s,\"logprobs\":null,\"finish_reason\":\"%s\"}],"
		      "\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld",
		      r->kind == SIM_CHAT ? "}" : "", finish_reason(r),
		      r->prompt_tokens, r->n_tokens, r->prompt_tokens + r->n_tokens);
	usage_details(o, r);
	ig_buf_printf(o, "}}");
}

/* The end of a stream that fails midway, as the server writes it after the
 * 200 went out: an error event, then [DONE]. SGLang: a scheduler abort with
 * a status becomes create_streaming_error_response(message, code.name,
 * code.value), the flat error nested under "error" by json.dumps (after
 * sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_completions.py
 * and serving_base.py). vLLM: a GenerationError becomes "Internal server
 * error", type InternalServerError, code 500 (vllm-project/vllm
 * vllm/entrypoints/openai/engine/serving.py
 * _convert_generation_error_to_streaming_response). Both json.dumps, hence
 * the spaces. */
void sim_wire_stream_error(struct ig_buf *o, struct sim_req *r, enum sim_flavor flavor)
{
	if (r->kind == SIM_GENERATE) { /* http_server.py generate_request: a ValueError's event */
		ig_buf_printf(o, "data: {\"error\":{\"message\":\"Simulated generation failure (--stream-fail-rate).\"}}\n\n"
			      "data: [DONE]\n\n");
		return;
	}
	if (r->kind == SIM_RESPONSES) { /* the Responses API's error event; no [DONE] */
		resp_event(o, r, "error");
		ig_buf_printf(o, ",\"code\":\"server_error\",\"message\":\"Simulated generation failure "
			      "(--stream-fail-rate).\",\"param\":null");
		resp_close(o);
		return;
	}
	if (flavor == SIM_FLAVOR_VLLM)
		ig_buf_printf(o, "data: {\"error\": {\"message\": \"Internal server error\", "
			      "\"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}\n\n");
	else
		ig_buf_printf(o, "data: {\"error\": {\"object\": \"error\", \"message\": "
			      "\"Simulated generation failure (--stream-fail-rate).\", "
			      "\"type\": \"INTERNAL_SERVER_ERROR\", \"param\": null, \"code\": 500}}\n\n");
	ig_buf_printf(o, "data: [DONE]\n\n");
}
