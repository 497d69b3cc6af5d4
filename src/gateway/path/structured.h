/* Whether a request constrains its answer (structured outputs): a JSON
 * schema, a JSON object, a regex, a choice list, a grammar or a structural
 * tag, in OpenAI's, vLLM's or SGLang's fields (structured.c names them).
 * Pure: reads a parsed request body, keeps nothing.
 *
 * Why a gateway cares: a grammar engine starts its grammar at the first
 * token it generates, so a constrained answer cannot be continued on a
 * second server after part of it was relayed (the second would start the
 * document again: the client would get invalid JSON; Dynamo found this in
 * its own migration, ai-dynamo/dynamo #7925). cont.c asks before it
 * continues a broken stream. */
#ifndef IG_STRUCTURED_H
#define IG_STRUCTURED_H

#include <jansson.h>
#include <stdbool.h>

/* The field of body (a request's JSON object) that constrains its answer,
 * as a static string such as "response_format" or
 * "sampling_params.regex"; NULL when none does (or body is no object). */
const char *ig_structured_field(const json_t *body);

/* Whether body constrains its answer: ig_structured_field's is not NULL. */
bool ig_structured_output(const json_t *body);

#endif
