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
 * file tells what the others announce through hooks (cluster.h). */
#include "config.h"
#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "backend.h"
#include "clients.h"
#include "cluster.h"
#include "cluster_share.h"
#include "cluster_view.h"
#include "gateway.h"
#include "infergate/list.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "metrics.h"
#include "redis.h"
#include "redismsg.h"
#include "respstore.h"
#include "rx.h"
#include "scheduler.h"

#define PREFIX "infergate:"
#define OUTBOX_MAX 100000  /* responses waiting to be shared, at most */
#define KEY_EPOCH_MS 500   /* the key sync's epoch, the same for every gateway */
#define ACTIVE_MAX (1u << 20) /* keys active across the gateways a key sync may name */

/* A Lua script: the sync. KEYS: the name's key, the members' set; ARGV:
 * this gateway's token, the live window (ms), its name, its state (lines
 * "g NAME"; "b URL N": what it may run on backend URL until its next sync
 * (its requests there, or its cap when higher); "m MODEL W": W high and
 * normal requests it holds waiting for MODEL; "k DIGEST W WEIGHT N": a
 * key's requests waiting here, its weight, and its requests here (or its
 * cap when higher, with a max_inflight); kept under infergate:st:NAME for
 * the live window). Returns {-1} when another
 * gateway holds the name, else {now, {name, score, ...}, {the other live
 * gateways' states}}. */
static const char sync_script[] =
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local cur = redis.call('GET', KEYS[1])\n"
	"if cur and cur ~= ARGV[1] then return {-1} end\n"
	"redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
	"redis.call('SET', 'infergate:st:' .. ARGV[3], ARGV[4], 'PX', ARGV[2])\n"
	"redis.call('ZADD', KEYS[2], now, ARGV[3])\n"
	"redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[2]))\n"
	"redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[2]) * 10)\n"
	"local m = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')\n"
	"local st = {}\n"
	"for i = 1, #m, 2 do\n"
	"  if m[i] ~= ARGV[3] then\n"
	"    local s = redis.call('GET', 'infergate:st:' .. m[i])\n"
	"    if s then st[#st+1] = s end\n"
	"  end\n"
	"end\n"
	"return {now, m, st}\n";

/* The key sync. Demand is written per epoch (KEY_EPOCH_MS of Redis's
 * clock) and every gateway computes its share from the epoch before the
 * last, which every gateway finished writing a whole epoch ago: all read
 * the same figures, so their shares add up to 1 (figures read as they
 * change would not: each would see its own demand new and the others'
 * old). ARGV: this gateway's name, the epoch (ms), then per key DIGEST REQ
 * TOK LREQ LTOK. Returns, per key, "MREQ MTOK REQ TOK LREQ LTOK": this
 * gateway's demand and every gateway's together in that epoch, and what
 * the others' buckets held; then the digests of the keys some gateway
 * asked for within 3 epochs (infergate:kactive): those are sent next time
 * by every gateway, active there or not. */
static const char keys_script[] =
	"local t = redis.call('TIME')\n"
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
	"local len = tonumber(ARGV[2])\n"
	"local ep = math.floor(now / len)\n"
	"local out = {}\n"
	"for i = 3, #ARGV, 5 do\n"
	"  local k = 'infergate:kd:' .. ARGV[i]\n"
	"  redis.call('HSET', k, ARGV[1] .. '@' .. ep, ARGV[i+1] .. ' ' .. ARGV[i+2] .. ' ' .. ARGV[i+3] .. ' ' .. ARGV[i+4])\n"
	"  redis.call('PEXPIRE', k, 60000)\n"
	"  local all = redis.call('HGETALL', k)\n"
	"  local mr, mt, dr, dt, lr, lt = 0, 0, 0, 0, 0, 0\n"
	"  for j = 1, #all, 2 do\n"
	"    local at = string.find(all[j], '@', 1, true)\n"
	"    local fe = at and tonumber(string.sub(all[j], at + 1)) or 0\n"
	"    if fe < ep - 3 then redis.call('HDEL', k, all[j])\n"
	"    elseif fe == ep - 2 then\n"
	"      local v = {}\n"
	"      for w in string.gmatch(all[j+1], '%S+') do v[#v+1] = tonumber(w) end\n"
	"      if #v == 4 then\n"
	"        dr = dr + v[1]; dt = dt + v[2]\n"
	"        if string.sub(all[j], 1, at - 1) == ARGV[1] then mr = v[1]; mt = v[2] else lr = lr + v[3]; lt = lt + v[4] end\n"
	"      end\n"
	"    end\n"
	"  end\n"
	"  out[#out+1] = string.format('%.3f %.3f %.3f %.3f %.3f %.3f', mr, mt, dr, dt, lr, lt)\n"
	"  if tonumber(ARGV[i+1]) > 0 or tonumber(ARGV[i+2]) > 0 then redis.call('ZADD', 'infergate:kactive', now, ARGV[i]) end\n"
	"end\n"
	"redis.call('ZREMRANGEBYSCORE', 'infergate:kactive', '-inf', now - 3 * len)\n"
	"redis.call('PEXPIRE', 'infergate:kactive', 60000)\n"
	"out[#out+1] = redis.call('ZRANGE', 'infergate:kactive', 0, -1)\n"
	"return out\n";

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

