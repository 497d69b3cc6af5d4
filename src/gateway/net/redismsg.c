/* What comes back from Redis, checked (redismsg.h). Every rule here is
 * what an honest gateway writes (cluster.c's scripts and my_state,
 * ig_cluster_publish), and no wider: what another writer put in Redis is
 * refused whole rather than read in part. */
#include "config.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/redismsg.h"

const char *const ig_redismsg_kinds[] = {
	IG_BAD_SYNC,         IG_BAD_SYNC_STATE, IG_BAD_KEY_SYNC,    IG_BAD_RESP,
	IG_BAD_DATA,         IG_BAD_DATA_BATCH, IG_BAD_DATA_PROGRESS, IG_BAD_DATA_CANCEL,
	IG_BAD_DATA_FILE,    IG_BAD_BATCH_LEASE, IG_BAD_IDEM,
};
const size_t ig_redismsg_nkinds = sizeof(ig_redismsg_kinds) / sizeof(ig_redismsg_kinds[0]);

int ig_redismsg_fail(struct ig_redismsg_bad *bad, const char *kind, const char *fmt, ...)
{
	va_list ap;
	bad->kind = kind;
	va_start(ap, fmt);
	vsnprintf(bad->why, sizeof(bad->why), fmt, ap);
	va_end(ap);
	return -1;
}

void ig_redismsg_shown(char *out, size_t outlen, const char *s, size_t n)
{
	size_t i = 0;
	if (outlen == 0)
		return;
	for (; i + 1 < outlen && i < n; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	out[i] = '\0';
	if (i < n && outlen > 4 && i >= 3)
		memcpy(out + i - 3, "...", 3); /* cut: says so */
}

/* The type of a reply, named for a message. */
static const char *type_name(const redisReply *r)
{
	switch (r ? r->type : 0) {
	case REDIS_REPLY_STRING: return "string";
	case REDIS_REPLY_ARRAY: return "array";
	case REDIS_REPLY_INTEGER: return "integer";
	case REDIS_REPLY_NIL: return "nil";
	case REDIS_REPLY_STATUS: return "status";
	case REDIS_REPLY_ERROR: return "error";
	default: return "nothing";
	}
}

int ig_redismsg_int(const char *s, size_t n, long long min, long long max, long long *out)
{
	char buf[24];
	size_t i = n && s[0] == '-';
	if (n == 0 || n >= sizeof(buf) || i == n)
		return -1;
	for (size_t j = i; j < n; j++)
		if (s[j] < '0' || s[j] > '9')
			return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	char *end;
	long long v = strtoll(buf, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

int ig_redismsg_num(const char *s, size_t n, double min, double max, double *out)
{
	char buf[72];
	if (n == 0 || n >= sizeof(buf) || !((s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && n > 1)))
		return -1;
	for (size_t j = 0; j < n; j++)
		if (!strchr("0123456789.eE+-", s[j]) || s[j] == '\0')
			return -1;
	memcpy(buf, s, n);
	buf[n] = '\0';
	errno = 0;
	char *end;
	double v = strtod(buf, &end);
	if (errno || *end || !isfinite(v) || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

bool ig_redismsg_name_ok(const char *s, size_t n)
{
	static const char ok[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-";
	if (n == 0 || n > IG_REDISMSG_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '\0' || !strchr(ok, s[i]))
			return false;
	return true;
}

bool ig_redismsg_hex_ok(const char *s, size_t n, size_t want)
{
	if (n != want)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

bool ig_redismsg_digest_ok(const char *s, size_t n)
{
	return ig_redismsg_hex_ok(s, n, 64);
}

int ig_redismsg_fields(const char *s, size_t n, struct ig_redismsg_field *f, size_t max)
{
	size_t nf = 0, start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != ' ') {
			if (s[i] == '\0' || s[i] == '\n')
				return -1;
			continue;
		}
		if (i == start || nf == max)
			return -1; /* an empty field, or one too many */
		f[nf++] = (struct ig_redismsg_field){s + start, i - start};
		start = i + 1;
	}
	return (int)nf;
}

const char *ig_redismsg_str(const redisReply *r)
{
	if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) || !r->str ||
	    memchr(r->str, '\0', r->len))
		return NULL;
	return r->str;
}

/* ---- the sync ---- */

/* One line of a state (not its first) into *l: 1 taken, 0 a kind not
 * read here, -1 bad (why in bad, when not NULL). */
static int state_line(const char *line, size_t len, size_t no, const char *gw, struct ig_state_line *l,
		      struct ig_redismsg_bad *bad)
{
	char shown[48];
	struct ig_redismsg_field f[5];
	if (len && line[0] >= 'a' && line[0] <= 'z' && !strchr("gbmhk", line[0]) && (len == 1 || line[1] == ' '))
		return 0; /* a line a newer gateway writes: not read here */
	int nf = ig_redismsg_fields(line, len, f, 5);
	char what = nf >= 1 && f[0].n == 1 ? f[0].p[0] : '\0';
	if (bad)
		ig_redismsg_shown(shown, sizeof(shown), line, len);
	if (nf < 1 || !what || !strchr("bmhk", what)) {
		if (bad)
			ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "line %zu '%s' of gateway '%s' is %s", no, shown, gw,
					 nf < 1 ? "not fields split by single spaces" : "of no kind");
		return -1;
	}
	l->what = what;
	if (what != 'k') {
		if (nf != 3 || f[1].n > IG_REDISMSG_URL_MAX ||
		    ig_redismsg_int(f[2].p, f[2].n, 1, IG_REDISMSG_CLAIM_MAX, &l->v[0]) < 0) {
			if (bad)
				ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "line %zu '%s' of gateway '%s' is not '%c NAME N' "
					     "with N from 1 to %lld", no, shown, gw, what, IG_REDISMSG_CLAIM_MAX);
			return -1;
		}
	} else if (nf != 5 || !((f[1].n == 1 && f[1].p[0] == '-') || ig_redismsg_digest_ok(f[1].p, f[1].n)) ||
		   ig_redismsg_int(f[2].p, f[2].n, 0, IG_REDISMSG_CLAIM_MAX, &l->v[0]) < 0 ||
		   ig_redismsg_int(f[3].p, f[3].n, 0, 1000, &l->v[1]) < 0 ||
		   ig_redismsg_int(f[4].p, f[4].n, 0, IG_REDISMSG_CLAIM_MAX, &l->v[2]) < 0) {
		if (bad)
			ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "line %zu '%s' of gateway '%s' is not 'k DIGEST WAITING "
				     "WEIGHT CLAIM' (a digest or '-', 0 to %lld, 0 to 1000, 0 to %lld)", no, shown, gw,
				     IG_REDISMSG_CLAIM_MAX, IG_REDISMSG_CLAIM_MAX);
		return -1;
	}
	memcpy(l->name, f[1].p, f[1].n);
	l->name[f[1].n] = '\0';
	return 1;
}

