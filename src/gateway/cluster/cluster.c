/* Several gateways as one, through Redis (cluster.h).
 *
 * In Redis (every key under "infergate:"; each one expires):
 *   infergate:gw:NAME    the random token of the gateway that holds NAME,
 *                        refreshed every sync, gone 3 periods after the
 *                        last one (so a name is held by one live gateway)
 *   infergate:gws        sorted set: NAME scored by Redis's clock (ms) at
 *                        its last sync; members older than 3 periods leave
 *   infergate:resp:ID    "OWNER URL": the backend that holds stored
 *                        response ID, for the response's life (24 h)
 *   channel infergate:resp   "NAME OWNER URL ID", published with each one
 *   infergate:kd:DIGEST  hash: per gateway and epoch "NAME@EPOCH", "REQ TOK
 *                        LREQ LTOK": its demand for the key's limits in
 *                        that epoch of 500 ms (requests and tokens per
 *                        second) and what its share's buckets held; each
 *                        gateway takes a share of the key's rpm and tpm in
 *                        proportion to its demand (ig_cluster_share), from
 *                        the same epoch as every other, so the fleet
 *                        admits no more than the limit, and no request
 *                        waits on Redis: a gateway admits from its share
 *   infergate:kactive    sorted set: keys some gateway asked for lately
 * One sync is one script (Redis's TIME decides who is live; the gateways'
 * clocks are never compared). Two connections: one for commands, one
 * subscribed to the channels. Files and batches (their leases, fencing
 * counter and channel infergate:data) are batches_lease.c's, which this
 * file tells what the others announce through hooks (cluster.h).
 *
 * The cluster's modules: this file (the start, which may block; the tick;
 * the stop; the asks of other modules; the reports), cluster_sync.c (the
 * Redis I/O: the scripts and their replies, the subscriptions, the
 * outbox), cluster_state.c (the view made from this gateway's tables and
 * put in force), cluster_share.c (the arithmetic, pure) and
 * cluster_view.c (the view's readers). */
#include "config.h"
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "cluster/cluster_state.h"
#include "cluster/cluster_sync.h"
#include "gateway.h"
#include "infergate/list.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/redis.h"
#include "net/redismsg.h"
#include "net/rx.h"
#include "obs/stats.h"

/* Leaving: the name and the membership go at once (only if still ours),
 * and the leases of the batches it ran (ARGV[3]...: "ID FENCE"), so that
 * another gateway takes them at its next round rather than after lease_s. */