/* Something to tell the others: SET key value PX ttl (when key), then
 * PUBLISH msg on channel. */
struct shared_resp {
	struct ig_list link;
	const char *channel;
	char *msg;          /* infergate:resp: "NAME OWNER URL ID"; infergate:data: "KIND NAME ID ..." */
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
	long live_last;              /* gateways at the last sync */
	uint64_t others_wait_ms;     /* since when another has held requests waiting at
				      * every sync (0: none at the last one) */
	bool hurry;                  /* some gateway holds high or normal requests waiting:
				      * sync four times as often (slots they wait for
				      * change hands a sync sooner) */
	uint64_t key_syncs;
	uint64_t resp_shared, resp_learned, resp_dropped;
	uint64_t data_shared, data_learned;  /* batch and file messages */
	long long redis_now_ms;      /* Redis's clock at the last sync */
	char **leases;               /* at the stop: "ID", "FENCE" of the batches it ran */
	const struct ig_cluster_hooks *hooks; /* batches_lease.c's */
	size_t nleases;
	struct bad_count bad[BAD_KINDS_MAX];
	size_t nbad;
	/* what the last state sent claimed (my_state), in force once the
	 * sync's reply says who counted it (cluster_share.c's in_force) */
	struct bclaim *bclaims;      /* by id */
	size_t nbclaims;
	struct kclaim *kclaims;      /* by digest */
	size_t nkclaims;
};

/* What the last state claimed on a backend, and for a key. */
struct bclaim {
	int id;
	long n;
};
struct kclaim {
	char digest[65];
	long n;
};

static const char data_channel[] = PREFIX "data";

bool ig_cluster_configured(const struct ig_gw *gw)
{
	return gw->cfg->cluster_redis && *gw->cfg->cluster_redis;
}

/* ---- state and logs ---- */

/* The kinds of redismsg.h and of the connection (redis.c): their series
 * at 0 from the start. */
static void bad_init(struct ig_cluster *c)
{
	static const char *const wire[] = {"protocol", "oversize", "unsolicited", "pubsub_shape"};
	for (size_t i = 0; i < ig_redismsg_nkinds && c->nbad < BAD_KINDS_MAX - 1; i++)
		c->bad[c->nbad++].kind = ig_redismsg_kinds[i];
	for (size_t i = 0; i < sizeof(wire) / sizeof(wire[0]) && c->nbad < BAD_KINDS_MAX - 1; i++)
		c->bad[c->nbad++].kind = wire[i];
}

void ig_cluster_count_bad(struct ig_cluster *c, const char *kind, const char *detail)
{
	struct bad_count *b = NULL;
	char shown[240];
	for (size_t i = 0; c && i < c->nbad && !b; i++)
		if (strcmp(c->bad[i].kind, kind) == 0)
			b = &c->bad[i];
	if (c && !b && c->nbad < BAD_KINDS_MAX - 1) {
		b = &c->bad[c->nbad++];
		b->kind = kind;
	} else if (c && !b) {
		b = &c->bad[BAD_KINDS_MAX - 1];
		b->kind = "other";
		c->nbad = BAD_KINDS_MAX;
	}
	if (b && b->n++ > 0)
		return; /* logged once per kind: a hostile Redis could fill the log */
	ig_redismsg_shown(shown, sizeof(shown), detail ? detail : "", detail ? strlen(detail) : 0);
	ig_log_warn("cluster: a bad %s from Redis, dropped: %s (logged once; each is counted in "
		    "infergate_cluster_bad_messages_total{kind=\"%s\"})", kind, shown, b ? b->kind : kind);
}

static void split_evenly(struct ig_cluster *c);
static void take_states(struct ig_cluster *c, const struct ig_sync *sts);

static void set_joined(struct ig_cluster *c, bool joined, const char *why)
{
	if (joined == c->joined && c->started)
		return;
	c->started = true;
	c->joined = joined;
	if (!joined) { /* each keeps its part of the limits, the last count seen; the
			* others' requests are no longer seen */
		split_evenly(c);
		take_states(c, NULL);
	}
	if (joined && c->was_joined && c->hooks)
		c->hooks->joined(c->gw); /* what was published while away */
	if (joined)
		c->was_joined = true;
	if (joined)
		ig_log_info("cluster: joined as '%s' through %s", c->name, c->shown);
	else
		ig_log_warn("cluster: serving alone (%s); shared again when Redis at %s answers", why, c->shown);
}

static bool limited(const struct ig_key *k)
{
	return k->ent && (k->ent->rpm || k->ent->tpm);
}

/* A key as the states name it (the anonymous one's digest is ""). */
static const char *key_name(const struct ig_key *k)
{
	return k->digest[0] ? k->digest : "-";
}

static int kclaim_cmp(const void *a, const void *b)
{
	return strcmp(((const struct kclaim *)a)->digest, ((const struct kclaim *)b)->digest);
}

static long claimed_backend(const struct ig_cluster *c, int id)
{
	for (size_t i = 0; i < c->nbclaims; i++)
		if (c->bclaims[i].id == id)
			return c->bclaims[i].n;
	return 0;
}

