/* The simulator's answers that take no generation: embeddings, rerank,
 * score, pooling and classify, answered at once in the shapes of the server
 * imitated (see pooling.c for the sources), with vectors and scores drawn
 * from the text, so the same input always gets the same answer. */
#ifndef SIM_POOLING_H
#define SIM_POOLING_H

#include <stddef.h>

#include "conf.h"

enum sim_pool_kind { SIM_POOL_EMBED, SIM_POOL_RERANK, SIM_POOL_SCORE, SIM_POOL_POOLING, SIM_POOL_CLASSIFY };

struct sim_pool_answer {
	unsigned status;    /* 200: body is the answer; else the error's */
	char *body;         /* 200: the JSON answer (malloc'd) */
	char *message;      /* else: the error's message (malloc'd) */
	const char *type;   /* ...its type (NULL: the usual one for the status) */
	const char *param;
	bool native;        /* SGLang's native routes: {"error": {"message"}} */
	long prompt_tokens; /* what it counted, for the server's totals */
};

/* Answers one request body; request_id: its X-Request-Id (NULL: none),
 * which vLLM makes its answer's id of. */
void sim_pool_answer(const struct sim_conf *conf, enum sim_pool_kind kind, const char *body, size_t len,
		     const char *request_id, struct sim_pool_answer *a);

#endif
