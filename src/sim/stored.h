/* The Responses API answers the simulator keeps (stored.c): the last
 * SIM_STORED it stored (unless "store": false), enough to give each back
 * (GET /v1/responses/{id}) and to know a previous_response_id. */
#ifndef IG_SIM_STORED_H
#define IG_SIM_STORED_H

#include <stdbool.h>
#include <stdint.h>

#include "sim.h"

#define SIM_STORED 4096

/* What it takes to write the answer again (wire.h): its counts and seed. */
struct sim_stored {
	char id[48], prev_id[48];
	char model[128];             /* as a JSON string literal */
	int64_t created;
	uint64_t text_seed;
	long prompt_tokens, n_tokens;
	bool length_cut;
};

/* The stored answer with this id, or NULL. */
const struct sim_stored *sim_stored_find(const struct sim *s, const char *id);
/* Keeps r's answer, over the oldest one when SIM_STORED are kept. Out of
 * memory (the ring's first allocation), it keeps nothing. */
void sim_stored_put(struct sim *s, const struct sim_req *r);

#endif