static long claimed_key(const struct ig_cluster *c, const char *digest)
{
	struct kclaim probe, *at;
	snprintf(probe.digest, sizeof(probe.digest), "%s", digest);
	at = c->nkclaims ? bsearch(&probe, c->kclaims, c->nkclaims, sizeof(probe), kclaim_cmp) : NULL;
	return at ? at->n : 0;
}

/* The keys the view carries: those with rate limits or a max_inflight,
 * and those with requests waiting (their weights weigh in the split). *n:
 * how many; *kp (when not NULL): the keys themselves, in the same order.
 * NULL when there are none or out of memory. */
static struct ig_share_key *mine_keys(struct ig_cluster *c, size_t *n, struct ig_key ***kp)
{
	struct ig_clients *cl = &c->gw->clients;
	struct ig_share_key *v = calloc(cl->nkeys + 1, sizeof(*v));
	struct ig_key **p = kp ? calloc(cl->nkeys + 1, sizeof(*p)) : NULL;
	*n = 0;
	if (!v || (kp && !p)) {
		free(v);
		free(p);
		return NULL;
	}
	for (size_t i = 0; i < cl->nkeys; i++) {
		struct ig_key *k = cl->keys[i];
		if (!limited(k) && k->max_inflight <= 0 && k->waiting == 0)
			continue;
		v[*n] = (struct ig_share_key){.digest = k->digest, .waiting = k->waiting, .inflight = k->inflight,
					      .weight = k->weight, .max_inflight = k->max_inflight,
					      .sent = claimed_key(c, k->digest), .completed = k->completed};
		if (p)
			p[*n] = k;
		(*n)++;
	}
	if (kp)
		*kp = p;
	return v;
}

/* Puts v in force: the readers see it from their next look (cluster_view.h:
 * they read under the lock, as this runs, and keep no pointer past it, so
 * the view it replaces is freed here). */
static void publish(struct ig_cluster *c, struct ig_cluster_view *v)
{
	struct ig_gw *gw = c->gw;
	struct ig_cluster_view *old = gw->cluster_view;
	ig_cluster_view_seal(v);
	gw->cluster_view = v;
	ig_cluster_view_free(old);
	c->hurry = v->hurry;
}

/* A view like the one in force, its limited keys' entries made again from
 * the key sync (fn, for each such key) or at an even split (fn NULL). */
static void rekey(struct ig_cluster *c, void (*fn)(struct ig_cluster *c, struct ig_key *k,
						    struct ig_cluster_view_key *e, void *arg), void *arg)
{
	struct ig_key **kp = NULL;
	size_t n;
	struct ig_share_key *keys = mine_keys(c, &n, &kp);
	struct ig_cluster_view *v = keys ? ig_cluster_share_rekey(c->gw->cluster_view, keys, n) : NULL;
	uint64_t now = ig_now_ms();
	for (size_t i = 0; v && i < n; i++) {
		struct ig_key *k = kp[i];
		if (!limited(k))
			continue;
		if (fn) {
			fn(c, k, &v->keys[i], arg);
		} else {
			double s = ig_cluster_share_key_even(&v->keys[i], k->ent->rpm, c->live_last);
			if (k->share_req != s || k->share_tok != s)
				ig_clients_share(k, s, s, now);
		}
	}
	if (v)
		publish(c, v);
	free(keys);
	free(kp);
}

/* Every limited key at an even split between the last count of live
 * gateways: alone, or before the first key sync. */
static void split_evenly(struct ig_cluster *c)
{
	rekey(c, NULL, NULL);
}

static void on_cmd_state(void *arg, enum ig_redis_state s, const char *why)
{
	struct ig_cluster *c = arg;
	if (s == IG_REDIS_DOWN) {
		c->syncing = false;
		char msg[300];
		snprintf(msg, sizeof(msg), "Redis: %s", why);
		set_joined(c, false, msg);
	}
}

static void on_sub_state(void *arg, enum ig_redis_state s, const char *why IG_UNUSED)
{
	struct ig_cluster *c = arg;
	if (s != IG_REDIS_UP)
		c->subscribed = false;
}

/* What the connections found bad (redis.c's kinds). */
static void on_bad(void *arg, const char *kind, const char *detail)
{
	ig_cluster_count_bad(arg, kind, detail);
}

/* ---- the sync ---- */

static void log_members(struct ig_cluster *c)
{
	struct ig_buf b;
	ig_buf_init(&b);
	for (size_t i = 0; i < c->nmembers; i++)
		ig_buf_printf(&b, "%s%s", i ? ", " : "", c->members[i].name);
	ig_buf_append(&b, "", 1);
	if (!c->members_logged || strcmp(c->members_logged, ig_buf_head(&b)) != 0) {
		ig_log_info("cluster: %zu gateway(s) live: %s", c->nmembers, ig_buf_head(&b));
		free(c->members_logged);
		c->members_logged = strdup(ig_buf_head(&b));
	}
	ig_buf_free(&b);
}

/* The others' state (the sync's third part, as ig_redismsg_sync checked
 * it) and this gateway's, made into the view of them (cluster_share.c);
 * alone (sts NULL): the view of a gateway alone, that still leaves the
 * others it saw last their part of what it shares with them. */
