/* Attempt strategies: when an exchange starts another upstream attempt and
 * which one's answer is the client's. An exchange (proxy.c) has one attempt
 * at a time, or two while a hedge races; at an attempt's end the strategies
 * are asked in the order of ig_strategies (proxy.c), the first that takes
 * the case decides; at the housekeeping tick each may start an attempt.
 * A new strategy is one file (try_NAME.c) and one row of ig_strategies.
 * Not here: the transfer itself (attempt.c, upstream.c), the answer's
 * bytes (relay.c), what is watched of an exchange (watch.h).
 *
 * Every op runs on the exchange's own reactor, under the gateway's lock,
 * outside curl's callbacks. */
#ifndef IG_STRATEGY_H
#define IG_STRATEGY_H

#include <stdint.h>

#include "net/upstream.h"

struct ig_req;
struct ig_backend;

/* What a strategy made of an attempt's end. */
enum ig_try_verdict {
	IG_TRY_PASS,  /* not its case: the next strategy is asked */
	IG_TRY_AGAIN, /* another attempt goes on (started, queued, or already
		       * racing): the exchange is not answered now */
	IG_TRY_END,   /* the answer is decided as it stands (an error set, a
		       * stream's end, the backend's own answer): it ends */
};

/* One attempt's failure, as the strategies see it. */
struct ig_attempt_end {
	enum ig_upstream_error e;   /* never IG_UPERR_NONE */
	const char *detail;         /* what happened, for messages */
	struct ig_backend *b;       /* where the attempt ran */
};

struct ig_strategy {
	const char *name;
	/* An attempt of req failed (accounted already: its slot given back,
	 * its backend's health told). NULL: never its case. */
	enum ig_try_verdict (*on_attempt_end)(struct ig_req *req, const struct ig_attempt_end *ae);
	/* The housekeeping tick (every 25 to 250 ms) for each exchange of the
	 * reactor: it may start an attempt. NULL: nothing to do. */
	void (*on_tick)(struct ig_req *req, uint64_t now_ms);
};

/* The strategies, in the order they are asked; NULL-terminated (proxy.c). */
extern const struct ig_strategy *const ig_strategies[];

extern const struct ig_strategy ig_try_pd;       /* try_pd.c */
extern const struct ig_strategy ig_try_hedge;    /* try_hedge.c */
extern const struct ig_strategy ig_try_continue; /* try_continue.c */
extern const struct ig_strategy ig_try_retry;    /* try_retry.c */

/* Hedging's hooks outside the table (try_hedge.c): the first byte of either
 * of a race (the relay's `first_byte`, the lock let go: taken here),
 * whether this attempt won; the loser told on its reactor (IG_HAND_HEDGE_LOST);
 * a hedge freed (lost, refused, or the exchange ends). */
bool ig_hedge_first_byte(struct ig_req *req);
void ig_hedge_lose(struct ig_req *req);
void ig_hedge_drop(struct ig_req *h);
/* A loser's attempt stopped by its own end: its cost counted as waste. */
void ig_hedge_waste(struct ig_req *req);

#endif
