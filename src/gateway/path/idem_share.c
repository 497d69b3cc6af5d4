/* Idempotency-Key across gateways (idem_share.h). */
#include "config.h"
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "gateway.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/redismsg.h"
#include "net/rx.h"
#include "path/idem.h"
#include "path/idem_share.h"

#define CLAIM_MS 120000  /* a running claim's life in Redis... */
#define RENEW_MS 30000   /* ...renewed this often by its gateway */
#define POLL_MS 100      /* another's running answer looked at this often */
#define SHARE_MAX (64u << 20) /* an answer larger is not shared (nor kept by Redis) */

/* The claim let go, or renewed, only while it is still this one's (it may
 * have lapsed and been taken by another gateway). */
static const char release_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
static const char renew_lua[] =
	"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";

/* A command's context: its entry holds a reference until the reply. */
struct pending {
	struct ig_gw *gw;
	struct ig_idem_entry *e;
};

static void hex(char *out, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		snprintf(out + 2 * i, 3, "%02x", p[i]);
}

/* infergate:idem:<SHA-256 of the scope>: neither the API key's digest nor
 * the client's value is readable in Redis. */
static void redis_key(const struct ig_idem_entry *e, char out[15 + 65])
{
	unsigned char d[32];
	EVP_Digest(e->scope, strlen(e->scope), d, NULL, EVP_sha256(), NULL);
	memcpy(out, "infergate:idem:", 15);
	hex(out + 15, d, 32);
}

static void settle(struct ig_gw *gw, struct ig_idem_entry *e, enum ig_idem_share to)
{
	e->share = (unsigned char)to;
	if (to == IG_IDEM_ALONE)
		ig_list_del(&e->share_link);
	else if (!ig_list_linked(&e->share_link))
		ig_list_append(&gw->idem.shared, &e->share_link);
}

/* Sends argv for e (a reference held until the reply). Returns 0 or -1. */
static int ask(struct ig_gw *gw, struct ig_idem_entry *e, ig_redis_reply_fn *fn, int argc, const char **argv,
	       const size_t *lens)
{
	struct pending *p = malloc(sizeof(*p));
	if (!p)
		return -1;
	*p = (struct pending){gw, e};
	if (ig_cluster_ask(gw, fn, p, argc, argv, lens) < 0) {
		free(p);
		return -1;
	}
	e->refs++;
	e->share_busy = true;
	return 0;
}

/* The end of a reply's handling: the reference let go, readers woken. */
static void done(struct pending *p)
{
	struct ig_idem *s = &p->gw->idem;
	p->e->share_busy = false;
	if (s->wake)
		s->wake(p->e);
	ig_idem_put(s, p->e);
	free(p);
}

static void conflict(struct ig_gw *gw, struct ig_idem_entry *e)
{
	char *body = ig_oaerror_json(IG_IDEM_CONFLICT_MESSAGE,
				     "invalid_request_error", "Idempotency-Key", "idempotency_key_conflict");
	e->conflict = true;
	settle(gw, e, IG_IDEM_ALONE);
	ig_idem_fail(&gw->idem, e, 422, body ? body : "{}", ig_now_ms());
	free(body);
}

int ig_idem_share_parse(const char *v, size_t n, size_t max_bytes, struct ig_idem_value *out,
			struct ig_redismsg_bad *bad)
{
	struct ig_redismsg_field f[4];
	char shown[48];
	long long status;
	const char *nl = memchr(v, '\n', n);
	size_t head = nl ? (size_t)(nl - v) : n;
	memset(out, 0, sizeof(*out));
	ig_redismsg_shown(shown, sizeof(shown), v, head);
	if (head < 67 || (v[0] != 'R' && v[0] != 'D') || v[1] != ' ' || !ig_redismsg_digest_ok(v + 2, 64) || v[66] != ' ')
		return ig_redismsg_fail(bad, IG_BAD_IDEM, "'%s' is not 'R DIGEST HOLDER' nor 'D DIGEST STATUS "
					"CONTENT-TYPE' and the answer", shown);
	out->kind = v[0];
	memcpy(out->digest, v + 2, 64);
	if (v[0] == 'R') { /* the holder: ig_cluster_holder's "NAME TOKEN" */
		if (nl || ig_redismsg_fields(v + 67, n - 67, f, 2) != 2 || !ig_redismsg_name_ok(f[0].p, f[0].n) ||
		    !ig_redismsg_hex_ok(f[1].p, f[1].n, 32))
			return ig_redismsg_fail(bad, IG_BAD_IDEM, "'%s': the holder is not a gateway's name and token",
						shown);
		return 0;
	}
	/* "STATUS CONTENT-TYPE" (a Content-Type may hold spaces: the rest of
	 * the line), then the answer */
	const char *sp = memchr(v + 67, ' ', head - 67);
	size_t ct = sp ? head - (size_t)(sp + 1 - v) : 0;
	if (!nl || !sp || ig_redismsg_int(v + 67, (size_t)(sp - v) - 67, 100, 599, &status) < 0)
		return ig_redismsg_fail(bad, IG_BAD_IDEM, "'%s': no status from 100 to 599 and a line's end", shown);
	if (ct == 0 || ct >= sizeof(out->ctype) || sp[1] == ' ')
		return ig_redismsg_fail(bad, IG_BAD_IDEM, "'%s': the Content-Type is not 1 to %zu bytes", shown,
					sizeof(out->ctype) - 1);
	for (size_t i = 0; i < ct; i++)
		if (sp[1 + i] < 0x20 || sp[1 + i] > 0x7e) /* it becomes a header of the answer */
			return ig_redismsg_fail(bad, IG_BAD_IDEM, "'%s': the Content-Type holds a control byte", shown);
	out->nbody = n - head - 1;
	if (out->nbody > max_bytes)
		return ig_redismsg_fail(bad, IG_BAD_IDEM, "an answer of %zu bytes (at most %zu kept here)", out->nbody,
					max_bytes);
	out->status = (unsigned)status;
	if (!(ct == 1 && sp[1] == '-')) /* '-': none */
		memcpy(out->ctype, sp + 1, ct);
	out->body = nl + 1;
	return 0;
}