static void take_states(struct ig_cluster *c, const struct ig_sync *sts)
{
	struct ig_gw *gw = c->gw;
	struct ig_share_news news;
	struct ig_share_backend *bv = calloc(gw->fleet.n + 1, sizeof(*bv));
	struct ig_share_model *mv = calloc(gw->sched.n + 1, sizeof(*mv));
	struct ig_share_mine me = {.name = c->name, .backends = bv, .nbackends = gw->fleet.n, .models = mv,
				   .nmodels = gw->sched.n};
	struct ig_share_key *kv = mine_keys(c, &me.nkeys, NULL);
	me.keys = kv;
	if (!bv || !mv || !kv)
		goto out;
	for (size_t i = 0; i < gw->fleet.n; i++) {
		const struct ig_backend *b = gw->fleet.v[i];
		bv[i] = (struct ig_share_backend){.id = b->id, .url = b->url, .inflight = atomic_load(&b->inflight),
						  .sent = claimed_backend(c, b->id), .cur = b->learn.cur,
						  .stated = b->max_inflight == 0 && b->learn.reported > 0};
	}
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		mv[i] = (struct ig_share_model){.name = m->name, .qlen = m->qlen,
						.hn_waiting = m->q[IG_CLASS_HIGH].qlen + m->q[IG_CLASS_NORMAL].qlen};
	}
	struct ig_share_sync sy = {.joined = sts != NULL, .states = sts ? sts->states : NULL,
				   .nstates = sts ? sts->nstates : 0, .live_last = c->live_last,
				   .now_ms = ig_now_ms(), .redis_now_ms = c->redis_now_ms, .sync_ms = c->sync_ms,
				   .prev = gw->cluster_view};
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	if (!v)
		goto out;
	publish(c, v);
	/* what capacity.c learns of a backend whose slots are a total shared
	 * with the others (its module's setter: cluster.c writes none of it) */
	for (size_t i = 0; i < gw->fleet.n; i++) {
		const struct ig_cluster_view_backend *e = ig_cluster_view_backend(v, gw->fleet.v[i]->id);
		ig_capacity_set_shared(&gw->fleet.v[i]->learn, e && e->shared);
	}
	if (news.drain)
		gw->drain_pending = true; /* slots the others let go, or low work they no longer hold back */
out:
	free(bv);
	free(mv);
	free(kv);
}

/* This gateway's state for the others (see sync_script): its name, then
 * per backend what it may run there until its next sync, per model its
 * high and normal requests waiting, per key its requests waiting, weight
 * and in flight (or claimed, with a max_inflight). */
static char *my_state(struct ig_cluster *c)
{
	struct ig_gw *gw = c->gw;
	struct ig_clients *cl = &gw->clients;
	const struct ig_cluster_view *v = gw->cluster_view;
	struct bclaim *bc = calloc(gw->fleet.n + 1, sizeof(*bc));
	struct kclaim *kc = calloc(cl->nkeys + 1, sizeof(*kc));
	size_t nkc = 0;
	struct ig_buf b;
	if (!bc || !kc) {
		free(bc);
		free(kc);
		return NULL;
	}
	ig_buf_init(&b);
	ig_buf_printf(&b, "g %s\n", c->name);
	for (size_t i = 0; i < gw->fleet.n; i++) {
		/* what it may run there until its next sync: its requests, or its
		 * cap when higher (it refills the slots its own requests free:
		 * they are not free for the others to claim) */
		const struct ig_backend *be = gw->fleet.v[i];
		const struct ig_cluster_view_backend *e = ig_cluster_view_backend(v, be->id);
		long n = atomic_load(&be->inflight), cap = e ? e->claim_next : 0;
		if (cap > n)
			n = cap;
		bc[i] = (struct bclaim){be->id, n}; /* in force once the reply says who counted it */
		if (n > 0)
			ig_buf_printf(&b, "b %s %ld\n", gw->fleet.v[i]->url, n);
	}
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		size_t w = m->q[IG_CLASS_HIGH].qlen + m->q[IG_CLASS_NORMAL].qlen;
		if (w > 0 && !strpbrk(m->name, " \n"))
			ig_buf_printf(&b, "m %s %zu\n", m->name, w);
		if (m->headroom.slots > 0 && !strpbrk(m->name, " \n")) /* its learned headroom (headroom.h) */
			ig_buf_printf(&b, "h %s %ld\n", m->name, m->headroom.slots);
	}
	for (size_t i = 0; i < cl->nkeys; i++) {
		const struct ig_key *k = cl->keys[i];
		long claim = k->inflight;
		if (k->max_inflight > 0) {
			const struct ig_cluster_view_key *e = ig_cluster_view_key(v, k->digest);
			if (e && e->claim_next > claim)
				claim = e->claim_next;
			snprintf(kc[nkc].digest, sizeof(kc->digest), "%s", k->digest);
			kc[nkc++].n = claim;
		}
		if (k->waiting > 0 || (k->max_inflight > 0 && claim > 0))
			ig_buf_printf(&b, "k %s %zu %ld %ld\n", key_name(k), k->waiting, k->weight,
				      claim);
	}
	if (nkc)
		qsort(kc, nkc, sizeof(*kc), kclaim_cmp);
	free(c->bclaims);
	free(c->kclaims);
	c->bclaims = bc;
	c->nbclaims = gw->fleet.n;
	c->kclaims = kc;
	c->nkclaims = nkc;
	ig_buf_append(&b, "", 1);
	char *s = strdup(ig_buf_head(&b));
	ig_buf_free(&b);
	return s;
}

