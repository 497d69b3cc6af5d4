/* Admission: what a proxied request is, and whether it may go on, decided
 * before it meets the scheduler. Its body is checked (the fields the
 * gateway reads, as OpenAI checks them) and forwarded byte for byte unless
 * an alias or the usage option must change it; its model (aliases
 * resolved), its client's key, class and share, its key's models and rate
 * limits (rpm, tpm), and what the routing policy needs (token estimate,
 * prompt prefix, session key) are taken. Under the gateway's lock, but for
 * nothing: the body's parse runs before, with the lock let go (proxy.c).
 * The results go into struct ig_admission and the request's waiter; a
 * refusal into a->err, in OpenAI's shape.
 * Not here: the request's life and answer (proxy.c), queues (dispatch.c). */
#ifndef IG_ADMISSION_H
#define IG_ADMISSION_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "infergate/buf.h"
#include "keys/clients.h"
#include "sched/dispatch.h"

struct ig_gw;

/* The most a count the gateway computes with may be (max_tokens and its
 * kin, n, best_of): more is a 400 naming it. */
#define IG_ADMISSION_COUNT_MAX 2147483647L
/* A request's token estimate at most: past any key's tpm (keyset.c takes
 * up to 4e12), so a request asking more is refused by every limited key. */
#define IG_ADMISSION_TOKENS_MAX (1L << 44)

/* A refusal: status and OpenAI's error fields (message included). */
struct ig_admission_error {
	unsigned status;             /* 0: none */
	const char *type;            /* NULL: the status's type */
	const char *param;           /* NULL: none */
	const char *code;
	char *message;               /* malloc'd (NULL: out of memory); inline, 1 KiB
				      * would be zeroed with every request */
	uint64_t retry_after_ms;     /* a rate limit's: when to come back, UINT64_MAX never */
};

struct ig_admission {
	/* set by the request */
	int route_idx;               /* its route (routes.h) */
	unsigned method;             /* IG_RT_POST, _PUT, _GET or _DELETE */
	char key_id[65];             /* the hex SHA-256 of its bearer key, "" none */
	char *resp_id;               /* a BY_ID route: the stored response it names */
	/* what admission found */
	char *model;                 /* the served name (an alias resolved) */
	char *alias;                 /* the client's name when it was an alias */
	bool stream;                 /* the client asked for "stream": true */
	bool usage_added;            /* stream_options.include_usage was added */
	long max_tokens;             /* -1 not given */
	char *prev_id;               /* previous_response_id, or NULL */
	bool store;                  /* the answer is stored by its backend */
	char *up_path;               /* a BY_ID route: the path (and query) to send, a
				      * translated request's (xlate.h), a fork's copy;
				      * written by: admission, xlate, exchange */
	long timeout_ms;             /* X-Infergate-Timeout-Ms, 0 none */
	uint64_t deadline_ms;        /* when that passes (monotonic), 0 none */
	struct ig_key *key;          /* the client's key (held): limits, usage */
	/* its key's rate limits */
	long tok_estimate;           /* its work in tokens: its tpm charge */
	long prompt_estimate;        /* of it, its prompt (0 when not needed) */
	long tok_charge;             /* what it was charged (admitted), 0 none */
	bool tok_settled;            /* the charge was corrected by the usage */
	bool rl_shown;               /* the x-ratelimit-* values below are set */
	long rl_req_left, rl_tok_left;
	uint64_t rl_req_reset_ms, rl_tok_reset_ms;
	struct ig_admission_error err;
	char *answer;                /* the gateway's own answer (a 200 JSON body: /tokenize), NULL
				      * none; taken over by: proxy; written by: proxy */
};

void ig_admission_init(struct ig_admission *a);
/* Lets go of what it holds (its key, its charge settled by `ok`) and frees
 * its strings. */
void ig_admission_free(struct ig_gw *gw, struct ig_admission *a, bool ok);

/* Whose request it is, whose share it counts against (the same, or the
 * one shared key with scheduling fifo) and its class (X-Infergate-Priority,
 * else the key's default, else normal): into w->q. Returns 0, or -1 with
 * a->err set. */
int ig_admission_classify(struct ig_gw *gw, struct ig_admission *a, struct MHD_Connection *conn,
			  struct ig_waiter *w);
/* Checks and reads the body (parsed: its parse, taken; NULL with jerr when
 * it did not parse), rewriting it in `body` where needed; fills a and what
 * the policy needs in w->pick. Returns 0, or -1 with a->err set. */
int ig_admission_body(struct ig_gw *gw, struct ig_admission *a, struct MHD_Connection *conn, struct ig_buf *body,
		      json_t *parsed, const json_error_t *jerr, struct ig_waiter *w);
/* A stored response's route (a->resp_id): the path sent upstream, the
 * backend that holds it (w->pick.pinned) and its model. Returns 0, or -1
 * with a->err set (OpenAI's 404). */
int ig_admission_by_id(struct ig_gw *gw, struct ig_admission *a, struct MHD_Connection *conn, struct ig_waiter *w);
/* What the key's entry allows: the model (403) and its rates (429).
 * Returns 0 (its token charge taken), or -1 with a->err set. */
int ig_admission_limits(struct ig_gw *gw, struct ig_admission *a);
/* Corrects the key's token charge by what the answer used (its usage
 * when known; without, all of it for an answer that went well, nothing for
 * one that failed). Once. */
void ig_admission_settle(struct ig_admission *a, long prompt_tokens, long completion_tokens, bool ok);
/* Whose stored responses the request may name: its key's, with keys on;
 * anyone's (0) without. */
uint32_t ig_admission_owner(const struct ig_gw *gw, const struct ig_admission *a);

#endif