int ig_redismsg_state(const char *s, size_t n, struct ig_state *out, struct ig_redismsg_bad *bad)
{
	char shown[48];
	struct ig_redismsg_field f[2];
	struct ig_state_line l;
	memset(out, 0, sizeof(*out));
	if (n > IG_REDISMSG_STATE_MAX)
		return ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "a state of %zu bytes (at most %u)", n,
					IG_REDISMSG_STATE_MAX);
	if (n == 0)
		return ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "an empty state");
	if (memchr(s, '\0', n))
		return ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "a state with a NUL byte");
	const char *end = memchr(s, '\n', n);
	size_t len = end ? (size_t)(end - s) : n;
	if (ig_redismsg_fields(s, len, f, 2) != 2 || f[0].n != 1 || f[0].p[0] != 'g' ||
	    !ig_redismsg_name_ok(f[1].p, f[1].n)) {
		ig_redismsg_shown(shown, sizeof(shown), s, len);
		return ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "the first line '%s' is not 'g NAME' with a gateway's name",
					shown);
	}
	memcpy(out->name, f[1].p, f[1].n);
	out->name[f[1].n] = '\0';
	out->text = end ? end + 1 : s + n;
	out->len = end ? n - len - 1 : 0;
	for (size_t at = 0, no = 2; at < out->len; no++) { /* every line checked now; read later */
		const char *line = out->text + at, *e = memchr(line, '\n', out->len - at);
		size_t ll = e ? (size_t)(e - line) : out->len - at;
		int got = state_line(line, ll, no, out->name, &l, bad);
		if (got < 0)
			return -1;
		out->nkeys += got == 1 && l.what == 'k';
		at += ll + 1;
	}
	return 0;
}

