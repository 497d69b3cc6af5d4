/* The cluster's Redis I/O (cluster_sync.h): the sync and the key sync
 * (their scripts, and their replies read with redismsg.c's validators),
 * the subscriptions to infergate:resp and infergate:data, the outbox of
 * what this gateway publishes, and what Redis sent that was refused.
 * What Redis holds is described at the top of cluster.c.
 * Not here: the arithmetic of the shares (cluster_share.c), the view made
 * from this gateway's tables (cluster_state.c), the start, the tick and
 * the stop (cluster.c). */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_int.h"
#include "cluster/cluster_share.h"
#include "cluster/cluster_state.h"
#include "cluster/cluster_sync.h"
#include "fleet/backend.h"
#include "gateway.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "keys/clients.h"
#include "keys/ratelimit.h"
#include "keys/respstore.h"
#include "net/redis.h"
#include "net/redismsg.h"
#include "net/rx.h"
#include "sched/cluster_view.h"

static const char data_channel[] = DATA_CHANNEL;

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

/* The kinds of redismsg.h and of the connection (redis.c): their series
 * at 0 from the start. */
void ig_cluster_sync_bad_init(struct ig_cluster *c)
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

void ig_cluster_sync_joined(struct ig_cluster *c, bool joined, const char *why)
{
	if (joined == c->joined && c->started)
		return;
	c->started = true;
	c->joined = joined;
	if (!joined) { /* each keeps its part of the limits, the last count seen; the
			* others' requests are no longer seen */
		ig_cluster_state_even(&c->st);
		ig_cluster_state_take(&c->st, NULL);
	}
	if (joined && c->was_joined && c->hook_joined)
		c->hook_joined(c->gw); /* what was published while away */
	if (joined)
		c->was_joined = true;
	if (joined)
		ig_log_info("cluster: joined as '%s' through %s", c->name, c->shown);
	else
		ig_log_warn("cluster: serving alone (%s); shared again when Redis at %s answers", why, c->shown);
}

static void on_cmd_state(void *arg, enum ig_redis_state s, const char *why)
{
	struct ig_cluster *c = arg;
	if (s == IG_REDIS_DOWN) {
		c->syncing = false;
		char msg[300];
		snprintf(msg, sizeof(msg), "Redis: %s", why);
		ig_cluster_sync_joined(c, false, msg);
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
		ig_cluster_sync_joined(c, false, why);
		return;
	}
	if (ig_redismsg_sync(r, c->name, (long long)c->live_ms, &sy, &bad) < 0) {
		/* none of it is read: alone (the last count of gateways' even
		 * split) until a sync is whole again */
		c->syncs_failed++;
		ig_cluster_count_bad(c, bad.kind, bad.why);
		snprintf(why, sizeof(why), "sync: a bad %s from Redis", bad.kind);
		ig_cluster_sync_joined(c, false, why);
		return;
	}
	if (sy.taken) {
		c->syncs_failed++;
		if (!c->conflict)
			ig_log_error("cluster: the name '%s' is held by another live gateway (%s%s): this one serves "
				     "alone until it is free; give each gateway its own cluster.name", c->name, PREFIX "gw:",
				     c->name);
		c->conflict = true;
		ig_cluster_sync_joined(c, false, "its name is taken");
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
	if ((long)c->nmembers < c->st.live_last && c->hook_left)
		c->hook_left(c->gw); /* the batches it ran may be free (a stop lets go at once) */
	c->st.redis_now_ms = sy.now;
	ig_cluster_state_take(&c->st, &sy);
	ig_redismsg_sync_free(&sy);
	if ((long)c->nmembers != c->st.live_last || !c->joined) {
		c->st.live_last = (long)c->nmembers;
		ig_cluster_state_even(&c->st); /* until the next key sync */
	}
	ig_cluster_sync_joined(c, true, "");
	log_members(c);
}

void ig_cluster_sync_send(struct ig_cluster *c, uint64_t now)
{
	char live[32];
	snprintf(live, sizeof(live), "%llu", (unsigned long long)c->live_ms);
	char *state = ig_cluster_state_text(&c->st);
	const char *argv[] = {"EVAL", sync_script, "2", c->name_key, PREFIX "gws", c->token, live, c->name,
			      state ? state : ""};
	size_t lens[9];
	for (int i = 0; i < 9; i++)
		lens[i] = strlen(argv[i]);
	c->sync_sent_us = ig_now_us();
	if (ig_redis_argv(c->cmd, on_sync, c, 9, argv, lens) == 0)
		c->syncing = true;
	free(state);
	c->next_sync_ms = now + (c->st.hurry && c->sync_ms >= 4 ? c->sync_ms / 4 : c->sync_ms);
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
	struct ig_cluster *c;
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
static void take_figures(struct ig_key *k, struct ig_cluster_view_key *e, void *arg)
{
	struct figures *fg = arg;
	struct ig_cluster *c = fg->c;
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
		req = tok = ig_cluster_share_key_even(e, k->ent->rpm, c->st.live_last);
		if (k->share_req == req && k->share_tok == tok)
			return;
	} else {
		ig_cluster_share_key_figures(e, &f, k->ent->rpm, k->ent->tpm, c->st.live_last, &req, &tok);
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
		ig_cluster_state_even(&c->st);
		return;
	}
	c->key_syncs++;
	struct figures fg = {.c = c, .r = r, .sent = calloc(c->nksent + 1, sizeof(*fg.sent)), .n = c->nksent, .now = now};
	if (!fg.sent)
		return;
	for (size_t i = 0; i < c->nksent; i++)
		fg.sent[i] = (struct sent_key){c->ksent[i], i};
	if (fg.n)
		qsort(fg.sent, fg.n, sizeof(*fg.sent), sent_cmp);
	ig_cluster_state_rekey(&c->st, take_figures, &fg);
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
		if (k && ig_cluster_state_limited(k))
			memcpy(c->active[c->nactive++], act->element[i]->str, 65);
	}
}

