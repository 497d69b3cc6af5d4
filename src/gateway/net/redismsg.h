/* What comes back from Redis, checked before anything of it is used:
 * Redis is shared with other gateways and may be written by anyone who can
 * reach it (issue 46), so its replies and messages are input like a
 * client's. Pure functions: no I/O, no gateway; each takes a reply or a
 * string with its length (Redis's strings may hold NUL bytes) and gives a
 * typed result, or -1 and `bad`: the kind of value refused (a label of
 * infergate_cluster_bad_messages_total) and why, naming the field and the
 * bad value. What is done with a refusal is the caller's (cluster.c's
 * ig_cluster_count_bad: counted, logged once per kind, the value dropped).
 * Here: the sync's reply and each gateway's state in it, the key sync's
 * figures, the frames of a subscription, infergate:resp's messages and
 * infergate:data's envelope, a gateway's name, strict numbers. Not here:
 * what a data message says of a batch or a file (batches_lease.c), an
 * Idempotency-Key's value (idem_share.c), the connection (redis.c). */
#ifndef IG_REDISMSG_H
#define IG_REDISMSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

/* The kinds of values refused (the metric's `kind` label). */
#define IG_BAD_SYNC "sync"                  /* the sync's reply: its shape, Redis's clock, the members */
#define IG_BAD_SYNC_STATE "sync_state"      /* a gateway's state in the sync's reply */
#define IG_BAD_KEY_SYNC "key_sync"          /* the key sync's reply, or one key's figures in it */
#define IG_BAD_RESP "resp_message"          /* infergate:resp: a stored response's backend */
#define IG_BAD_DATA "data_message"          /* infergate:data: its kind and its sender */
#define IG_BAD_DATA_BATCH "data_batch"      /* "b": a batch changed */
#define IG_BAD_DATA_PROGRESS "data_progress" /* "p": a batch's progress */
#define IG_BAD_DATA_CANCEL "data_cancel"    /* "c": cancel a batch */
#define IG_BAD_DATA_FILE "data_file"        /* "f", "d": a file stored or deleted */
#define IG_BAD_BATCH_LEASE "batch_lease"    /* the batches' lease round's reply */
#define IG_BAD_IDEM "idempotency"           /* what Redis holds under an Idempotency-Key */

/* Every kind above, for the metric's series at 0. */
extern const char *const ig_redismsg_kinds[];
extern const size_t ig_redismsg_nkinds;