int ig_redismsg_state_next(const struct ig_state *st, size_t *at, struct ig_state_line *l)
{
	while (*at < st->len) {
		const char *line = st->text + *at, *e = memchr(line, '\n', st->len - *at);
		size_t ll = e ? (size_t)(e - line) : st->len - *at;
		*at += ll + 1;
		if (state_line(line, ll, 0, st->name, l, NULL) == 1)
			return 1;
	}
	return 0;
}

void ig_redismsg_sync_free(struct ig_sync *s)
{
	free(s->states);
	free(s->members);
	memset(s, 0, sizeof(*s));
}

static int by_member_name(const void *a, const void *b)
{
	return strcmp(((const struct ig_sync_member *)a)->name, ((const struct ig_sync_member *)b)->name);
}

static const struct ig_sync_member *member_find(const struct ig_sync *s, const char *name)
{
	struct ig_sync_member probe;
	snprintf(probe.name, sizeof(probe.name), "%s", name);
	return bsearch(&probe, s->members, s->nmembers, sizeof(*s->members), by_member_name);
}

int ig_redismsg_sync(const redisReply *r, const char *me, long long live_ms, struct ig_sync *out,
		     struct ig_redismsg_bad *bad)
{
	char shown[48];
	size_t nkeys = 0;
	memset(out, 0, sizeof(*out));
	if (!r || r->type != REDIS_REPLY_ARRAY)
		return ig_redismsg_fail(bad, IG_BAD_SYNC, "the reply is %s %s, not an array",
					r && r->type == REDIS_REPLY_ARRAY ? "an" : "a", type_name(r));
	if (r->elements == 1 && r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == -1) {
		out->taken = true;
		return 0;
	}
	if (r->elements != 3 || r->element[0]->type != REDIS_REPLY_INTEGER ||
	    r->element[1]->type != REDIS_REPLY_ARRAY || r->element[2]->type != REDIS_REPLY_ARRAY)
		return ig_redismsg_fail(bad, IG_BAD_SYNC, "the reply is not {now, members, states} nor {-1} "
					"(%zu elements)", r->elements);
	long long now = r->element[0]->integer;
	if (now < 1 || now >= (1LL << 53))
		return ig_redismsg_fail(bad, IG_BAD_SYNC, "Redis's clock %lld is out of range", now);
	out->now = now;
	const redisReply *ms = r->element[1], *sts = r->element[2];
	if (ms->elements % 2 || ms->elements == 0 || ms->elements / 2 > IG_REDISMSG_MEMBERS_MAX)
		return ig_redismsg_fail(bad, IG_BAD_SYNC, "the members are %zu elements, not 1 to %d names and "
					"scores", ms->elements, IG_REDISMSG_MEMBERS_MAX);
	if (!(out->members = calloc(ms->elements / 2, sizeof(*out->members))))
		return ig_redismsg_fail(bad, IG_BAD_SYNC, "out of memory for %zu members", ms->elements / 2);
	for (size_t i = 0; i < ms->elements / 2; i++) {
		const redisReply *name = ms->element[2 * i], *score = ms->element[2 * i + 1];
		const char *ns = ig_redismsg_str(name), *ss = ig_redismsg_str(score);
		struct ig_sync_member *m = &out->members[out->nmembers];
		if (!ns || !ig_redismsg_name_ok(ns, name->len)) {
			ig_redismsg_shown(shown, sizeof(shown), ns ? ns : "", ns ? name->len : 0);
			ig_redismsg_fail(bad, IG_BAD_SYNC, "member %zu's name '%s' (a %s) is not a gateway's name", i,
					 shown, type_name(name));
			goto fail;
		}
		/* the script drops those older than the window; one ahead of now
		 * is another's sync under a clock that has since stepped back */
		if (!ss || ig_redismsg_int(ss, score->len, now - live_ms, now + IG_REDISMSG_CLOCK_SLACK_MS, &m->score) < 0) {
			ig_redismsg_shown(shown, sizeof(shown), ss ? ss : "", ss ? score->len : 0);
			ig_redismsg_fail(bad, IG_BAD_SYNC, "member '%s''s score '%s' (a %s) is not Redis's clock "
					 "within the last %lld ms (or %d ms ahead)", ns, shown, type_name(score), live_ms,
					 IG_REDISMSG_CLOCK_SLACK_MS);
			goto fail;
		}
		memcpy(m->name, ns, name->len + 1);
		out->nmembers++;
	}
	qsort(out->members, out->nmembers, sizeof(*out->members), by_member_name);
	for (size_t i = 1; i < out->nmembers; i++)
		if (strcmp(out->members[i - 1].name, out->members[i].name) == 0) {
			ig_redismsg_fail(bad, IG_BAD_SYNC, "member '%s' is named twice", out->members[i].name);
			goto fail;
		}
	if (!member_find(out, me)) {
		ig_redismsg_fail(bad, IG_BAD_SYNC, "the members do not include this gateway ('%s')", me);
		goto fail;
	}
	if (sts->elements >= out->nmembers) {
		ig_redismsg_fail(bad, IG_BAD_SYNC, "%zu states for %zu other gateways", sts->elements,
				 out->nmembers - 1);
		goto fail;
	}
	if (sts->elements && !(out->states = calloc(sts->elements, sizeof(*out->states)))) {
		ig_redismsg_fail(bad, IG_BAD_SYNC, "out of memory for %zu states", sts->elements);
		goto fail;
	}
	for (size_t i = 0; i < sts->elements; i++) {
		const redisReply *e = sts->element[i];
		if (e->type != REDIS_REPLY_STRING) {
			ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "state %zu is a %s, not a string", i, type_name(e));
			goto fail;
		}
		struct ig_state *st = &out->states[out->nstates];
		if (ig_redismsg_state(e->str, e->len, st, bad) < 0)
			goto fail;
		out->nstates++;
		if ((nkeys += st->nkeys) > IG_REDISMSG_KEYS_MAX) {
			ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "more than %d key lines in the states", IG_REDISMSG_KEYS_MAX);
			goto fail;
		}
		if (strcmp(st->name, me) == 0 || !member_find(out, st->name)) {
			ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "a state names gateway '%s': %s", st->name,
					 strcmp(st->name, me) == 0 ? "this one" : "not a member");
			goto fail;
		}
		for (size_t j = 0; j + 1 < out->nstates; j++)
			if (strcmp(out->states[j].name, st->name) == 0) {
				ig_redismsg_fail(bad, IG_BAD_SYNC_STATE, "two states name gateway '%s'", st->name);
				goto fail;
			}
	}
	return 0;