static void on_sync(const redisReply *reply, void *privdata)
{
	struct ig_cluster *c = privdata;
	const redisReply *r = reply;
	struct ig_redismsg_bad bad;
	struct ig_sync sy;
	char why[300], shown[200];
	c->syncing = false;
	if (!r)
		return; /* the connection dropped: on_cmd_state said so */
	if (r->type == REDIS_REPLY_ERROR) { /* Redis refused the script (busy, out of memory, ...) */
		c->syncs_failed++;
		ig_redismsg_shown(shown, sizeof(shown), r->str ? r->str : "", r->str ? r->len : 0);
		snprintf(why, sizeof(why), "sync: %s", shown);
		set_joined(c, false, why);
		return;
	}
	if (ig_redismsg_sync(r, c->name, (long long)c->live_ms, &sy, &bad) < 0) {
		/* none of it is read: alone (the last count of gateways' even
		 * split) until a sync is whole again */
		c->syncs_failed++;
		ig_cluster_count_bad(c, bad.kind, bad.why);
		snprintf(why, sizeof(why), "sync: a bad %s from Redis", bad.kind);
		set_joined(c, false, why);
		return;
	}
	if (sy.taken) {
		c->syncs_failed++;
		if (!c->conflict)
			ig_log_error("cluster: the name '%s' is held by another live gateway (%s%s): this one serves "
				     "alone until it is free; give each gateway its own cluster.name", c->name, PREFIX "gw:",
				     c->name);
		c->conflict = true;
		set_joined(c, false, "its name is taken");
		return;
	}
	c->conflict = false;
	c->syncs_ok++;
	c->last_ok_ms = ig_now_ms();
	c->rtt_ms = (double)(ig_now_us() - c->sync_sent_us) / 1000.0;
	struct member *m = realloc(c->members, sy.nmembers * sizeof(*m));
	if (!m) {
		ig_redismsg_sync_free(&sy);
		return;
	}
	c->members = m;
	c->nmembers = sy.nmembers;
	for (size_t i = 0; i < sy.nmembers; i++) { /* by name already */
		snprintf(m[i].name, sizeof(m[i].name), "%s", sy.members[i].name);
		m[i].age_ms = sy.now > sy.members[i].score ? (long)(sy.now - sy.members[i].score) : 0;
	}
	if ((long)c->nmembers < c->live_last && c->hooks)
		c->hooks->left(c->gw); /* the batches it ran may be free (a stop lets go at once) */
	c->redis_now_ms = sy.now;
	take_states(c, &sy);
	ig_redismsg_sync_free(&sy);
	if ((long)c->nmembers != c->live_last || !c->joined) {
		c->live_last = (long)c->nmembers;
		split_evenly(c); /* until the next key sync */
	}
	set_joined(c, true, "");
	log_members(c);
}

static void send_sync(struct ig_cluster *c, uint64_t now)
{
	char live[32];
	snprintf(live, sizeof(live), "%llu", (unsigned long long)c->live_ms);
	char *state = my_state(c);
	const char *argv[] = {"EVAL", sync_script, "2", c->name_key, PREFIX "gws", c->token, live, c->name,
			      state ? state : ""};
	size_t lens[9];
	for (int i = 0; i < 9; i++)
		lens[i] = strlen(argv[i]);
	c->sync_sent_us = ig_now_us();
	if (ig_redis_argv(c->cmd, on_sync, c, 9, argv, lens) == 0)
		c->syncing = true;
	free(state);
	c->next_sync_ms = now + (c->hurry && c->sync_ms >= 4 ? c->sync_ms / 4 : c->sync_ms);
}

/* ---- shared limits ---- */

static bool is_active(const struct ig_cluster *c, const char *digest)
{
	for (size_t i = 0; i < c->nactive; i++)
		if (strcmp(c->active[i], digest) == 0)
			return true;
	return false;
}

/* The key sync's reply being read: its keys (c->ksent) by digest. */
struct sent_key {
	const char *digest;
	size_t i;            /* its figures' place in the reply */
};
struct figures {
	const redisReply *r;
	struct sent_key *sent;
	size_t n;
	uint64_t now;
};

static int sent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sent_key *)a)->digest, ((const struct sent_key *)b)->digest);
}

/* Key k's figures in the reply (rekey's fn): its shares, and its entry of
 * the view; a key the sync did not carry keeps what it had. */