/* A limited key idle here and at every other gateway (send_keys). */
static bool idle(const struct ig_cluster *c, const struct ig_key *k)
{
	return k->rate_req == 0 && k->rate_tok == 0 && !is_active(c, k->digest);
}

/* An idle key at an even split (ig_cluster_state_rekey's fn). */
struct even {
	struct ig_cluster *c;
	uint64_t now;
};
static void even_if_idle(struct ig_key *k, struct ig_cluster_view_key *e, void *arg)
{
	struct even *ev = arg;
	struct ig_cluster *c = ev->c;
	uint64_t *now = &ev->now;
	if (!idle(c, k))
		return;
	double s = ig_cluster_share_key_even(e, k->ent->rpm, c->st.live_last);
	if (k->share_req != s || k->share_tok != s)
		ig_clients_share(k, s, s, *now);
}

/* Sends this gateway's demand for every limited key active here or at
 * another gateway (its rate since the last key sync, smoothed) and takes
 * back the others'; keys idle everywhere stay at an even split. */
void ig_cluster_sync_keys(struct ig_cluster *c, uint64_t now)
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
		if (!ig_cluster_state_limited(k))
			continue;
		ig_clients_demand(k, dt);
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
		double lreq = ig_bucket_level(&k->rpm, now), ltok = ig_bucket_level(&k->tpm, now);
		own[nown++] = ig_strdupf("%.3f", k->rate_req);
		own[nown++] = ig_strdupf("%.3f", k->rate_tok);
		own[nown++] = ig_strdupf("%.3f", lreq > 0 ? lreq : 0);
		own[nown++] = ig_strdupf("%.3f", ltok > 0 ? ltok : 0);
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
		ig_cluster_state_rekey(&c->st, even_if_idle, &(struct even){c, now});
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

void ig_cluster_sync_flush(struct ig_cluster *c)
{
	struct shared_resp *s, *tmp;
	IG_LIST_FOREACH_SAFE(s, tmp, &c->outbox, struct shared_resp, link) {
		if (ig_redis_state(c->cmd) != IG_REDIS_UP)
			return;
		char ttl[32];
		snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)s->ttl_ms);
		const char *set[] = {"SET", s->key, s->value, "PX", ttl};
		size_t setl[] = {3, s->key ? strlen(s->key) : 0, s->value ? strlen(s->value) : 0, 2, strlen(ttl)};
		const char *pub[] = {"PUBLISH", s->channel, s->message};
		size_t publ[] = {7, strlen(s->channel), strlen(s->message)};
		if ((s->key && ig_redis_argv(c->cmd, NULL, NULL, 5, set, setl) < 0) ||
		    ig_redis_argv(c->cmd, NULL, NULL, 3, pub, publ) < 0)
			return;
		if (s->channel == data_channel)
			c->data_shared++;
		else
			c->resp_shared++;
		ig_list_del(&s->link);
		c->nout--;
		free(s->message);
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
	s->message = ig_strdupf("%s %lu %s %.*s", c->name, (unsigned long)owner, b->url, (int)n, id);
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
	s->message = ig_strdupf("%c %s %s", kind, c->name, rest);
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
	if (c->hook_message)
		c->hook_message(c->gw, m.kind, m.rest); /* NUL-terminated: the payload's end */
}

/* A blocking connection (at the start and the stop, when no loop runs):
 * connected, authenticated, its database selected, within timeout_ms.
 * NULL when not, with *why (malloc'd, when why is not NULL) and *refused:
 * Redis answered but refused the password or the database (a
 * configuration mistake). */
struct ig_redis *ig_cluster_sync_blocking(struct ig_cluster *c, uint64_t timeout_ms, char **why, bool *refused)
{
	struct ig_redis *rc = ig_redis_connect_blocking(c->addr, &c->url, c->tls, timeout_ms, why, refused);
	if (rc)
		ig_redis_set_bad_fn(rc, on_bad, c);
	return rc;
}

int ig_cluster_sync_connect(struct ig_cluster *c, uint64_t timeout)
{
	struct ig_gw *gw = c->gw;
	c->cmd = ig_redis_new(ig_gw_home(gw), c->addr, &c->url, c->tls, timeout, on_cmd_state, c);
	c->sub = ig_redis_new(ig_gw_home(gw), c->addr, &c->url, c->tls, timeout, on_sub_state, c);
	if (c->cmd)
		ig_redis_set_bad_fn(c->cmd, on_bad, c);
	if (c->sub)
		ig_redis_set_bad_fn(c->sub, on_bad, c);
	return c->cmd && c->sub ? 0 : -1;
}

void ig_cluster_sync_subscribe(struct ig_cluster *c)
{
	if (!c->subscribed && ig_redis_state(c->sub) == IG_REDIS_UP &&
	    ig_redis_subscribe(c->sub, PREFIX "resp", on_message, c) == 0 &&
	    ig_redis_subscribe(c->sub, data_channel, on_data, c) == 0)
		c->subscribed = true;
}