fail:
	ig_redismsg_sync_free(out);
	return -1;
}

/* ---- the key sync ---- */

int ig_redismsg_keys(const redisReply *r, size_t nsent, struct ig_redismsg_bad *bad)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != nsent + 1)
		return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "the reply is a%s %s of %zu elements, not an array of %zu",
					r && r->type == REDIS_REPLY_ARRAY ? "n" : "", type_name(r),
					r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0, nsent + 1);
	for (size_t i = 0; i < nsent; i++)
		if (r->element[i]->type != REDIS_REPLY_STRING)
			return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "key %zu's figures are a%s %s, not a string", i,
						r->element[i]->type == REDIS_REPLY_ARRAY ? "n" : "",
						type_name(r->element[i]));
	if (r->element[nsent]->type != REDIS_REPLY_ARRAY)
		return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "the active keys are a %s, not an array",
					type_name(r->element[nsent]));
	return 0;
}

int ig_redismsg_key_figures(const char *s, size_t n, struct ig_key_figures *f, struct ig_redismsg_bad *bad)
{
	char shown[48];
	struct ig_redismsg_field fl[6];
	double v[6];
	int nf = ig_redismsg_fields(s, n, fl, 6);
	ig_redismsg_shown(shown, sizeof(shown), s, n);
	if (nf != 6)
		return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "'%s' is not six numbers", shown);
	for (int i = 0; i < 6; i++)
		if (ig_redismsg_num(fl[i].p, fl[i].n, 0, IG_REDISMSG_FIGURE_MAX, &v[i]) < 0) {
			char one[48];
			ig_redismsg_shown(one, sizeof(one), fl[i].p, fl[i].n);
			return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "figure %d '%s' of '%s' is not a finite number "
						"from 0 to %g", i + 1, one, shown, IG_REDISMSG_FIGURE_MAX);
		}
	if (v[2] < v[0] || v[3] < v[1])
		return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "'%s': the demand of all is less than this gateway's",
					shown);
	*f = (struct ig_key_figures){v[0], v[1], v[2], v[3], v[4], v[5]};
	return 0;
}

