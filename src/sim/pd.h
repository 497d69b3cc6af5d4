/* Prefill/decode disaggregation (pd.c): a prefill server computes a
 * prompt's KV and hands it over; a decode server fetches it and decodes
 * without computing the prompt. Two flavors, as the engines do it:
 *   sglang (--disaggregation-mode prefill|decode): the gateway sends the
 *     same body to both with bootstrap_host/_port/_room; the decode asks the
 *     prefill's bootstrap listener for the room; the prefill answers its own
 *     request (one token) once the KV is handed over.
 *   vllm (--kv-transfer-config, NixlConnector): a prefill request
 *     (kv_transfer_params.do_remote_decode) answers at once with the
 *     kv_transfer_params a decode request then carries; the decode reads
 *     the blocks from remote_host:remote_port (the side channel).
 * The listener (bootstrap server / side channel) is a second, small MHD
 * daemon in the same loop: GET /sim/pd/kv?room=KEY&wait_ms=N answers 200
 * {"room", "prompt_tokens", "bytes"} when the KV is handed over (it waits up
 * to wait_ms for a room not ready yet), else 404. The decode side's client
 * is a plain non-blocking socket in the reactor's epoll set. */
#ifndef IG_SIM_PD_H
#define IG_SIM_PD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infergate/buf.h"
#include "pooling.h"
#include "sim.h"

enum sim_pd_role {
	SIM_PD_NONE,    /* served as a co-located server serves it */
	SIM_PD_PREFILL, /* the engine computes it; pd.c holds or annotates its answer */
	SIM_PD_DECODE,  /* pd.c fetches its KV first, then submits it to the engine */
};

/* The listener and its loop hooks. Returns 0, or -1 (logged) when it
 * cannot listen. No listener without a PD role (sglang prefill, vllm with
 * --kv-transfer-config). */
int sim_pd_init(struct sim *s);
void sim_pd_free(struct sim *s);
/* Each loop turn: the listener's MHD turn, then the timers due. */
void sim_pd_run(struct sim *s, uint64_t now_us);
/* Milliseconds until pd.c's next deadline, or -1. */
int sim_pd_timeout_ms(struct sim *s, uint64_t now_us);

/* Reads the PD fields of a parsed generation request's body and takes the
 * request on: SIM_PD_NONE, SIM_PD_PREFILL (submit it as usual),
 * SIM_PD_DECODE (do not submit: pd.c does after the transfer), or -1 with
 * *e filled (a request the server refuses). */
int sim_pd_begin(struct sim *s, struct sim_req *r, const char *body, size_t len, struct sim_perr *e);
/* The client left: its fetch or its room goes. */
void sim_pd_abort(struct sim *s, struct sim_req *r);

/* Pure helpers (unit-tested): */
/* Wall-clock microseconds to move `bytes` at gbps GB/s, simulated time
 * running time_scale times faster; at least 1. */
uint64_t sim_pd_transfer_us(uint64_t bytes, double gbps, double time_scale);
/* An HTTP/1.x answer read whole: its status and where its body starts.
 * Returns 0, or -1 when it is not one. */
int sim_pd_parse_reply(const char *buf, size_t len, unsigned *status, const char **body, size_t *blen);

#endif
