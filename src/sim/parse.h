/* Reading a generation request's body (parse.c): chat, completions, the
 * Responses API and SGLang's /generate, checked as the imitated server
 * checks them. */
#ifndef IG_SIM_PARSE_H
#define IG_SIM_PARSE_H

#include <stddef.h>

#include "engine.h"
#include "pooling.h"
#include "sim.h"

/* Error types. Validation errors (bad JSON, a field of the wrong type) go
 * through the servers' RequestValidationError handlers, which answer 400
 * with HTTPStatus.BAD_REQUEST.phrase as the type (after sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py, vllm-project/vllm
 * vllm/entrypoints/openai/server_utils.py validation_exception_handler);
 * the serving code's own errors use create_error_response's names. */
#define SIM_T_VALIDATION "Bad Request"
#define SIM_T_BAD_REQUEST "BadRequestError"

/* Reads a completion request (r->kind says which API) into r: stream and
 * usage options, priority, model, prompt text and tokens, the answer's
 * seed and length; a previous_response_id is looked up in the stored
 * Responses. Returns 0, or -1 with *e filled (e->msg malloc'd: the caller
 * frees it); r may then be half filled, and sim_engine_req_free() frees it. */
int sim_parse_completion(struct sim *s, struct sim_req *r, const char *body, size_t len, struct sim_perr *e);

#endif