int ig_redismsg_active(const redisReply *r, size_t max, struct ig_redismsg_bad *bad)
{
	char shown[48];
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements > max)
		return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "the active keys are not an array of at most %zu", max);
	for (size_t i = 0; i < r->elements; i++) {
		const redisReply *e = r->element[i];
		const char *s = ig_redismsg_str(e);
		if (!s || e->type != REDIS_REPLY_STRING || !ig_redismsg_digest_ok(s, e->len)) {
			ig_redismsg_shown(shown, sizeof(shown), s ? s : "", s ? e->len : 0);
			return ig_redismsg_fail(bad, IG_BAD_KEY_SYNC, "active key %zu '%s' (a %s) is not a digest", i,
						shown, type_name(e));
		}
	}
	return 0;
}

/* ---- subscriptions ---- */

int ig_redismsg_pubsub(const redisReply *r, const char *kind, const char **payload, size_t *len,
		       struct ig_redismsg_bad *bad)
{
	const char *what = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1 ? ig_redismsg_str(r->element[0]) : NULL;
	if (!what)
		return ig_redismsg_fail(bad, kind, "a frame that is a %s, not {\"message\", CHANNEL, PAYLOAD}",
					type_name(r));
	if (strcmp(what, "subscribe") == 0 || strcmp(what, "unsubscribe") == 0)
		return 0; /* the subscription's own replies: nothing to read */
	if (strcmp(what, "message") != 0 || r->elements != 3 || r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[2]->type != REDIS_REPLY_STRING)
		return ig_redismsg_fail(bad, kind, "a frame that is not {\"message\", CHANNEL, PAYLOAD}");
	if (!(*payload = ig_redismsg_str(r->element[2])))
		return ig_redismsg_fail(bad, kind, "a message with a NUL byte");
	*len = r->element[2]->len;
	return 1;
}

int ig_redismsg_resp(const char *s, size_t n, struct ig_resp_msg *m, struct ig_redismsg_bad *bad)
{
	char shown[48];
	struct ig_redismsg_field f[4];
	long long owner;
	int nf = ig_redismsg_fields(s, n, f, 4);
	ig_redismsg_shown(shown, sizeof(shown), s, n);
	if (nf != 4)
		return ig_redismsg_fail(bad, IG_BAD_RESP, "'%s' is not 'NAME OWNER URL ID'", shown);
	if (!ig_redismsg_name_ok(f[0].p, f[0].n))
		return ig_redismsg_fail(bad, IG_BAD_RESP, "'%s': not a gateway's name", shown);
	if (ig_redismsg_int(f[1].p, f[1].n, 0, UINT32_MAX, &owner) < 0)
		return ig_redismsg_fail(bad, IG_BAD_RESP, "'%s': the owner is not from 0 to %u", shown, UINT32_MAX);
	if (f[2].n > IG_REDISMSG_URL_MAX || f[3].n > IG_REDISMSG_RESP_ID_MAX)
		return ig_redismsg_fail(bad, IG_BAD_RESP, "'%s': a URL of %zu bytes or an id of %zu (at most %d, %d)",
					shown, f[2].n, f[3].n, IG_REDISMSG_URL_MAX, IG_REDISMSG_RESP_ID_MAX);
	for (size_t i = 0; i < f[3].n; i++)
		if (f[3].p[i] < 0x21 || f[3].p[i] > 0x7e)
			return ig_redismsg_fail(bad, IG_BAD_RESP, "'%s': the id is not printable ASCII", shown);
	memcpy(m->name, f[0].p, f[0].n);
	m->name[f[0].n] = '\0';
	m->owner = (uint32_t)owner;
	memcpy(m->url, f[2].p, f[2].n);
	m->url[f[2].n] = '\0';
	memcpy(m->id, f[3].p, f[3].n);
	m->id[f[3].n] = '\0';
	return 0;
}