static const char leave_script[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end\n"
	"redis.call('ZREM', KEYS[2], ARGV[2])\n"
	"for i = 4, #ARGV, 2 do\n"
	"  local k = 'infergate:blease:' .. ARGV[i]\n"
	"  if redis.call('GET', k) == ARGV[3] .. ' ' .. ARGV[i+1] then redis.call('DEL', k) end\n"
	"end\n"
	"return 1\n";

bool ig_cluster_configured(const struct ig_gw *gw)
{
	return gw->cfg->cluster_redis && *gw->cfg->cluster_redis;
}

void ig_cluster_lease_held(struct ig_gw *gw, const char *id, uint64_t fence)
{
	struct ig_cluster *c = gw->cluster;
	char **v = c ? realloc(c->leases, (c->nleases + 2) * sizeof(*v)) : NULL;
	if (!v)
		return;
	c->leases = v;
	if ((c->leases[c->nleases] = strdup(id)) && (c->leases[c->nleases + 1] = ig_strdupf("%llu", (unsigned long long)fence)))
		c->nleases += 2;
}

void ig_cluster_hooks(struct ig_gw *gw, const struct ig_cluster_hooks *hooks)
{
	if (gw->cluster) {
		gw->cluster->hook_message = hooks ? hooks->message : NULL;
		gw->cluster->hook_joined = hooks ? hooks->joined : NULL;
		gw->cluster->hook_left = hooks ? hooks->left : NULL;
	}
}

bool ig_cluster_joined(const struct ig_gw *gw)
{
	return gw->cluster && gw->cluster->joined;
}

const char *ig_cluster_holder(const struct ig_gw *gw)
{
	return gw->cluster ? gw->cluster->holder : "";
}

int ig_cluster_command(struct ig_gw *gw, ig_redis_reply_fn *fn, void *privdata, int argc, const char **argv,
		       const size_t *lens)
{
	struct ig_cluster *c = gw->cluster;
	if (!c || !c->joined)
		return -1;
	return ig_redis_argv(c->cmd, fn, privdata, argc, argv, lens);
}

static void ask_free(struct ask *a)
{
	for (int i = 0; a->argv && i < a->argc; i++)
		free(a->argv[i]);
	free(a->argv);
	free(a->lens);
	free(a);
}

int ig_cluster_ask(struct ig_gw *gw, ig_redis_reply_fn *fn, void *privdata, int argc, const char **argv,
		   const size_t *lens)
{
	struct ig_cluster *c = gw->cluster;
	if (!c || !c->joined || c->nasks >= OUTBOX_MAX)
		return -1;
	struct ask *a = calloc(1, sizeof(*a));
	if (!a || !(a->argv = calloc((size_t)argc, sizeof(*a->argv))) ||
	    !(a->lens = malloc((size_t)argc * sizeof(*a->lens)))) {
		if (a)
			ask_free(a);
		return -1;
	}
	a->argc = argc;
	for (int i = 0; i < argc; i++) {
		if (!(a->argv[i] = malloc(lens[i] + 1))) {
			ask_free(a);
			return -1;
		}
		memcpy(a->argv[i], argv[i], lens[i]);
		a->argv[i][lens[i]] = '\0';
		a->lens[i] = lens[i];
	}
	a->fn = fn;
	a->arg = privdata;
	ig_list_append(&c->asks, &a->link);
	c->nasks++;
	if (gw->threaded)
		ig_rx_wake(ig_gw_home(gw));
	return 0;
}

/* The asks sent while Redis is up; failed (their callbacks told NULL) when
 * this gateway serves alone, or at the stop (fail). */
static void flush_asks(struct ig_cluster *c, bool fail)
{
	struct ask *a;
	while ((a = IG_LIST_FIRST(&c->asks, struct ask, link))) {
		if (!fail && ig_redis_argv(c->cmd, a->fn, a->arg, a->argc, (const char **)a->argv, a->lens) < 0)
			return;
		if (fail && a->fn)
			a->fn(NULL, a->arg);
		ig_list_del(&a->link);
		c->nasks--;
		ask_free(a);
	}
}

static json_t *report_json(void *arg);
static void report_prom(void *arg, struct ig_buf *o);

/* ---- start, tick, stop ---- */

/* The host as a numeric address (the reactor never resolves names).
 * Returns 0 or -1. */
static int resolve(struct ig_cluster *c)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	if (getaddrinfo(c->url.host, NULL, &hints, &res) != 0 || !res)
		return -1;
	const void *a = res->ai_family == AF_INET6 ? (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr
						    : (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr;
	int ok = inet_ntop(res->ai_family, a, c->addr, sizeof(c->addr)) != NULL;
	freeaddrinfo(res);
	return ok ? 0 : -1;
}

/* A blocking command on the start-up connection (NULL: failed). */
static redisReply *ask(struct ig_redis *rc, int argc, const char **argv)
{
	size_t lens[8];
	for (int i = 0; i < argc && i < 8; i++)
		lens[i] = strlen(argv[i]);
	return ig_redis_call(rc, argc, argv, lens);
}

/* At start: is the name held by a live gateway? Its key is refreshed every
 * sync while it lives and expires 3 periods after it died: watched for up
 * to 4 periods, a key whose time to live goes up is alive. Returns 1
 * (taken), 0 (free), -1 (Redis did not answer: decided later). */
static int name_taken(struct ig_cluster *c, struct ig_redis *rc)
{
	long long last = -3;
	uint64_t until = ig_now_ms() + 4 * c->sync_ms + 100;
	for (;;) {
		const char *argv[] = {"PTTL", c->name_key};
		redisReply *r = ask(rc, 2, argv);
		if (!r || r->type != REDIS_REPLY_INTEGER) {
			if (r)
				freeReplyObject(r);
			return -1;
		}
		long long ttl = r->integer;
		freeReplyObject(r);
		if (ttl == -2)
			return 0; /* no such key */
		if (last != -3 && ttl > last)
			return 1; /* refreshed: alive */
		last = ttl;
		if (ig_now_ms() >= until)
			return 0;
		struct timespec ts = {0, (long)(c->sync_ms / 2 > 5 ? c->sync_ms / 2 : 5) * 1000000L};
		nanosleep(&ts, NULL);
	}
}

int ig_cluster_start(struct ig_gw *gw)
{
	if (!ig_cluster_configured(gw))
		return 0;
	const struct ig_conf *cfg = gw->cfg;
	struct ig_cluster *c = calloc(1, sizeof(*c));
	char *err = NULL;
	if (!c)
		return -1;
	gw->cluster = c;
	c->gw = gw;
	ig_cluster_sync_bad_init(c);
	ig_list_init(&c->outbox);
	ig_list_init(&c->asks);
	if (ig_redis_url_parse(cfg->cluster_redis, &c->url, &err) < 0) { /* checked by conf.c */
		ig_log_error("cluster.redis_url: %s", err);
		free(err);
		return -2;
	}
	c->shown = ig_redis_url_shown(&c->url);
	c->name = strdup(cfg->cluster_name);
	c->name_key = ig_strdupf(PREFIX "gw:%s", cfg->cluster_name);
	c->sync_ms = (uint64_t)cfg->cluster_sync_ms;
	c->live_ms = 3 * c->sync_ms;
	c->st = (struct ig_cluster_state){.gw = gw, .name = c->name, .sync_ms = c->sync_ms, .live_last = 0};
	unsigned char rnd[16];
	if (RAND_bytes(rnd, sizeof(rnd)) != 1)
		return -1;
	for (int i = 0; i < 16; i++)
		snprintf(c->token + 2 * i, 3, "%02x", rnd[i]);
	c->holder = ig_strdupf("%s %s", c->name, c->token);
	if (resolve(c) < 0) {
		ig_log_error("cluster.redis_url: cannot resolve the host '%s'", c->url.host);
		return -2;
	}
	if (c->url.tls) {
		struct ig_redis_tls_files f = {cfg->cluster_redis_tls_ca, cfg->cluster_redis_tls_cert,
					       cfg->cluster_redis_tls_key, cfg->cluster_redis_tls_name};
		if (!(c->tls = ig_redis_tls_new(&f, c->url.host, &err))) { /* checked by conf.c */
			ig_log_error("cluster.redis_url: TLS: %s", err);
			free(err);
			return -2;
		}
	}
	/* Blocking, before the loops run: is Redis there, and the name free? */
	char *why = NULL;
	bool refused = false;
	struct ig_redis *rc = ig_cluster_sync_blocking(c, 1000, &why, &refused);
	if (!rc && refused) {
		ig_log_error("cluster.redis_url: Redis at %s %s", c->shown, why);
		free(why);
		return -2;
	}
	int taken = rc ? name_taken(c, rc) : -1;
	if (taken == 1) {
		ig_log_error("cluster.name: '%s' is held by a live gateway (Redis key %s is refreshed): give each "
			     "gateway its own name", c->name, c->name_key);
		ig_redis_free(rc);
		return -2;
	}
	if (taken < 0)
		ig_log_warn("cluster: Redis at %s does not answer (%s): serving alone until it does", c->shown,
			    why ? why : "no reply");
	free(why);
	ig_redis_free(rc);
	uint64_t timeout = c->live_ms > 500 ? c->live_ms : 500;
	if (ig_cluster_sync_connect(c, timeout) < 0 ||
	    ig_stats_register(gw, &(struct ig_metrics_source){"cluster", report_json, report_prom, c}) < 0)
		return -1;
	return 0;
}

void ig_cluster_tick(struct ig_gw *gw, uint64_t now)
{
	struct ig_cluster *c = gw->cluster;
	if (!c)
		return;
	ig_redis_tick(c->cmd, now);
	ig_redis_tick(c->sub, now);
	if (!c->joined)
		flush_asks(c, true);
	ig_cluster_sync_subscribe(c);
	if (ig_redis_state(c->cmd) != IG_REDIS_UP)
		return;
	if (!c->syncing && now >= c->next_sync_ms)
		ig_cluster_sync_send(c, now);
	if (c->joined && !c->keysyncing && now >= c->next_keys_ms) {
		c->next_keys_ms = now + KEY_EPOCH_MS / 2; /* each epoch written at least once */
		ig_cluster_sync_keys(c, now);
	}
	if (c->joined && now - c->last_ok_ms > c->live_ms)
		ig_cluster_sync_joined(c, false, "no sync answered for 3 periods");
	ig_cluster_sync_flush(c);
	if (c->joined)
		flush_asks(c, false);
}

void ig_cluster_stop(struct ig_gw *gw)
{
	struct ig_cluster *c = gw->cluster;
	if (!c)
		return;
	gw->cluster = NULL;
	ig_stats_unregister(gw, c);
	ig_redis_free(c->cmd);
	ig_redis_free(c->sub);
	flush_asks(c, true);
	/* Leave at once (blocking: the loops are over), so that a restart
	 * under the same name is not refused and the others see it go. */
	if (c->joined) {
		struct ig_redis *rc = ig_cluster_sync_blocking(c, 300, NULL, NULL);
		const char **argv = calloc(8 + c->nleases, sizeof(*argv));
		size_t *lens = calloc(8 + c->nleases, sizeof(*lens));
		if (rc && argv && lens) {
			redisReply *r;
			const char *head[] = {"EVAL", leave_script, "2", c->name_key, PREFIX "gws", c->token, c->name,
					      c->holder};
			memcpy(argv, head, sizeof(head));
			for (size_t i = 0; i < c->nleases; i++)
				argv[8 + i] = c->leases[i];
			for (size_t i = 0; i < 8 + c->nleases; i++)
				lens[i] = strlen(argv[i]);
			if ((r = ig_redis_call(rc, (int)(8 + c->nleases), argv, lens)))
				freeReplyObject(r);
		}
		free(argv);
		free(lens);
		ig_redis_free(rc);
	}
	for (size_t i = 0; i < c->nleases; i++)
		free(c->leases[i]);
	free(c->leases);
	struct shared_resp *s, *tmp;
	IG_LIST_FOREACH_SAFE(s, tmp, &c->outbox, struct shared_resp, link) {
		free(s->message);
		free(s->key);
		free(s->value);
		free(s);
	}
	ig_cluster_state_free(&c->st);
	ig_redis_url_free(&c->url);
	ig_redis_tls_free(c->tls);
	free(c->shown);
	free(c->name);
	free(c->name_key);
	free(c->holder);
	free(c->members);
	free(c->members_logged);
	free(c->ksent);
	free(c->active);
	free(c);
}

/* ---- reports ---- */

/* The "cluster" object of /health/backends. */
static json_t *report_json(void *arg)
{
	const struct ig_cluster *c = arg;
	uint64_t now = ig_now_ms();
	json_t *members = json_array();
	for (size_t i = 0; c->joined && i < c->nmembers; i++)
		json_array_append_new(members, json_pack("{s:s, s:I}", "name", c->members[i].name, "age_ms",
							 (json_int_t)c->members[i].age_ms));
	json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:b, s:o, s:I, s:o, s:f, s:I, s:I, s:I, s:I, s:I}",
			 "name", c->name, "redis_url", c->shown,
			 "redis", ig_redis_state_name(ig_redis_state(c->cmd)),
			 "joined", c->joined, "name_conflict", c->conflict, "members", members,
			 "sync_ms", (json_int_t)c->sync_ms,
			 "last_sync_age_ms", c->last_ok_ms ? json_integer((json_int_t)(now - c->last_ok_ms)) : json_null(),
			 "sync_rtt_ms", c->rtt_ms, "syncs_ok", (json_int_t)c->syncs_ok,
			 "syncs_failed", (json_int_t)c->syncs_failed, "responses_shared", (json_int_t)c->resp_shared,
			 "responses_learned", (json_int_t)c->resp_learned, "responses_unshared",
			 (json_int_t)(c->resp_dropped + c->nout));
	/* the key sync: how many there are, and how many keys the last one carried */
	json_object_set_new(o, "key_syncs", json_integer((json_int_t)c->key_syncs));
	json_object_set_new(o, "keys_synced", json_integer((json_int_t)c->nksent));
	/* batches and files: messages sent to the others and taken from them */
	json_object_set_new(o, "data_shared", json_integer((json_int_t)c->data_shared));
	json_object_set_new(o, "data_learned", json_integer((json_int_t)c->data_learned));
	/* values from Redis refused, by kind (only those seen) */
	json_t *bad = json_object();
	for (size_t i = 0; i < c->nbad; i++)
		if (c->bad[i].n)
			json_object_set_new(bad, c->bad[i].kind, json_integer((json_int_t)c->bad[i].n));
	json_object_set_new(o, "bad_messages", bad);
	return o;
}

