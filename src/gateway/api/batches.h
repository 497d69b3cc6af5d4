/* OpenAI's Batch API on the gateway: POST /v1/batches, GET /v1/batches,
 * GET /v1/batches/{id}, POST /v1/batches/{id}/cancel (batches_api.c), and
 * the runner that
 * sends a batch's lines through the gateway itself at class low, exactly
 * once (the same journal as infergate-bulk: infergate/batchfile.h), across
 * restarts. Batches live in data_dir/batches/ID/ (batch.json, written with
 * temp-file-and-rename; output.jsonl and errors.jsonl, appended one line
 * per write(2)); when a batch ends its two result files become Files of its
 * owner (files.h). Not here: the Files API itself, or routing (a batch's
 * requests are ordinary requests of the gateway, marked with a per-process
 * secret so server.c knows whose they are). */
#ifndef IG_BATCHES_H
#define IG_BATCHES_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdint.h>

#include "infergate/buf.h"

struct ig_gw;
struct ig_call;
struct ig_batches;

/* Opens the store in dir (data_dir/batches, made if missing) and loads every
 * batch; unfinished ones go on where they stopped at the next tick. Its
 * reports are registered with metrics.c (the status page's "batches",
 * the infergate_batch* series). NULL with *err (malloc'd) when it cannot. */
struct ig_batches *ig_batches_open(struct ig_gw *gw, const char *dir, char **err);
/* Stops the transfers in flight (their lines are sent again after a
 * restart) and frees everything. NULL is fine. */
void ig_batches_free(struct ig_batches *bs);
/* Once per housekeeping tick: validates, sends, writes, finishes. */
void ig_batches_tick(struct ig_batches *bs, uint64_t now_ms);
/* Batch requests in flight (a graceful stop waits for their answers, so
 * they are written rather than sent again; lines waiting to be retried are
 * not counted: they are sent again after the restart). */
size_t ig_batches_inflight(const struct ig_batches *bs);

/* The call that answers a /v1/batches request for owner (the key's hex
 * digest, "" without keys). NULL when out of memory. */
struct ig_call *ig_batches_call(struct ig_gw *gw, struct MHD_Connection *conn, const char *url,
				const char *method, const char *owner);
/* Whether value (an IG_BATCH_HEADER) carries this process's secret: then
 * 1, with the owner's hex digest in owner; else 0. */
int ig_batches_internal(const struct ig_batches *bs, const char *value, char owner[65]);


#endif
