/* The request path's counters (gw->stats): what its exchanges, attempts,
 * strategies and observers count, shown in /metrics by proxy_metrics.c
 * (IG_METRICS_ORDER_PROXY: retries, continuations, hedges,
 * Idempotency-Keys) and by metrics.c's gateway-wide families (answers by
 * class, clients that left, upstream errors, tokens). A type only: written
 * by the modules that count (the path's, and the server's and entry's
 * refusals), under the gateway's lock. */
#ifndef IG_PATH_STATS_H
#define IG_PATH_STATS_H

#include <stdint.h>

#include "path/cont.h"

/* enum ig_upstream_error's count (net/upstream.h: IG_UPERR_OTHER + 1),
 * checked where both are seen (proxy_metrics.c) */
#define IG_PATH_NUPERR 6

struct ig_proxy_stats {
	uint64_t responses[6];      /* by status class 1xx..5xx, index status/100 */
	uint64_t retries;
	uint64_t client_aborts;
	uint64_t continued[IG_CONT_NREASONS]; /* broken streams continued elsewhere, by why */
	uint64_t cont_prompt_tokens; /* prompt tokens those continuations sent again */
	uint64_t hedges[4];         /* hedges sent, won (the hedge answered first), lost
				     * (the primary did), not sent (the budget, no free slot) */
	uint64_t hedge_waste_us;    /* backend time of the attempts that lost a race */
	uint64_t hedge_waste_prompt_tokens; /* the prompts they were sent (estimated) */
	/* prefill/decode pairs (try_pd.c): pairs made (a prefill half sent),
	 * prefill halves that failed (the pair made again), hand-overs past
	 * pd.transfer_timeout_ms, short prompts run alone (pd.min_prompt_tokens),
	 * vLLM prefill answers with no kv_transfer_params (decoded alone) */
	uint64_t pd[5];
	uint64_t idem[4];           /* Idempotency-Key requests: ran, joined (while it ran),
				     * replayed (after), conflicts (another body: 422) */
	uint64_t upstream_errors[IG_PATH_NUPERR];
	uint64_t prompt_tokens, completion_tokens;
};

#endif
