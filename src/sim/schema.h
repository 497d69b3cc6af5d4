/* Structured outputs in the simulator: the request fields that ask for a
 * JSON answer, and a deterministic JSON document of a schema's shape, cut
 * into tokens (schema.c says which fields and which part of JSON Schema).
 * Not a grammar engine: the document is made whole, then streamed token by
 * token like any other answer (text.h's sim_text_doc). */
#ifndef IG_SIM_SCHEMA_H
#define IG_SIM_SCHEMA_H

#include <jansson.h>
#include <stdint.h>

#include "infergate/buf.h"

/* Whether the request body root asks for a JSON answer: 1 (then *schema
 * is the schema, borrowed from root or, for a schema sent as a string,
 * *owned, to be json_decref'd; NULL: any JSON object), 0 when it does not,
 * -1 with *err (malloc'd) when its schema is not JSON. */
int sim_schema_of(json_t *root, json_t **schema, json_t **owned, char **err);

/* A JSON document of schema's shape (NULL: a JSON object), drawn from
 * seed, of about `target` tokens where free text allows, written into out
 * as its tokens, each NUL-terminated and already escaped for a JSON string
 * (at most SIM_TOKEN_MAX bytes). Returns the number of tokens. */
long sim_schema_doc(const json_t *schema, uint64_t seed, long target, struct ig_buf *out);

#endif
