/* The clients the gateway keeps state for, by API key: what the keys file
 * and the configuration say of each (name, models, weight, cap, default
 * class), its rate-limit buckets and its usage. The scheduler reads a
 * key's weight and cap; admission.c its buckets and models; metrics its
 * usage. Under the gateway's lock.
 * Not here: the keys file itself (keyset.c), the bucket arithmetic
 * (ratelimit.c), the queues (scheduler.c). */
#ifndef IG_CLIENTS_H
#define IG_CLIENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "keys/keyset.h"
#include "keys/ratelimit.h"

/* Requests of one key that ended with one status. */
struct ig_statcount {
	unsigned status;
	uint64_t n;
};

/* A client identity that shares, limits and usage are kept for: the hex
 * SHA-256 of its bearer token ("" without one), with what the keys file
 * and the configuration say of it. Keys in the keys file (or in
 * api_key_settings) live as long as they are configured; others only while
 * a request holds them. */
struct ig_key {
	char digest[65];
	const struct ig_keyent *ent; /* its keys-file entry (name, models, limits),
				      * NULL when not in the file */
	long weight;                 /* share within a class, 1.. */
	long max_inflight;           /* 0 = no cap */
	int klass;                   /* its default class, -1 none */
	long inflight;               /* its requests on a backend now (dispatch.c's) */
	size_t waiting;              /* its requests in the queues, every model (scheduler.c's) */
	/* With a cluster, this gateway's part of max_inflight, what the other
	 * gateways' buckets held and the retry floor are the cluster's view's
	 * (cluster_view.h: ig_cluster_key_capped and the rest), by digest. */
	size_t refs;                 /* requests that hold it */
	bool configured;             /* named in the configuration: kept */
	uint64_t completed;          /* requests that left the queue for a backend */
	struct ig_bucket rpm, tpm;   /* its rate limits (limit 0: none); with a
				      * cluster, this gateway's share of them */
	/* With a cluster: this gateway's shares of the key's rpm and tpm (1
	 * alone; set by ig_clients_share), the demand it saw since the last key
	 * sync (admissions tried: requests, tokens; admission.c's) and that
	 * demand per second, smoothed (ig_clients_demand). */
	double share_req, share_tok;
	double dem_req, dem_tok;
	double rate_req, rate_tok;
	/* Usage, for /metrics and /admin/keys (keys in the file only). */
	struct ig_statcount *status; /* requests by the status they ended with */
	size_t nstatus, capstatus;
	uint64_t prompt_tokens, completion_tokens;
	uint64_t limited_requests;   /* 429: its rpm */
	uint64_t limited_tokens;     /* 429: its tpm */
	struct ig_key *hnext;        /* hash chain (ig_clients's keys by digest) */
	size_t at;                   /* its index in ig_clients.keys */
};

struct ig_clients {
	struct ig_key **keys;        /* every key known now */
	size_t nkeys, capkeys;
	struct ig_key **ktab;        /* the same by digest: chained, a power of two */
	size_t ktabcap;
};

void ig_clients_init(struct ig_clients *c);
void ig_clients_free(struct ig_clients *c);
/* Takes the keys' settings from the configuration and the keys file (at
 * start and on reload; keys no longer named lose their settings, buckets of
 * keys kept keep their level). Returns 0 or -1 (out of memory). */
int ig_clients_configure(struct ig_clients *c, const struct ig_conf *cfg, const struct ig_keyset *ks,
			 uint64_t now_ms);
/* Forgets every configured setting (before a reload applies new ones). */
void ig_clients_unconfigure(struct ig_clients *c);
/* The key of a digest ("" anonymous), made when missing (weight 1, no cap,
 * no class). NULL when out of memory. */
struct ig_key *ig_clients_get(struct ig_clients *c, const char *digest);
/* Sets k's shares of its limits (1: all of them; cluster.c's), its
 * buckets following: a level above a smaller limit is cut to it. */
void ig_clients_share(struct ig_key *k, double share_req, double share_tok, uint64_t now_ms);
/* The demand k saw over the last dt_s seconds (dem_req, dem_tok: what
 * admission counted) taken into its smoothed rates (rate_req, rate_tok:
 * half the last, half this; below 0.001 per second, none), and counted
 * from 0 again (cluster.c's key sync, which shares the rates). */
void ig_clients_demand(struct ig_key *k, double dt_s);
/* The key of a digest, or NULL. */
struct ig_key *ig_clients_find(const struct ig_clients *c, const char *digest);
/* A request takes / lets go of its key (an unconfigured one goes with its
 * last request). */
static inline void ig_clients_hold(struct ig_key *k)
{
	k->refs++;
}
void ig_clients_release(struct ig_clients *c, struct ig_key *k);
/* Counts a request of k that ended with status. */
void ig_clients_count(struct ig_key *k, unsigned status);

#endif
