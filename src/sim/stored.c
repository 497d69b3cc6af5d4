/* Stored Responses: a ring of the last SIM_STORED answers of
 * POST /v1/responses, so GET /v1/responses/{id} can give one back and a
 * previous_response_id can be checked; one the simulator does not hold is
 * its 404, as vLLM's and SGLang's serving_responses.py answer one
 * ("Response with id '...' not found.", invalid_request_error). Only the
 * counts and the seed are kept: wire.c writes the answer again from them.
 * Not here: the HTTP answers (server.c), the request's parsing (parse.c). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stored.h"

const struct sim_stored *sim_stored_find(const struct sim *s, const char *id)
{
	size_t n = s->nstored < SIM_STORED ? s->nstored : SIM_STORED;
	for (size_t i = 0; i < n; i++)
		if (strcmp(s->stored[i].id, id) == 0)
			return &s->stored[i];
	return NULL;
}

void sim_stored_put(struct sim *s, const struct sim_req *r)
{
	if (!s->stored && !(s->stored = calloc(SIM_STORED, sizeof(*s->stored))))
		return;
	struct sim_stored *e = &s->stored[s->nstored++ % SIM_STORED];
	snprintf(e->id, sizeof(e->id), "%s", r->id);
	snprintf(e->prev_id, sizeof(e->prev_id), "%s", r->prev_id);
	snprintf(e->model, sizeof(e->model), "%s", strlen(r->model_json) < sizeof(e->model) ? r->model_json : "\"?\"");
	e->created = r->created;
	e->text_seed = r->text_seed;
	e->prompt_tokens = r->prompt_tokens;
	e->n_tokens = r->n_tokens;
	e->length_cut = r->length_cut;
}
