/* The bytes of the simulator's answers (wire.c), in the shapes of the
 * servers it imitates: OpenAI's chat and text completions, the Responses
 * API, SGLang's /generate. Each function writes into a buffer from what a
 * request holds (kind, id, model, created, seed, counts); none decides
 * when, and none touches the engine's slots or counters. */
#ifndef IG_SIM_WIRE_H
#define IG_SIM_WIRE_H

#include "conf.h"
#include "infergate/buf.h"
#include "request.h"

/* The answer's whole text, regenerated from r's seed and n_tokens: the
 * words a stream sends token by token. */
void sim_wire_answer_text(struct ig_buf *o, const struct sim_req *r);
/* The whole non-streamed answer (chat, completion, Responses object or
 * /generate output), usage included. */
void sim_wire_answer(struct ig_buf *o, const struct sim_req *r);
/* A finished Responses API answer's object (what GET /v1/responses/{id}
 * gives back). */
void sim_wire_response_object(struct ig_buf *o, const struct sim_req *r);

/* A stream, in the order the engine calls them. Each advances what r keeps
 * of its stream (the Responses sequence_number, the text generator, the
 * /generate text so far); r->emitted is the count of tokens sent before.
 * _open: what comes before the first token (the Responses API's opening
 * events once, a chat answer's role chunk; nothing otherwise). */
void sim_wire_stream_open(struct ig_buf *o, struct sim_req *r);
/* The next token's chunk (the last /generate token waits for _end). */
void sim_wire_stream_token(struct ig_buf *o, struct sim_req *r);
/* After the last token: the finish reason, the usage chunk when asked,
 * [DONE] (the Responses API: its .done events, no [DONE]). */
void sim_wire_stream_end(struct ig_buf *o, struct sim_req *r);
/* Instead of the end, for a stream that fails midway
 * (--stream-fail-rate): the error event the imitated server writes. */
void sim_wire_stream_error(struct ig_buf *o, struct sim_req *r, enum sim_flavor flavor);

#endif
