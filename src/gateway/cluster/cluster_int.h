/* The cluster's state, shared by its modules only (cluster.c, its start,
 * tick and stop; cluster_sync.c, its Redis I/O): struct ig_cluster and
 * the limits on what it keeps. Nothing else includes this file. All on
 * reactor 0 (what other reactors hand it goes through its outbox), under
 * the gateway's lock. */
#ifndef IG_CLUSTER_INT_H
#define IG_CLUSTER_INT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster_state.h"
#include "infergate/list.h"
#include "net/redis.h"

struct ig_gw;

#define PREFIX "infergate:"
#define OUTBOX_MAX 100000  /* responses waiting to be shared, at most */
#define KEY_EPOCH_MS 500   /* the key sync's epoch, the same for every gateway */
#define ACTIVE_MAX (1u << 20) /* keys active across the gateways a key sync may name */
#define DATA_CHANNEL PREFIX "data"

/* Something to tell the others: SET key value PX ttl (when key), then
 * PUBLISH message on channel. */
struct shared_resp {
	struct ig_list link;
	const char *channel;
	char *message;      /* infergate:resp: "NAME OWNER URL ID"; infergate:data: "KIND NAME ID ..." */
	char *key, *value;  /* infergate:resp:ID, "OWNER URL" */
	uint64_t ttl_ms;
};

/* A command another module asked for (ig_cluster_ask), sent at reactor
 * 0's next turn. */
struct ask {
	struct ig_list link;
	int argc;
	char **argv;
	size_t *lens;
	ig_redis_reply_fn *fn;
	void *arg;
};

struct member {
	char name[80];
	long age_ms;
};

/* Values from Redis refused, by kind (ig_cluster_count_bad): this file's
 * kinds from the start (their series at 0), others as they come; the last
 * slot counts any beyond. */
#define BAD_KINDS_MAX 32
struct bad_count {
	const char *kind;   /* a string literal */
	uint64_t n;
};

struct ig_cluster {
	struct ig_gw *gw;
	struct ig_redis_url url;
	struct ig_redis_tls *tls;    /* rediss://: its settings; NULL: plain */
	char *shown;                 /* the URL without its password */
	char addr[INET6_ADDRSTRLEN]; /* resolved at start */
	char *name, *name_key;
	char token[33];              /* this process's, random */
	char *holder;                /* "NAME TOKEN": what a batch's lease holds */
	bool was_joined;             /* joined once: a later join reads data_dir again */
	uint64_t sync_ms, live_ms;
	struct ig_redis *cmd, *sub;
	bool syncing, subscribed, joined, conflict;
	bool started;                /* the first state was logged */
	uint64_t next_sync_ms, last_ok_ms;
	uint64_t sync_sent_us;
	double rtt_ms;
	uint64_t syncs_ok, syncs_failed;
	struct member *members;
	size_t nmembers;
	char *members_logged;        /* "a, b": logged when it changes */
	struct ig_list outbox;
	size_t nout;
	struct ig_list asks;         /* ig_cluster_ask's, not sent yet */
	size_t nasks;
	/* shared limits */
	bool keysyncing;
	uint64_t next_keys_ms, keys_at_ms;
	char (*ksent)[65];           /* the keys of the key sync in flight */
	size_t nksent, capksent;
	char (*active)[65];          /* keys active at some gateway (last key sync) */
	size_t nactive;
	uint64_t others_wait_ms;     /* since when another has held requests waiting at
				      * every sync (0: none at the last one) */
	uint64_t key_syncs;
	uint64_t resp_shared, resp_learned, resp_dropped;
	uint64_t data_shared, data_learned;  /* batch and file messages */
	char **leases;               /* at the stop: "ID", "FENCE" of the batches it ran */
	/* what batches_lease.c is told (cluster.h's struct ig_cluster_hooks,
	 * copied: NULL each, none) */
	void (*hook_message)(struct ig_gw *gw, char kind, const char *rest);
	void (*hook_joined)(struct ig_gw *gw);
	void (*hook_left)(struct ig_gw *gw);
	size_t nleases;
	struct bad_count bad[BAD_KINDS_MAX];
	size_t nbad;
	/* what the view is made from (cluster_state.h): the last count of
	 * gateways, Redis's clock, what the last state claimed; and whether
	 * some gateway holds high or normal requests waiting (st.hurry: sync
	 * four times as often, so that the slots they wait for change hands a
	 * sync sooner) */
	struct ig_cluster_state st;
};

#endif
