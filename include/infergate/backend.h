/* A backend (one inference server) and the table of them. Counters that the
 * router reads are atomics so that several reactors could share the table;
 * health bookkeeping belongs to the reactor that probes. */
#ifndef IG_BACKEND_H
#define IG_BACKEND_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "infergate/config.h"

enum ig_backend_state {
	IG_BACKEND_UP,       /* serving: probes and requests succeed */
	IG_BACKEND_DOWN,     /* `fall` consecutive failures, or never seen up */
};

struct ig_backend {
	int id;                 /* index in the table, stable for the process */
	char *url;              /* normalised base URL, no trailing slash */
	long weight;
	long max_inflight;      /* 0 = unlimited */
	_Atomic int state;      /* enum ig_backend_state */
	atomic_long inflight;   /* requests through this gateway, now */
	atomic_ulong served;    /* responses relayed (any status) */
	atomic_ulong failures;  /* connect errors, resets, timeouts, 502/503/504 */
	atomic_ulong retried;   /* requests moved from here to another backend */
	atomic_ulong aborted;   /* upstream transfers cut because the client left */
	/* health, owned by the probing reactor */
	int consec_ok, consec_fail;
	int seen_up;            /* ever been up: first success counts as `rise` */
	int probing;
	uint64_t next_probe_ms;
	uint64_t last_probe_ms; /* when the last probe finished (monotonic) */
	int last_probe_ok;
	long last_probe_status; /* HTTP status, 0 when none */
	double last_probe_latency_ms;
	char last_probe_error[256];
	uint64_t models_at_ms;  /* when models were last fetched */
	json_t *models;         /* the backend's /v1/models "data" array, or NULL */
};

struct ig_pool {
	struct ig_backend **v;
	size_t n;
	atomic_uint rotor;      /* rotating start for ties and round-robin */
};

/* Creates the table from the configuration. Returns 0 or -1. */
int ig_pool_init(struct ig_pool *pool, const struct ig_config *cfg);
void ig_pool_free(struct ig_pool *pool);
size_t ig_pool_healthy(const struct ig_pool *pool);
const char *ig_backend_state_name(int state);

#endif