/* Its infergate_cluster_* series for /metrics. */
static void report_prom(void *arg, struct ig_buf *o)
{
	const struct ig_cluster *c = arg;
	ig_buf_printf(o, "# HELP infergate_cluster_redis_up 1 when the connection to Redis is up.\n"
			 "# TYPE infergate_cluster_redis_up gauge\ninfergate_cluster_redis_up %d\n",
		      ig_redis_state(c->cmd) == IG_REDIS_UP);
	ig_buf_printf(o, "# HELP infergate_cluster_joined 1 when this gateway shares with the others, 0 alone.\n"
			 "# TYPE infergate_cluster_joined gauge\ninfergate_cluster_joined %d\n", c->joined);
	ig_buf_printf(o, "# HELP infergate_cluster_members Live gateways at the last sync, this one included.\n"
			 "# TYPE infergate_cluster_members gauge\ninfergate_cluster_members %zu\n",
		      c->joined ? c->nmembers : 0);
	ig_buf_printf(o, "# HELP infergate_cluster_syncs_total Syncs with Redis, by result.\n"
			 "# TYPE infergate_cluster_syncs_total counter\n"
			 "infergate_cluster_syncs_total{result=\"ok\"} %llu\n"
			 "infergate_cluster_syncs_total{result=\"failed\"} %llu\n",
		      (unsigned long long)c->syncs_ok, (unsigned long long)c->syncs_failed);
	ig_buf_printf(o, "# HELP infergate_cluster_sync_rtt_seconds The last sync's round trip to Redis.\n"
			 "# TYPE infergate_cluster_sync_rtt_seconds gauge\ninfergate_cluster_sync_rtt_seconds %.6f\n",
		      c->rtt_ms / 1000.0);
	ig_buf_printf(o, "# HELP infergate_cluster_responses_total Stored responses' backends shared with the "
			 "others (shared) and learned from them (learned).\n"
			 "# TYPE infergate_cluster_responses_total counter\n"
			 "infergate_cluster_responses_total{direction=\"shared\"} %llu\n"
			 "infergate_cluster_responses_total{direction=\"learned\"} %llu\n",
		      (unsigned long long)c->resp_shared, (unsigned long long)c->resp_learned);
	ig_buf_printf(o, "# HELP infergate_cluster_bad_messages_total Replies and messages from Redis refused and "
			 "dropped, by kind of value.\n"
			 "# TYPE infergate_cluster_bad_messages_total counter\n");
	for (size_t i = 0; i < c->nbad; i++)
		ig_buf_printf(o, "infergate_cluster_bad_messages_total{kind=\"%s\"} %llu\n", c->bad[i].kind,
			      (unsigned long long)c->bad[i].n);
}