int ig_redismsg_data(const char *s, size_t n, struct ig_data_msg *m, struct ig_redismsg_bad *bad)
{
	char shown[48];
	struct ig_redismsg_field f[8];
	ig_redismsg_shown(shown, sizeof(shown), s, n);
	/* "K NAME " and then the rest */
	const char *sp = n > 2 ? memchr(s + 2, ' ', n - 2) : NULL;
	if (n < 5 || s[0] < 'a' || s[0] > 'z' || s[1] != ' ' || !sp)
		return ig_redismsg_fail(bad, IG_BAD_DATA, "'%s' is not 'KIND NAME ...'", shown);
	size_t nlen = (size_t)(sp - s - 2);
	if (!ig_redismsg_name_ok(s + 2, nlen))
		return ig_redismsg_fail(bad, IG_BAD_DATA, "'%s': not a gateway's name", shown);
	m->kind = s[0];
	memcpy(m->name, s + 2, nlen);
	m->name[nlen] = '\0';
	m->rest = sp + 1;
	m->restlen = n - (size_t)(m->rest - s);
	if (m->restlen == 0 || m->restlen > IG_REDISMSG_DATA_REST_MAX ||
	    ig_redismsg_fields(m->rest, m->restlen, f, 8) < 1)
		return ig_redismsg_fail(bad, ig_redismsg_data_kind(m->kind), "'%s': what follows the name is not 1 to %d "
					"bytes of fields", shown, IG_REDISMSG_DATA_REST_MAX);
	return 0;
}

const char *ig_redismsg_data_kind(char kind)
{
	switch (kind) {
	case 'b': return IG_BAD_DATA_BATCH;
	case 'p': return IG_BAD_DATA_PROGRESS;
	case 'c': return IG_BAD_DATA_CANCEL;
	case 'f':
	case 'd': return IG_BAD_DATA_FILE;
	default: return IG_BAD_DATA;
	}
}

/* ---- a reply described, for a log line (moved from redis.c) ---- */

void ig_redismsg_quoted(char *out, size_t size, size_t max, const char *s, size_t n)
{
	ig_redismsg_shown(out, size < max + 4 ? size : max + 4, s, n);
	for (char *p = out; *p; p++)
		if (*p == '"' || *p == '\\')
			*p = '?';
}

static const char *resp_type_name(int type)
{
	switch (type) {
	case REDIS_REPLY_STRING: return "bulk";
	case REDIS_REPLY_ARRAY: return "array";
	case REDIS_REPLY_INTEGER: return "integer";
	case REDIS_REPLY_NIL: return "nil";
	case REDIS_REPLY_STATUS: return "status";
	case REDIS_REPLY_ERROR: return "error";
	}
	return "?";
}

void ig_redismsg_describe(const redisReply *rep, char *out, size_t size)
{
	char s[40];
	if (rep->type != REDIS_REPLY_ARRAY) {
		bool text = rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_ERROR;
		if (text)
			ig_redismsg_quoted(s, sizeof(s), 24, rep->str, rep->len);
		snprintf(out, size, "%s%s%s%s", resp_type_name(rep->type), text ? " \"" : "", text ? s : "", text ? "\"" : "");
		return;
	}
	int used = snprintf(out, size, "array of %zu", rep->elements);
	for (size_t i = 0; i < rep->elements && i < 4 && used > 0 && (size_t)used < size; i++) {
		const redisReply *e = rep->element[i];
		s[0] = '\0';
		if (e->type == REDIS_REPLY_STRING && i == 0)
			ig_redismsg_quoted(s, sizeof(s), 16, e->str, e->len);
		used += snprintf(out + used, size - (size_t)used, "%s%s%s%s%s", i ? ", " : ": ", resp_type_name(e->type),
				 *s ? " \"" : "", s, *s ? "\"" : "");
	}
	if (rep->elements > 4 && used > 0 && (size_t)used < size)
		snprintf(out + used, size - (size_t)used, ", ...");
}