/* What Redis holds under e's key (ig_idem_share_parse's two forms). */
static void take(struct ig_gw *gw, struct ig_idem_entry *e, const char *v, size_t n)
{
	char want[65];
	struct ig_idem_value iv;
	struct ig_redismsg_bad bad;
	if (ig_idem_share_parse(v, n, gw->idem.max_bytes < SHARE_MAX ? gw->idem.max_bytes : SHARE_MAX, &iv, &bad) < 0) {
		ig_cluster_count_bad(gw->cluster, bad.kind, bad.why);
		settle(gw, e, IG_IDEM_ALONE); /* none of it is used: the request runs here */
		return;
	}
	hex(want, e->digest, 32);
	if (strcmp(iv.digest, want) != 0) {
		conflict(gw, e);
		return;
	}
	if (iv.kind == 'R') {
		settle(gw, e, IG_IDEM_THEIRS);
		e->share_next_ms = ig_now_ms() + POLL_MS;
		return;
	}
	settle(gw, e, IG_IDEM_ALONE);
	if (e->done)
		return;
	e->status = iv.status;
	free(e->content_type);
	e->content_type = iv.ctype[0] ? strdup(iv.ctype) : NULL;
	ig_buf_reset(&e->bytes);
	ig_idem_append(e, iv.body, iv.nbody);
	ig_idem_end(&gw->idem, e, false, ig_now_ms()); /* kept here too, the store's rules */
}

static void on_claim(const redisReply *reply, void *privdata)
{
	struct pending *p = privdata;
	struct ig_idem_entry *e = p->e;
	const redisReply *r = reply;
	if (!r || r->type == REDIS_REPLY_ERROR) {
		char why[200];
		if (r) { /* Redis before 7.0 has no SET ... GET */
			ig_redismsg_shown(why, sizeof(why), r->str ? r->str : "", r->str ? r->len : 0);
			ig_log_warn("Idempotency-Key: Redis refused the claim (%s); keys hold at this gateway only", why);
		}
		settle(p->gw, e, IG_IDEM_ALONE);
	} else if (r->type == REDIS_REPLY_NIL) {
		settle(p->gw, e, IG_IDEM_OURS);
		e->share_next_ms = ig_now_ms() + RENEW_MS;
		if (e->done) /* its runner left meanwhile */
			ig_idem_share_end(p->gw, e);
	} else if (r->type == REDIS_REPLY_STRING) {
		take(p->gw, e, r->str, r->len);
	} else {
		char why[80];
		snprintf(why, sizeof(why), "the claim's reply is of type %d, not a string or nil", r->type);
		ig_cluster_count_bad(p->gw->cluster, IG_BAD_IDEM, why);
		settle(p->gw, e, IG_IDEM_ALONE);
	}
	done(p);
}

