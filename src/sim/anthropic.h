/* Anthropic's Messages API in infergate-sim (anthropic.c): POST
 * /v1/messages runs as a chat completion, its request translated before the
 * chat path reads it and its answer translated as the engine writes it;
 * POST /v1/messages/count_tokens counts the prompt as the chat path does.
 * Each in the shapes of the imitated server's Anthropic handler. */
#ifndef IG_SIM_ANTHROPIC_H
#define IG_SIM_ANTHROPIC_H

#include <stdbool.h>
#include <stddef.h>

#include "infergate/buf.h"
#include "request.h"
#include "sim.h"

struct sim_anth;

/* An answer to send as it is: status, a malloc'd body, its content type. */
struct sim_anth_answer {
	unsigned status;
	char *body;
	const char *ctype;
};

/* POST /v1/messages: reads the Anthropic request in *body and replaces it
 * with the chat request the chat path then parses. Returns the request's
 * translator (sim_anth_free), or NULL with *a the refusal to send. */
struct sim_anth *sim_anth_begin(struct sim *s, struct ig_buf *body, struct sim_anth_answer *a);
void sim_anth_free(struct sim_anth *x);

/* A refusal of the chat path (a parse error, the server down, a failure:
 * status, and the error type the chat route would give), as the imitated
 * server's Anthropic handler answers it. */
void sim_anth_error(struct sim *s, struct sim_anth *x, unsigned status, const char *type, const char *msg,
		    struct sim_anth_answer *a);

/* A stream: translates the whole events r->out holds (the chat chunks the
 * engine wrote) into Anthropic's, consuming them, and returns the buffer of
 * translated bytes for the content reader to drain. */
struct ig_buf *sim_anth_stream(struct sim_anth *x, struct sim_req *r);

/* The finished non-streamed answer: the chat completion in r->out as a
 * Message. */
void sim_anth_final(struct sim *s, struct sim_anth *x, struct sim_req *r, struct sim_anth_answer *a);

/* POST /v1/messages/count_tokens: {"input_tokens": N}, N the prompt tokens
 * the chat path would count (with --tokenizer, after the chat template). */
void sim_anth_count_tokens(struct sim *s, const char *body, size_t len, struct sim_anth_answer *a);

#endif