/* A refusal: its kind (one of the above, or the transport's) and why. */
struct ig_redismsg_bad {
	const char *kind;
	char why[200];
};
/* Sets bad (kind and a printf message); returns -1, for `return ig_redismsg_fail(...)`. */
int ig_redismsg_fail(struct ig_redismsg_bad *bad, const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* s[0..n) for a message: what fits in out (cut with "..."), bytes outside
 * printable ASCII as '?' (what Redis holds may be meant for a terminal or
 * a log). Also the connection's (redis.c) for what it drops. */
void ig_redismsg_shown(char *out, size_t outlen, const char *s, size_t n);
/* s (n bytes) as at most `max` printable characters (ig_redismsg_shown),
 * '"' and '\\' too as '?': it is shown between quotes. */
void ig_redismsg_quoted(char *out, size_t size, size_t max, const char *s, size_t n);
/* A reply's shape, for a log line: "array of 3: bulk "message", integer,
 * bulk" (strings cut, their quotes and backslashes as '?'); the
 * connection's (redis.c) for what it drops. */
void ig_redismsg_describe(const redisReply *rep, char *out, size_t size);

/* Strict numbers: the whole of s[0..n), base 10, an optional '-', no
 * space, no '+', no hex; within [min, max]. Returns 0 or -1. */
int ig_redismsg_int(const char *s, size_t n, long long min, long long max, long long *out);
/* The same for a decimal number (digits, '.', an exponent): finite, so
 * never "nan" or "inf", and within [min, max]. */
int ig_redismsg_num(const char *s, size_t n, double min, double max, double *out);

#define IG_REDISMSG_NAME_MAX 64
/* A gateway's name: 1 to 64 letters, digits, '.', '_', ':' or '-' (the
 * rule of cluster.name, conf.c's check uses it too). */
bool ig_redismsg_name_ok(const char *s, size_t n);
/* A key's digest: 64 lower-case hex digits (a SHA-256). */
bool ig_redismsg_digest_ok(const char *s, size_t n);
/* n hex digits, lower case. */
bool ig_redismsg_hex_ok(const char *s, size_t n, size_t want);

/* Fields of a line: s[0..n) split at single spaces. A field is 1 byte or
 * more, none of them a space, a line end or NUL. Returns how many (at most
 * max), or -1 (an empty field: two spaces, a leading or trailing one; more
 * than max; a NUL or a line end). */
struct ig_redismsg_field {
	const char *p;
	size_t n;
};
int ig_redismsg_fields(const char *s, size_t n, struct ig_redismsg_field *f, size_t max);

/* A string reply's text as a C string: the reply is a string (or a status)
 * with no NUL byte inside. Returns it, or NULL. */
const char *ig_redismsg_str(const redisReply *r);

/* ---- the sync (cluster.c's sync_script) ---- */

#define IG_REDISMSG_MEMBERS_MAX 1024          /* live gateways, at most */
#define IG_REDISMSG_CLOCK_SLACK_MS 60000      /* a member's score ahead of Redis's clock (stepped back) */
#define IG_REDISMSG_STATE_MAX (16u << 20)     /* bytes of one gateway's state */
#define IG_REDISMSG_CLAIM_MAX 1000000000LL    /* slots or requests a line may state */
#define IG_REDISMSG_KEYS_MAX 1000000          /* 'k' lines of all states together (each is kept
					       * while the states are read: about 100 bytes) */
#define IG_REDISMSG_URL_MAX 2047              /* a backend's URL, a model's name */

/* One line of a gateway's state:
 *   'b' URL N               what it may run on backend URL (N >= 1)
 *   'm' MODEL W             W >= 1 high and normal requests waiting for MODEL
 *   'h' MODEL N             the headroom it learned for MODEL (N >= 1)
 *   'k' DIGEST WAIT WEIGHT CLAIM   a key ("-": none) with requests waiting,
 *                           its weight (0 to 1000) and its requests there */
struct ig_state_line {
	char what;
	char name[IG_REDISMSG_URL_MAX + 1]; /* URL, MODEL or DIGEST */
	long long v[3];
};
/* One gateway's state: its name (the first line, "g NAME"), then its
 * lines, read where they are (the reply's string: nothing is copied, so a
 * state costs no memory beyond the reply's). A line of another lower-case
 * letter is skipped (a newer gateway's), anything else refuses the whole
 * state. */
struct ig_state {
	char name[IG_REDISMSG_NAME_MAX + 1];
	const char *text;            /* its lines, after the first */
	size_t len;
	size_t nkeys;                /* of them 'k' lines */
};
struct ig_sync_member {
	char name[IG_REDISMSG_NAME_MAX + 1];
	long long score;             /* Redis's clock (ms) at its last sync */
};
struct ig_sync {
	bool taken;                  /* {-1}: a live gateway holds this one's name */
	long long now;               /* Redis's clock (ms) */
	struct ig_sync_member *members; /* by name */
	size_t nmembers;
	struct ig_state *states;     /* the others' */
	size_t nstates;
};
/* The sync's reply {now, {NAME, SCORE, ...}, {STATE, ...}} or {-1}, for
 * gateway `me` whose live window is live_ms: Redis's clock a positive
 * integer (below 2^53); 1 to IG_REDISMSG_MEMBERS_MAX members, each a valid
 * name once, this gateway among them, each scored within the live window
 * before now (or up to IG_REDISMSG_CLOCK_SLACK_MS after); no more states than other members, each a valid state not
 * named `me` nor as another, with IG_REDISMSG_KEYS_MAX 'k' lines in all. Returns 0 (*out filled, pointing into r:
 * ig_redismsg_sync_free before r is freed) or -1 (bad; nothing to free). */