static void take_figures(struct ig_cluster *c, struct ig_key *k, struct ig_cluster_view_key *e, void *arg)
{
	struct figures *fg = arg;
	struct sent_key probe = {k->digest, 0}, *at = fg->n ? bsearch(&probe, fg->sent, fg->n, sizeof(probe), sent_cmp) : NULL;
	const redisReply *el = at ? fg->r->element[at->i] : NULL;
	struct ig_redismsg_bad bad;
	struct ig_key_figures f;
	double req, tok;
	if (!el)
		return;
	if (ig_redismsg_key_figures(el->str, el->len, &f, &bad) < 0) {
		ig_cluster_count_bad(c, bad.kind, bad.why);
		/* as every gateway reading the same figures does */
		req = tok = ig_cluster_share_key_even(e, k->ent->rpm, c->live_last);
		if (k->share_req == req && k->share_tok == tok)
			return;
	} else {
		ig_cluster_share_key_figures(e, &f, k->ent->rpm, k->ent->tpm, c->live_last, &req, &tok);
	}
	ig_clients_share(k, req, tok, fg->now);
}

static void on_keys(const redisReply *reply, void *privdata)
{
	struct ig_cluster *c = privdata;
	const redisReply *r = reply;
	struct ig_redismsg_bad bad;
	struct ig_clients *cl = &c->gw->clients;
	c->keysyncing = false;
	if (!r || r->type == REDIS_REPLY_ERROR || !c->joined)
		return; /* sent again within an epoch */
	uint64_t now = ig_now_ms();
	if (ig_redismsg_keys(r, c->nksent, &bad) < 0) {
		/* nothing of it read: the even split, whose parts add up to the
		 * limit at every gateway that sees the same count */
		ig_cluster_count_bad(c, bad.kind, bad.why);
		split_evenly(c);
		return;
	}
	c->key_syncs++;
	struct figures fg = {.r = r, .sent = calloc(c->nksent + 1, sizeof(*fg.sent)), .n = c->nksent, .now = now};
	if (!fg.sent)
		return;
	for (size_t i = 0; i < c->nksent; i++)
		fg.sent[i] = (struct sent_key){c->ksent[i], i};
	if (fg.n)
		qsort(fg.sent, fg.n, sizeof(*fg.sent), sent_cmp);
	rekey(c, take_figures, &fg);
	free(fg.sent);
	/* The keys active at some gateway: only this one's limited keys are
	 * asked about (is_active), so only those are kept, however many Redis
	 * names. */
	const redisReply *act = r->element[c->nksent];
	c->nactive = 0;
	if (ig_redismsg_active(act, ACTIVE_MAX, &bad) < 0) {
		ig_cluster_count_bad(c, bad.kind, bad.why);
		return;
	}
	size_t want = act->elements < cl->nkeys ? act->elements : cl->nkeys;
	char (*v)[65] = realloc(c->active, (want ? want : 1) * sizeof(*v));
	if (!v)
		return;
	c->active = v;
	for (size_t i = 0; i < act->elements && c->nactive < want; i++) {
		struct ig_key *k = ig_clients_find(cl, act->element[i]->str);
		if (k && limited(k))
			memcpy(c->active[c->nactive++], act->element[i]->str, 65);
	}
}

/* A limited key idle here and at every other gateway (send_keys). */
static bool idle(const struct ig_cluster *c, const struct ig_key *k)
{
	return k->rate_req == 0 && k->rate_tok == 0 && !is_active(c, k->digest);
}

/* rekey's fn: an idle key at an even split. */
static void even_if_idle(struct ig_cluster *c, struct ig_key *k, struct ig_cluster_view_key *e, void *arg)
{
	uint64_t *now = arg;
	if (!idle(c, k))
		return;
	double s = ig_cluster_share_key_even(e, k->ent->rpm, c->live_last);
	if (k->share_req != s || k->share_tok != s)
		ig_clients_share(k, s, s, *now);
}

/* Sends this gateway's demand for every limited key active here or at
 * another gateway (its rate since the last key sync, smoothed) and takes
 * back the others'; keys idle everywhere stay at an even split. */
