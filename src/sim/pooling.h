/* The simulator's answers that take no generation: embeddings, rerank,
 * score, pooling and classify, answered at once in the shapes of the server
 * imitated (see pooling.c for the sources), with vectors and scores drawn
 * from the text, so the same input always gets the same answer. */
#ifndef SIM_POOLING_H
#define SIM_POOLING_H

#include <stddef.h>

#include "conf.h"

enum sim_pool_kind { SIM_POOL_EMBED, SIM_POOL_RERANK, SIM_POOL_SCORE, SIM_POOL_POOLING, SIM_POOL_CLASSIFY };

/* Why a request is refused: the answer's status, type (NULL: the usual one
 * for the status), param and message (malloc'd). */
struct sim_perr {
	unsigned status;
	const char *type;
	const char *param;
	char *msg;
};

/* Fills e; returns -1, for `return sim_refuse(...)`. */
int sim_refuse(struct sim_perr *e, unsigned status, const char *type, const char *param, char *msg);

struct sim_pool_answer {
	char *body;          /* the JSON answer (malloc'd), or NULL: refused */
	struct sim_perr err; /* when refused */
	bool native;         /* SGLang's native routes: {"error": {"message"}} */
	long prompt_tokens;  /* what it counted, for the server's totals */
};

/* Answers one request body; request_id: its X-Request-Id (NULL: none),
 * which vLLM makes its answer's id of. */
void sim_pool_answer(const struct sim_conf *conf, enum sim_pool_kind kind, const char *body, size_t len,
		     const char *request_id, struct sim_pool_answer *a);

#endif
