/* A broken stream continued on another backend: what the first attempts
 * relayed (the choice's text, its tokens, the first event's id, created
 * and model), the body that asks the next backend to go on from there, and
 * the continuation's events rewritten so that the client sees one stream.
 *
 * Chat: the partial answer becomes the final assistant message, with
 * continue_final_message true and add_generation_prompt false (vLLM's
 * ChatCompletionRequest, vllm/entrypoints/openai/protocol.py, wants both,
 * and vllm/entrypoints/openai/serving_chat.py renders the template with
 * them; SGLang's, python/sglang/srt/entrypoints/openai/protocol.py, has
 * continue_final_message and ignores the other). Completions: the prompt
 * plus the text so far. max_tokens and max_completion_tokens lose the
 * tokens already relayed (one per content event: SGLang's stream_interval
 * and vLLM's default both send a token an event).
 *
 * Not continued (the stream ends with an error event, as before): several
 * choices (n > 1), echo, a prompt of token ids or several prompts, a
 * stream that carried tool calls or reasoning text, and the Responses
 * API (its events carry sequence numbers and item ids that a second
 * server would number anew).
 *
 * Threads: a struct ig_cont is its request's, on its reactor, like the
 * relay that holds it (relay.h). */
#ifndef IG_CONT_H
#define IG_CONT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "infergate/buf.h"

/* Why a stream was continued (metrics' label order). */
enum ig_cont_reason {
	IG_CONT_RESET,       /* the connection was lost (or failed otherwise) */
	IG_CONT_ERROR_EVENT, /* a 5xx error event */
	IG_CONT_STALL,       /* no event for timeouts.token_gap_ms (or idle_s) */
	IG_CONT_NREASONS
};

struct ig_cont {
	int max;              /* continuations allowed (continue.max; 0: none) */
	bool dead;            /* this stream cannot be continued (why: dead_why) */
	const char *dead_why;
	bool cont_attempt;    /* the running attempt continues: its events rewritten */
	bool broken;          /* the running attempt sent a 5xx error event: the rest
			       * of its bytes dropped, the stream continued */
	json_t *head;         /* {"id", "created", "model"} of the first event */
	struct ig_buf text;   /* the choice's text relayed so far */
	long tokens;          /* content events relayed (a token each) */
	long tokens_before;   /* of them, those relayed before the running attempt */
	int count;            /* continuations made */
	long reprefilled;     /* prompt tokens the continuations sent again */
};

void ig_cont_init(struct ig_cont *c, int max);
void ig_cont_free(struct ig_cont *c);

/* Whether a broken stream may go on elsewhere now. */
bool ig_cont_possible(const struct ig_cont *c);

/* What to do with one data event (d, dn bytes, without "data: ").
 * IG_CONT_KEEP: relay it as it is; IG_CONT_REWRITE: relay *out instead
 * (malloc'd JSON); IG_CONT_DROP: relay nothing of it (a continuation's
 * opening role chunk). The text and tokens are counted either way. */
enum ig_cont_action { IG_CONT_KEEP, IG_CONT_REWRITE, IG_CONT_DROP };
enum ig_cont_action ig_cont_event(struct ig_cont *c, const char *d, size_t dn, char **out);

/* The body of the next continuation, made from the request's original
 * body (JSON, len bytes): malloc'd, or NULL with *why (static) when this
 * stream cannot be continued. */
char *ig_cont_body(const struct ig_cont *c, const char *body, size_t len, const char **why);

/* A continuation starts: the next attempt's events are rewritten. */
void ig_cont_begin(struct ig_cont *c);

#endif