int ig_redismsg_sync(const redisReply *r, const char *me, long long live_ms, struct ig_sync *out,
		     struct ig_redismsg_bad *bad);
void ig_redismsg_sync_free(struct ig_sync *s);
/* One state's text s[0..n), checked whole. Returns 0 (out points into s)
 * or -1. */
int ig_redismsg_state(const char *s, size_t n, struct ig_state *out, struct ig_redismsg_bad *bad);
/* A checked state's next line from *at (0 first): 1 (*l set), 0 at the end. */
int ig_redismsg_state_next(const struct ig_state *st, size_t *at, struct ig_state_line *l);

/* ---- the key sync (cluster.c's keys_script) ---- */

#define IG_REDISMSG_FIGURE_MAX 1e13  /* a demand per second or a bucket's level (tpm is at most 4e12) */
/* One key's figures, "MREQ MTOK REQ TOK LREQ LTOK": this gateway's demand
 * and every gateway's together (requests and tokens per second), what the
 * others' buckets held. */
struct ig_key_figures {
	double mreq, mtok, req, tok, lreq, ltok;
};
/* The reply's shape for nsent keys: an array of nsent strings and then an
 * array (the active keys). Returns 0 or -1. */
int ig_redismsg_keys(const redisReply *r, size_t nsent, struct ig_redismsg_bad *bad);
/* One key's figures: six numbers, each within [0, IG_REDISMSG_FIGURE_MAX],
 * the whole at least this gateway's part. Returns 0 or -1. */
int ig_redismsg_key_figures(const char *s, size_t n, struct ig_key_figures *f, struct ig_redismsg_bad *bad);
/* The active keys (the reply's last element): an array of digests (64
 * hex) or "-", at most max of them. Returns 0 or -1. */
int ig_redismsg_active(const redisReply *r, size_t max, struct ig_redismsg_bad *bad);

/* ---- subscriptions ---- */

/* A frame on a subscribed connection, for a channel whose values are of
 * `kind`: {"message", CHANNEL, PAYLOAD}: 1, *payload (NUL-terminated, no
 * NUL inside) and *len set; {"subscribe", CHANNEL, N} and the like: 0
 * (nothing to read); anything else -1. */
int ig_redismsg_pubsub(const redisReply *r, const char *kind, const char **payload, size_t *len,
		       struct ig_redismsg_bad *bad);

#define IG_REDISMSG_RESP_ID_MAX 512
/* infergate:resp's "NAME OWNER URL ID": the gateway that stored response
 * ID, its owner (respstore.h's, 0 to 2^32-1) and the backend that holds it. */
struct ig_resp_msg {
	char name[IG_REDISMSG_NAME_MAX + 1];
	uint32_t owner;
	char url[IG_REDISMSG_URL_MAX + 1];
	char id[IG_REDISMSG_RESP_ID_MAX + 1];
};
int ig_redismsg_resp(const char *s, size_t n, struct ig_resp_msg *m, struct ig_redismsg_bad *bad);

#define IG_REDISMSG_DATA_REST_MAX 600   /* ig_cluster_publish's most */
/* infergate:data's "KIND NAME REST": KIND one of b p c f d, NAME a valid
 * name, REST 1 to IG_REDISMSG_DATA_REST_MAX bytes of fields
 * (ig_redismsg_fields). rest points into s. */
struct ig_data_msg {
	char kind;
	char name[IG_REDISMSG_NAME_MAX + 1];
	const char *rest;
	size_t restlen;
};
int ig_redismsg_data(const char *s, size_t n, struct ig_data_msg *m, struct ig_redismsg_bad *bad);
/* The kind of refusal for a data message of KIND (IG_BAD_DATA_*). */
const char *ig_redismsg_data_kind(char kind);

#endif