static void send_keys(struct ig_cluster *c, uint64_t now)
{
	struct ig_clients *cl = &c->gw->clients;
	double dt = c->keys_at_ms && now > c->keys_at_ms ? (double)(now - c->keys_at_ms) / 1000.0 : 0;
	size_t n = 0, cap = 16;
	const char **argv = malloc(cap * sizeof(*argv));
	char **own = NULL; /* the numbers' strings */
	size_t nown = 0, nidle = 0;
	char win[32];
	snprintf(win, sizeof(win), "%d", KEY_EPOCH_MS);
	c->nksent = 0;
	c->keys_at_ms = now;
	if (!argv)
		return;
	argv[n++] = "EVAL";
	argv[n++] = keys_script;
	argv[n++] = "0";
	argv[n++] = c->name;
	argv[n++] = win;
	for (size_t i = 0; i < cl->nkeys; i++) {
		struct ig_key *k = cl->keys[i];
		if (!limited(k))
			continue;
		double rr = dt > 0 ? k->dem_req / dt : 0, rt = dt > 0 ? k->dem_tok / dt : 0;
		k->rate_req = 0.5 * k->rate_req + 0.5 * rr;
		k->rate_tok = 0.5 * k->rate_tok + 0.5 * rt;
		if (k->rate_req < 0.001)
			k->rate_req = 0;
		if (k->rate_tok < 0.001)
			k->rate_tok = 0;
		k->dem_req = k->dem_tok = 0;
		if (idle(c, k)) {
			nidle++; /* an even split (below) */
			continue;
		}
		if (n + 5 > cap) {
			const char **v = realloc(argv, (cap *= 2) * sizeof(*v));
			if (!v)
				goto out;
			argv = v;
		}
		char **o = realloc(own, (nown + 4) * sizeof(*o));
		if (!o)
			goto out;
		own = o;
		ig_bucket_refill(&k->rpm, now);
		ig_bucket_refill(&k->tpm, now);
		own[nown++] = ig_strdupf("%.3f", k->rate_req);
		own[nown++] = ig_strdupf("%.3f", k->rate_tok);
		own[nown++] = ig_strdupf("%.3f", k->rpm.level > 0 ? k->rpm.level : 0);
		own[nown++] = ig_strdupf("%.3f", k->tpm.level > 0 ? k->tpm.level : 0);
		if (c->nksent == c->capksent) {
			char (*v)[65] = realloc(c->ksent, (c->capksent = c->capksent ? 2 * c->capksent : 16) * sizeof(*v));
			if (!v)
				goto out;
			c->ksent = v;
		}
		snprintf(c->ksent[c->nksent++], 65, "%s", k->digest);
		argv[n++] = k->digest; /* not ksent's copy: ksent moves when it grows */
		for (int j = 4; j > 0; j--)
			argv[n++] = own[nown - (size_t)j];
	}
	if (c->nksent > 0 || c->nactive > 0) {
		size_t *lens = malloc(n * sizeof(*lens));
		for (size_t i = 0; lens && i < n; i++)
			lens[i] = strlen(argv[i]);
		if (lens && ig_redis_argv(c->cmd, on_keys, c, (int)n, argv, lens) == 0)
			c->keysyncing = true;
		free(lens);
	}
out:
	for (size_t i = 0; i < nown; i++)
		free(own[i]);
	free(own);
	free(argv);
	if (nidle)
		rekey(c, even_if_idle, &now);
}

/* ---- stored responses ---- */

static void on_message(const redisReply *reply, void *privdata)
{
	struct ig_cluster *c = privdata;
	struct ig_redismsg_bad bad;
	struct ig_resp_msg m;
	const char *msg;
	size_t len;
	int got;
	if (!reply)
		return; /* the connection dropped */
	if ((got = ig_redismsg_pubsub(reply, IG_BAD_RESP, &msg, &len, &bad)) < 0 ||
	    (got == 1 && ig_redismsg_resp(msg, len, &m, &bad) < 0)) {
		ig_cluster_count_bad(c, bad.kind, bad.why);
		return;
	}
	if (got == 0 || strcmp(m.name, c->name) == 0)
		return; /* the subscription's reply, or ours */
	struct ig_gw *gw = c->gw;
	const struct ig_backend *b = ig_backend_fleet_find_url(&gw->fleet, m.url);
	if (!b)
		return; /* a backend this gateway does not have */
	if (!gw->responses && !(gw->responses = ig_respstore_new()))
		return;
	ig_respstore_put(gw->responses, m.id, strlen(m.id), b->id, m.owner, ig_now_ms());
	c->resp_learned++;
}

static void flush(struct ig_cluster *c)
{
	struct shared_resp *s, *tmp;
	IG_LIST_FOREACH_SAFE(s, tmp, &c->outbox, struct shared_resp, link) {
		if (ig_redis_state(c->cmd) != IG_REDIS_UP)
			return;
		char ttl[32];
		snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)s->ttl_ms);
		const char *set[] = {"SET", s->key, s->value, "PX", ttl};
		size_t setl[] = {3, s->key ? strlen(s->key) : 0, s->value ? strlen(s->value) : 0, 2, strlen(ttl)};
		const char *pub[] = {"PUBLISH", s->channel, s->msg};
		size_t publ[] = {7, strlen(s->channel), strlen(s->msg)};
		if ((s->key && ig_redis_argv(c->cmd, NULL, NULL, 5, set, setl) < 0) ||
		    ig_redis_argv(c->cmd, NULL, NULL, 3, pub, publ) < 0)
			return;
		if (s->channel == data_channel)
			c->data_shared++;
		else
			c->resp_shared++;
		ig_list_del(&s->link);
		c->nout--;
		free(s->msg);
		free(s->key);
		free(s->value);
		free(s);
	}
}

void ig_cluster_response_stored(struct ig_gw *gw, const char *id, size_t n, const struct ig_backend *b,
				uint32_t owner)
{
	struct ig_cluster *c = gw->cluster;
	if (!c || n == 0 || n > 512 || memchr(id, ' ', n) || memchr(id, '\n', n))
		return;
	struct shared_resp *s = c->nout < OUTBOX_MAX ? calloc(1, sizeof(*s)) : NULL;
	if (!s) {
		c->resp_dropped++;
		return;
	}
	s->channel = PREFIX "resp";
	s->ttl_ms = IG_RESPSTORE_TTL_MS;
	s->msg = ig_strdupf("%s %lu %s %.*s", c->name, (unsigned long)owner, b->url, (int)n, id);
	s->key = ig_strdupf(PREFIX "resp:%.*s", (int)n, id);
	s->value = ig_strdupf("%lu %s", (unsigned long)owner, b->url);
	ig_list_append(&c->outbox, &s->link);
	c->nout++;
	if (gw->threaded)
		ig_rx_wake(ig_gw_home(gw)); /* shared at its next turn, not its next tick */
}