static void on_poll(const redisReply *reply, void *privdata)
{
	struct pending *p = privdata;
	struct ig_idem_entry *e = p->e;
	const redisReply *r = reply;
	e->share_next_ms = ig_now_ms() + POLL_MS;
	if (e->share != IG_IDEM_THEIRS || !r || r->type == REDIS_REPLY_ERROR)
		; /* polled again (or settled meanwhile) */
	else if (e->done) /* its request left: nothing to wait for */
		settle(p->gw, e, IG_IDEM_ALONE);
	else if (r->type == REDIS_REPLY_NIL) {
		/* The claim is gone: the run through the other gateway failed (a
		 * failed run is not kept), or that gateway died and its claim
		 * lapsed. The request waiting here claims the key in turn and
		 * runs, as a retry would; alone if Redis is gone meanwhile. */
		if (ig_idem_share_claim(p->gw, e) < 0)
			settle(p->gw, e, IG_IDEM_ALONE);
	} else if (r->type == REDIS_REPLY_STRING) {
		take(p->gw, e, r->str, r->len);
	} else {
		char why[80];
		snprintf(why, sizeof(why), "a poll's reply is of type %d, not a string or nil", r->type);
		ig_cluster_count_bad(p->gw->cluster, IG_BAD_IDEM, why); /* polled again */
	}
	done(p);
}

int ig_idem_share_claim(struct ig_gw *gw, struct ig_idem_entry *e)
{
	char key[80], d[65], ms[24];
	if (!ig_cluster_joined(gw))
		return -1;
	redis_key(e, key);
	hex(d, e->digest, 32);
	free(e->claim);
	if (!(e->claim = ig_strdupf("R %s %s", d, ig_cluster_holder(gw))))
		return -1;
	snprintf(ms, sizeof(ms), "%d", CLAIM_MS);
	const char *argv[] = {"SET", key, e->claim, "NX", "GET", "PX", ms};
	size_t lens[] = {3, strlen(key), strlen(e->claim), 2, 3, 2, strlen(ms)};
	if (ask(gw, e, on_claim, 7, argv, lens) < 0)
		return -1;
	settle(gw, e, IG_IDEM_ASKING);
	return 0;
}

void ig_idem_share_end(struct ig_gw *gw, struct ig_idem_entry *e)
{
	char key[80], ms[24];
	if (e->share != IG_IDEM_OURS)
		return; /* asking: the claim's reply lets it go */
	settle(gw, e, IG_IDEM_ALONE);
	redis_key(e, key);
	if (e->failed || e->bytes.len > SHARE_MAX || e->bytes.len > gw->idem.max_bytes) {
		const char *argv[] = {"EVAL", release_lua, "1", key, e->claim};
		size_t lens[] = {4, sizeof(release_lua) - 1, 1, strlen(key), strlen(e->claim)};
		ig_cluster_ask(gw, NULL, NULL, 5, argv, lens);
		return;
	}
	char d[65];
	hex(d, e->digest, 32);
	char *head = ig_strdupf("D %s %u %s\n", d, e->status, e->content_type ? e->content_type : "-");
	struct ig_buf v;
	ig_buf_init(&v);
	if (head && ig_buf_append(&v, head, strlen(head)) == 0 && ig_buf_append(&v, e->bytes.data, e->bytes.len) == 0) {
		snprintf(ms, sizeof(ms), "%llu", (unsigned long long)gw->idem.ttl_ms);
		const char *argv[] = {"SET", key, v.data, "PX", ms};
		size_t lens[] = {3, strlen(key), v.len, 2, strlen(ms)};
		ig_cluster_ask(gw, NULL, NULL, 5, argv, lens);
	}
	free(head);
	ig_buf_free(&v);
}

void ig_idem_share_tick(struct ig_gw *gw, uint64_t now)
{
	struct ig_idem_entry *e, *next;
	char key[80], ms[24];
	IG_LIST_FOREACH_SAFE(e, next, &gw->idem.shared, struct ig_idem_entry, share_link) {
		if (e->share_busy || now < e->share_next_ms)
			continue;
		redis_key(e, key);
		if (e->share == IG_IDEM_THEIRS) {
			const char *argv[] = {"GET", key};
			size_t lens[] = {3, strlen(key)};
			ask(gw, e, on_poll, 2, argv, lens);
		} else if (e->share == IG_IDEM_OURS) {
			e->share_next_ms = now + RENEW_MS;
			snprintf(ms, sizeof(ms), "%d", CLAIM_MS);
			const char *argv[] = {"EVAL", renew_lua, "1", key, e->claim, ms};
			size_t lens[] = {4, sizeof(renew_lua) - 1, 1, strlen(key), strlen(e->claim), strlen(ms)};
			ig_cluster_ask(gw, NULL, NULL, 6, argv, lens);
		}
	}
}

/* Reactor 0's tick (rx.h: ig_rx_every). */
static void share_timer(struct ig_rx *rx, uint64_t now_ms, void *arg IG_UNUSED)
{
	if (rx->gw->cluster)
		ig_idem_share_tick(rx->gw, now_ms);
}

int ig_idem_share_start(struct ig_gw *gw)
{
	return ig_rx_every(gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_IDEM_SHARE, share_timer, NULL);
}