void ig_cluster_publish(struct ig_gw *gw, const char *key, const char *value, uint64_t ttl_ms, char kind,
			const char *fmt, ...)
{
	struct ig_cluster *c = gw->cluster;
	if (!c)
		return;
	struct shared_resp *s = c->nout < OUTBOX_MAX ? calloc(1, sizeof(*s)) : NULL;
	if (!s) {
		c->resp_dropped++;
		return;
	}
	char rest[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(rest, sizeof(rest), fmt, ap);
	va_end(ap);
	s->channel = data_channel;
	s->msg = ig_strdupf("%c %s %s", kind, c->name, rest);
	s->key = key ? strdup(key) : NULL;
	s->value = value ? strdup(value) : NULL;
	s->ttl_ms = ttl_ms;
	ig_list_append(&c->outbox, &s->link);
	c->nout++;
	if (gw->threaded)
		ig_rx_wake(ig_gw_home(gw));
}

/* A message of infergate:data: "KIND NAME REST" from another gateway;
 * what REST says is the hook's to check (batches_lease.c). */
static void on_data(const redisReply *reply, void *privdata)
{
	struct ig_cluster *c = privdata;
	struct ig_redismsg_bad bad;
	struct ig_data_msg m;
	const char *msg;
	size_t len;
	int got;
	if (!reply)
		return; /* the connection dropped */
	if ((got = ig_redismsg_pubsub(reply, IG_BAD_DATA, &msg, &len, &bad)) < 0 ||
	    (got == 1 && ig_redismsg_data(msg, len, &m, &bad) < 0)) {
		ig_cluster_count_bad(c, bad.kind, bad.why);
		return;
	}
	if (got == 0 || strcmp(m.name, c->name) == 0)
		return;
	c->data_learned++;
	if (c->hooks)
		c->hooks->message(c->gw, m.kind, m.rest); /* NUL-terminated: the payload's end */
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
	if (gw->cluster)
		gw->cluster->hooks = hooks;
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

/* A blocking connection (at the start and the stop, when no loop runs):
 * connected, authenticated, its database selected, within timeout_ms.
 * NULL when not, with *why (malloc'd, when why is not NULL) and *refused:
 * Redis answered but refused the password or the database (a
 * configuration mistake). */
static struct ig_redis *connect_blocking(struct ig_cluster *c, uint64_t timeout_ms, char **why, bool *refused)
{
	struct ig_redis *rc = ig_redis_connect_blocking(c->addr, &c->url, c->tls, timeout_ms, why, refused);
	if (rc)
		ig_redis_set_bad_fn(rc, on_bad, c);
	return rc;
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
	bad_init(c);
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
	struct ig_redis *rc = connect_blocking(c, 1000, &why, &refused);
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
	c->cmd = ig_redis_new(ig_gw_home(gw), c->addr, &c->url, c->tls, timeout, on_cmd_state, c);
	c->sub = ig_redis_new(ig_gw_home(gw), c->addr, &c->url, c->tls, timeout, on_sub_state, c);
	if (c->cmd)
		ig_redis_set_bad_fn(c->cmd, on_bad, c);
	if (c->sub)
		ig_redis_set_bad_fn(c->sub, on_bad, c);
	if (!c->cmd || !c->sub ||
	    ig_metrics_register(gw, &(struct ig_metrics_source){"cluster", report_json, report_prom, c}) < 0)
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
	if (!c->subscribed && ig_redis_state(c->sub) == IG_REDIS_UP &&
	    ig_redis_subscribe(c->sub, PREFIX "resp", on_message, c) == 0 &&
	    ig_redis_subscribe(c->sub, data_channel, on_data, c) == 0)
		c->subscribed = true;
	if (ig_redis_state(c->cmd) != IG_REDIS_UP)
		return;
	if (!c->syncing && now >= c->next_sync_ms)
		send_sync(c, now);
	if (c->joined && !c->keysyncing && now >= c->next_keys_ms) {
		c->next_keys_ms = now + KEY_EPOCH_MS / 2; /* each epoch written at least once */
		send_keys(c, now);
	}
	if (c->joined && now - c->last_ok_ms > c->live_ms)
		set_joined(c, false, "no sync answered for 3 periods");
	flush(c);
	if (c->joined)
		flush_asks(c, false);
}

void ig_cluster_stop(struct ig_gw *gw)
{
	struct ig_cluster *c = gw->cluster;
	if (!c)
		return;
	gw->cluster = NULL;
	ig_metrics_unregister(gw, c);
	ig_redis_free(c->cmd);
	ig_redis_free(c->sub);
	flush_asks(c, true);
	/* Leave at once (blocking: the loops are over), so that a restart
	 * under the same name is not refused and the others see it go. */
	if (c->joined) {
		struct ig_redis *rc = connect_blocking(c, 300, NULL, NULL);
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
		free(s->msg);
		free(s->key);
		free(s->value);
		free(s);
	}
	ig_cluster_view_free(gw->cluster_view); /* the loops are over: nobody reads it */
	gw->cluster_view = NULL;
	free(c->bclaims);
	free(c->kclaims);
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
