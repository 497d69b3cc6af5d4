/* The arithmetic of a cluster's shares (cluster_share.h): from the others'
 * states and this gateway's, the view of them. Pure: everything it knows
 * comes in through its arguments, and all it makes is the view. */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_share.h"
#include "infergate/util.h"

#define KEY_IDLE_MS 10000

double ig_cluster_share(double mine, double others, long live)
{
	if (live < 1)
		live = 1;
	/* NaN too (every comparison with it is false): a figure that is none
	 * is no demand, and huge ones are cut so that their sum stays finite */
	mine = mine >= 0 ? (mine < 1e15 ? mine : 1e15) : 0;
	others = others >= 0 ? (others < 1e15 ? others : 1e15) : 0;
	double eps = (mine + others > 1.0 ? mine + others : 1.0) / (10.0 * (double)live);
	return (mine + eps) / (mine + others + (double)live * eps);
}

/* Gateway me's part of `free` slots, split among the eligible gateways (by
 * name: the same order for all) in proportion to w, and the remainder one
 * slot each to the eligible in turn from `turn` (rotated each second of
 * Redis's clock and by backend or key, so that no free slot is claimed
 * twice: a rounded-up part each claimed one slot of a 2-slot server four
 * times). */
static long part_of(long free, const double *w, const bool *elig, size_t n, size_t me, unsigned long long turn)
{
	if (free <= 0 || !elig[me])
		return 0;
	double sum = 0;
	size_t ne = 0, pos = 0;
	for (size_t i = 0; i < n; i++)
		if (elig[i]) {
			sum += w[i];
			pos += i < me;
			ne++;
		}
	if (sum <= 0)
		return 0;
	long given = 0, mine = 0;
	for (size_t i = 0; i < n; i++)
		if (elig[i]) {
			long p = (long)((double)free * w[i] / sum);
			given += p;
			if (i == me)
				mine = p;
		}
	long rem = free - given;
	size_t off = (pos + ne - (size_t)(turn % ne)) % ne;
	return mine + ((long)off < rem ? 1 : 0);
}

long ig_cluster_claim(long total, const long *claim, const double *w, size_t n, size_t me, unsigned long long turn)
{
	bool *elig = calloc(n, sizeof(*elig));
	double sumw = 0;
	long taken = 0;
	size_t ne = 0;
	if (!elig)
		return claim[me] > 0 ? claim[me] : -1;
	for (size_t i = 0; i < n; i++) {
		sumw += w[i];
		taken += claim[i];
	}
	for (size_t i = 0; i < n && sumw > 0; i++)
		if (w[i] > 0 && (double)claim[i] < (double)total * w[i] / sumw) {
			elig[i] = true;
			ne++;
		}
	for (size_t i = 0; i < n && ne == 0; i++)
		elig[i] = w[i] > 0;
	/* with requests waiting (a weight), holding more than its fair part
	 * while another gateway waits under its own, or while the claims
	 * together are more than there is (as after Redis was away and each
	 * ran alone: each would hold on to what it ran then and leave the
	 * others nothing): no more than the fair part from now (what it holds
	 * above goes as its requests end; the others see it held until then) */
	double fair = sumw > 0 ? ceil((double)total * w[me] / sumw) : 0;
	long cap = w[me] > 0 && (double)claim[me] > fair && (ne > (size_t)elig[me] || taken > total)
			   ? (long)fair
			   : claim[me] + part_of(total - taken, w, elig, n, me, turn);
	free(elig);
	return cap >= 1 ? cap : -1; /* nothing more until the next sync (0 would be no cap) */
}

/* The cap in force after a sync's reply: the one computed then (comp), but
 * no more than the claim the state sent with that sync made (sent): each
 * gateway whose sync ran after it counts that claim, and it counted the
 * claims of those whose sync ran before, so that together they never hold
 * more than there is (a cap put in force when sent, before the reply,
 * raced another's computed from the older claim: 12 running on 8 slots).
 * 0: no cap (alone, or a backend whose capacity is not stated). */
static long in_force(long comp, long sent)
{
	if (comp <= 0)
		return comp;
	if (sent <= 0)
		return -1;
	return comp < sent ? comp : sent;
}

/* One live gateway: its name, what it claims on each of our backends,
 * whether it holds high or normal requests waiting, and its weight in the
 * split of free slots (its keys' weights, each key's shared between the
 * gateways where it waits as its requests there). */
struct peer {
	char name[80];
	size_t orig;   /* its index before the peers are sorted by name */
	long *claim;   /* per backend of me->backends */
	bool hn;
	double w;
};

/* A key line of a state: "k DIGEST WAITING WEIGHT CLAIM". */
struct kline {
	char digest[65];
	size_t g;      /* its gateway: an index in the peers */
	long wait, weight, claim;
};

static int by_peer_name(const void *a, const void *b)
{
	return strcmp(((const struct peer *)a)->name, ((const struct peer *)b)->name);
}

static int by_digest(const void *a, const void *b)
{
	return strcmp(((const struct kline *)a)->digest, ((const struct kline *)b)->digest);
}

static int model_by_name(const void *a, const void *b)
{
	return strcmp(((const struct ig_cluster_view_model *)a)->name, ((const struct ig_cluster_view_model *)b)->name);
}

/* A key as the states name it (the anonymous one's digest is ""). */
static const char *key_name(const char *digest)
{
	return digest[0] ? digest : "-";
}

static unsigned long long fnv(const char *s)
{
	return ig_hash64(s, strlen(s), 0); /* FNV-1a (util.h) */
}

/* The weights of the split (struct peer's w): each key waiting somewhere
 * gives its weight to the gateways where it waits, in proportion to its
 * requests waiting there; when some gateway holds high or normal requests
 * waiting, only those that do get a part. None waiting anywhere: equal. */
static void weigh(struct peer *pv, size_t n, const struct kline *kl, size_t nk)
{
	bool hn = false;
	double sum = 0;
	for (size_t g = 0; g < n; g++)
		hn |= pv[g].hn;
	for (size_t i = 0; i < nk;) {
		size_t j = i;
		long total = 0;
		for (; j < nk && strcmp(kl[j].digest, kl[i].digest) == 0; j++)
			total += kl[j].wait;
		for (; total > 0 && i < j; i++)
			pv[kl[i].g].w += (double)(kl[i].weight > 0 ? kl[i].weight : 1) * (double)kl[i].wait / (double)total;
		i = j;
	}
	for (size_t g = 0; g < n; g++) {
		if (hn && !pv[g].hn)
			pv[g].w = 0;
		sum += pv[g].w;
	}
	for (size_t g = 0; g < n && sum <= 0; g++)
		pv[g].w = 1;
}

/* A gateway with nothing waiting lets go of its part for a burst once the
 * others have held requests waiting at every sync for 3 sync periods (and
 * none is free for them). */
static uint64_t release_ms(const struct ig_share_sync *sy)
{
	return 3 * sy->sync_ms;
}

/* How long a refused request of a key with rpm should wait when `live`
 * gateways share it: its retry may reach any of them (a balancer in
 * front), and each refills a token in about 60 s x live / rpm. */
static uint64_t retry_floor(long rpm, long live)
{
	return live > 1 && rpm > 0 ? (uint64_t)(60000 * live / rpm) : 0;
}

/* The gateways of a sync, sorted by name (the order every gateway sees),
 * their key lines by digest, and where this one is among them. */
struct peers {
	struct peer *pv;
	long *claims;
	size_t n, me, nb;
	struct kline *kl;
	size_t nk, capk;
};

static void peers_free(struct peers *p)
{
	free(p->pv);
	free(p->claims);
	free(p->kl);
}

/* A key's max_inflight across the gateways: split as a backend's slots
 * (ig_cluster_claim), all weights equal among the gateways where it waits, or
 * where it ran lately when it waits nowhere (each keeps a part for a
 * burst). A gateway where it has not run for KEY_IDLE_MS claims nothing:
 * its next request waits a sync or two for a part (so that the states
 * carry only the keys in use). Alone: its even part of the last count of
 * gateways seen. e: its entry in the new view, holding the last view's
 * history (or zeros); *more: it may run more than before. */
static void split_key(const struct ig_share_sync *sy, const struct ig_share_key *k, struct ig_cluster_view_key *e,
		      const struct peers *ps, bool *more)
{
	long old = e->claim_cap, cap = 0;
	uint64_t now = sy->now_ms;
	size_t n = ps->n, me = ps->me;
	if (k->waiting > 0 || k->inflight > 0 || k->completed != e->seen_completed)
		e->active_until_ms = now + KEY_IDLE_MS;
	e->seen_completed = k->completed;
	if (ps->pv && n <= 1) { /* the only live gateway: all of it */
		if (old != 0)
			*more = true;
		e->claim_cap = e->claim_next = 0;
		return;
	}
	if (!ps->pv) {
		long live = sy->live_last > 1 ? sy->live_last : 1;
		cap = live > 1 ? (k->max_inflight / live > 0 ? k->max_inflight / live : 1) : 0;
		e->claim_cap = e->claim_next = cap;
		if (cap == 0 || cap > old)
			*more = true;
		return;
	}
	if (now >= e->active_until_ms) {
		e->claim_cap = e->claim_next = -1;
		return;
	}
	long *claim = calloc(n, sizeof(*claim));
	double *w = calloc(n, sizeof(*w));
	bool *seen = calloc(n, sizeof(*seen));
	if (!claim || !w || !seen) {
		free(claim);
		free(w);
		free(seen);
		return;
	}
	struct kline probe;
	snprintf(probe.digest, sizeof(probe.digest), "%s", key_name(k->digest));
	const struct kline *kl = ps->kl, *at = ps->nk ? bsearch(&probe, kl, ps->nk, sizeof(*kl), by_digest) : NULL;
	while (at && at > kl && strcmp(at[-1].digest, probe.digest) == 0)
		at--;
	bool waits = k->waiting > 0, others_wait = false;
	for (; at && at < kl + ps->nk && strcmp(at->digest, probe.digest) == 0; at++)
		if (at->g != me) {
			claim[at->g] += at->claim;
			w[at->g] = at->wait > 0;
			others_wait |= at->wait > 0;
			seen[at->g] = true;
		}
	waits |= others_wait;
	if (!others_wait)
		e->others_wait_ms = 0;
	else if (!e->others_wait_ms)
		e->others_wait_ms = now;
	/* what it holds: its requests there, and the part it claimed (as a
	 * backend's: a slot its request just freed is its own to refill) */
	claim[me] = k->sent > k->inflight ? k->sent : k->inflight;
	w[me] = k->waiting > 0;
	seen[me] = true;
	for (size_t g = 0; g < n && !waits; g++)
		w[g] = seen[g];
	long others = 0;
	for (size_t g = 0; g < n; g++)
		others += g == me ? 0 : claim[g];
	if (k->waiting == 0 && e->others_wait_ms && now - e->others_wait_ms >= release_ms(sy) &&
	    k->max_inflight - others - claim[me] <= 0)
		claim[me] = k->inflight; /* another waits and none is free: its part for a burst goes */
	cap = ig_cluster_claim(k->max_inflight, claim, w, n, me,
			       (unsigned long long)(sy->redis_now_ms / 1000) + fnv(k->digest));
	free(claim);
	free(w);
	free(seen);
	e->claim_next = cap;
	e->claim_cap = in_force(cap, k->sent);
	if (e->claim_cap > old || (e->claim_cap < 0) != (old < 0))
		*more = true;
}

/* The others' states read into ps (each number within
 * IG_REDISMSG_CLAIM_MAX, and no more states than IG_REDISMSG_MEMBERS_MAX:
 * the sums stay far from LONG_MAX), their models' waiting and headroom
 * into v's. Returns 0 or -1 (out of memory). */
static int read_states(const struct ig_share_sync *sy, const struct ig_share_mine *me, struct peers *ps,
		       struct ig_cluster_view *v)
{
	size_t nb = me->nbackends ? me->nbackends : 1;
	ps->nb = nb;
	ps->pv = calloc(sy->nstates + 1, sizeof(*ps->pv));
	ps->claims = calloc((sy->nstates + 1) * nb, sizeof(*ps->claims));
	if (!ps->pv || !ps->claims)
		return -1;
	for (size_t k = 0; k < sy->nstates; k++) {
		const struct ig_state *st = &sy->states[k];
		struct peer *p = &ps->pv[ps->n];
		p->claim = ps->claims + ps->n * nb;
		snprintf(p->name, sizeof(p->name), "%s", st->name);
		struct ig_state_line line, *l = &line;
		for (size_t at = 0; ig_redismsg_state_next(st, &at, l);) {
			long val = (long)l->v[0];
			struct ig_cluster_view_model probe = {.name = l->name}, *m;
			if (l->what == 'k') {
				struct kline *grown = ig_grow(ps->kl, &ps->capk, ps->nk, sizeof(*ps->kl), 64);
				if (!grown)
					continue;
				ps->kl = grown;
				ps->kl[ps->nk] = (struct kline){.g = ps->n, .wait = val, .weight = (long)l->v[1], .claim = (long)l->v[2]};
				snprintf(ps->kl[ps->nk++].digest, sizeof(ps->kl->digest), "%.64s", l->name); /* a digest or "-" */
			} else if (l->what == 'b') {
				for (size_t i = 0; i < me->nbackends; i++)
					if (strcmp(me->backends[i].url, l->name) == 0)
						p->claim[i] += val;
			} else if (l->what == 'm') {
				if (v->nmodels && (m = bsearch(&probe, v->models, v->nmodels, sizeof(*m), model_by_name)))
					m->others_waiting += val;
				p->hn = true;
			} else if (l->what == 'h') {
				if (v->nmodels && (m = bsearch(&probe, v->models, v->nmodels, sizeof(*m), model_by_name)))
					m->others_headroom += val;
			}
		}
		ps->n++;
	}
	return 0;
}

/* This gateway among the peers, then all sorted by name (the order every
 * gateway sees), the key lines by digest, and the weights. Returns 0 or
 * -1 (out of memory). */
static int place_me(const struct ig_share_mine *me, struct peers *ps, size_t my_hn)
{
	struct peer *p = &ps->pv[ps->n];
	p->claim = ps->claims + ps->n * ps->nb;
	snprintf(p->name, sizeof(p->name), "%s", me->name);
	p->hn = my_hn > 0;
	for (size_t i = 0; i < me->nkeys; i++) {
		const struct ig_share_key *k = &me->keys[i];
		if (k->waiting == 0)
			continue;
		struct kline *grown = ig_grow(ps->kl, &ps->capk, ps->nk, sizeof(*ps->kl), 64);
		if (!grown)
			return -1;
		ps->kl = grown;
		ps->kl[ps->nk] = (struct kline){.g = ps->n, .wait = (long)k->waiting, .weight = k->weight};
		snprintf(ps->kl[ps->nk++].digest, sizeof(ps->kl->digest), "%s", key_name(k->digest));
	}
	ps->n++;
	/* the key lines name peers by index: renumbered after the sort */
	for (size_t g = 0; g < ps->n; g++)
		ps->pv[g].orig = g;
	qsort(ps->pv, ps->n, sizeof(*ps->pv), by_peer_name);
	size_t *inv = malloc(ps->n * sizeof(*inv));
	if (!inv)
		return -1;
	for (size_t g = 0; g < ps->n; g++)
		inv[ps->pv[g].orig] = g;
	for (size_t i = 0; i < ps->nk; i++)
		ps->kl[i].g = inv[ps->kl[i].g];
	for (size_t g = 0; g < ps->n; g++)
		if (strcmp(ps->pv[g].name, me->name) == 0)
			ps->me = g;
	free(inv);
	if (ps->nk)
		qsort(ps->kl, ps->nk, sizeof(*ps->kl), by_digest);
	weigh(ps->pv, ps->n, ps->kl, ps->nk);
	return 0;
}

/* Backend i's entry: what the others run there (taken from the capacity
 * it states) and this gateway's cap until the next sync (its part of the
 * free slots). *more: it may run more there than before. */
static void split_backend(const struct ig_share_sync *sy, const struct ig_share_backend *b, size_t i,
			  const struct peers *ps, uint64_t waited, struct ig_cluster_view_backend *e, bool *more)
{
	const struct ig_cluster_view_backend *was = ig_cluster_view_backend(sy->prev, b->id);
	size_t n = ps->n, me = ps->me;
	e->id = b->id;
	/* with others, its learned limit is a total too (capacity.h's shared);
	 * with Redis away too, the others it last saw still send there (a
	 * queue it sees then is theirs, not a smaller server) */
	e->shared = (sy->joined || sy->live_last > 1) && b->stated;
	bool stated = sy->joined && e->shared;
	long others = 0;
	for (size_t g = 0; stated && g < n; g++)
		if (g != me)
			others += ps->pv[g].claim[i];
	if (others < (was ? was->others_inflight : 0))
		*more = true;
	e->others_inflight = others;
	/* Until the next sync, the slots free now are split with the other
	 * live gateways: each takes its part, so that together they do not
	 * send the backend more than it runs (each would otherwise see them
	 * all free, and a burst through two gateways at once sends it twice
	 * its slots). Alone: no cap. */
	long cap = 0;
	if (stated && n > 1) {
		long mine = b->inflight;
		/* With a weight in the split (requests waiting here, or none
		 * waiting anywhere), the slots it told the others it holds stay
		 * its own: a request of it that just ended leaves a slot it
		 * refills, not one for all (ig_cluster_claim cuts it to its fair
		 * part when another waits under its own). Without (it has none
		 * waiting while others have; or only low work while others hold
		 * high or normal: weigh), it keeps them while some are free for
		 * the others, or while the others have not waited 3 sync periods
		 * at every sync (else two gateways taking turns with one request
		 * each made each wait a sync for its part, for good: 200 ms a
		 * request), and then lets go of all but its requests there;
		 * after 10 times as long even with some free as it sees them (the
		 * others may know the backend smaller, learned from a queue).
		 * Letting go of only as many slots as they wait for was measured
		 * worse (interactive p99 808 ms against 525, the bulk run no
		 * faster). */
		if (b->sent > mine &&
		    (ps->pv[me].w > 0 || waited < release_ms(sy) ||
		     (b->cur - others - b->sent > 0 && waited < 10 * release_ms(sy))))
			mine = b->sent;
		ps->pv[me].claim[i] = mine;
		long *cv = malloc(n * sizeof(*cv));
		double *w = malloc(n * sizeof(*w));
		for (size_t g = 0; cv && w && g < n; g++) {
			cv[g] = ps->pv[g].claim[i];
			w[g] = ps->pv[g].w;
		}
		cap = cv && w ? ig_cluster_claim(b->cur, cv, w, n, me, (unsigned long long)(sy->redis_now_ms / 1000) + fnv(b->url))
			      : -1;
		free(cv);
		free(w);
	}
	long old = was ? was->claim_cap : 0, now = in_force(cap, b->sent);
	/* Redis away: the others it last saw still send there; its even part
	 * of what the backend states, as for the keys' limits */
	if (!sy->joined && sy->live_last > 1 && e->shared) {
		long part = b->cur / sy->live_last;
		now = cap = part > 0 ? part : 1;
	}
	e->claim_next = cap;
	e->claim_cap = now;
	if (now > old || (now < 0) != (old < 0))
		*more = true;
}

/* v's key entries: every key of me's, with the last view's numbers. */
static int copy_keys(struct ig_cluster_view *v, const struct ig_cluster_view *prev, const struct ig_share_key *keys,
		     size_t nkeys)
{
	for (size_t i = 0; i < nkeys; i++) {
		const struct ig_cluster_view_key *was = ig_cluster_view_key(prev, keys[i].digest);
		struct ig_cluster_view_key *e = ig_cluster_view_add_key(v, keys[i].digest);
		if (!e)
			return -1;
		if (was)
			*e = *was;
	}
	return 0;
}

struct ig_cluster_view *ig_cluster_share_view(const struct ig_share_sync *sy, const struct ig_share_mine *me,
					      struct ig_share_news *news)
{
	struct ig_cluster_view *v = calloc(1, sizeof(*v));
	struct peers ps = {0};
	size_t my_hn = 0; /* this gateway's high and normal requests waiting */
	bool more = false;
	news->drain = false;
	if (!v)
		return NULL;
	v->seq = sy->prev ? sy->prev->seq + 1 : 1;
	v->joined = sy->joined;
	v->live = sy->live_last > 1 ? sy->live_last : 1;
	v->models = me->nmodels ? calloc(me->nmodels, sizeof(*v->models)) : NULL;
	v->backends = me->nbackends ? calloc(me->nbackends, sizeof(*v->backends)) : NULL;
	if ((me->nmodels && !v->models) || (me->nbackends && !v->backends))
		goto fail;
	for (size_t i = 0; i < me->nmodels; i++) {
		if (!(v->models[v->nmodels].name = strdup(me->models[i].name)))
			goto fail;
		v->nmodels++;
		my_hn += me->models[i].hn_waiting;
	}
	if (v->nmodels)
		qsort(v->models, v->nmodels, sizeof(*v->models), model_by_name);
	if (sy->joined && (read_states(sy, me, &ps, v) < 0 || place_me(me, &ps, my_hn) < 0))
		goto fail;
	/* a run of the others' waiting for a model goes on from the last view */
	for (size_t i = 0; i < v->nmodels; i++) {
		struct ig_cluster_view_model *m = &v->models[i];
		const struct ig_cluster_view_model *was = ig_cluster_view_model(sy->prev, m->name);
		if (m->others_waiting > 0)
			m->waiting_since = was && was->others_waiting > 0 ? was->waiting_since : v->seq;
	}
	bool others_wait = false;
	v->hurry = my_hn > 0;
	for (size_t i = 0; i < ps.nk; i++)
		others_wait |= ps.kl[i].wait > 0;
	for (size_t g = 0; g < ps.n; g++)
		v->hurry |= ps.pv[g].hn;
	uint64_t since = sy->prev ? sy->prev->others_wait_ms : 0;
	v->others_wait_ms = !others_wait ? 0 : since ? since : sy->now_ms;
	uint64_t waited = v->others_wait_ms ? sy->now_ms - v->others_wait_ms : 0;
	for (size_t i = 0; i < me->nbackends; i++)
		split_backend(sy, &me->backends[i], i, &ps, waited, &v->backends[v->nbackends++], &more);
	if (copy_keys(v, sy->prev, me->keys, me->nkeys) < 0)
		goto fail;
	for (size_t i = 0; i < me->nkeys; i++) {
		struct ig_cluster_view_key *e = &v->keys[i];
		if (me->keys[i].max_inflight > 0)
			split_key(sy, &me->keys[i], e, &ps, &more);
		else
			e->claim_cap = e->claim_next = 0;
	}
	peers_free(&ps);
	ig_cluster_view_seal(v);
	/* slots the others let go, or low work they no longer hold back */
	news->drain = more || !sy->joined;
	for (size_t i = 0; i < me->nmodels && !news->drain; i++)
		news->drain = me->models[i].qlen > 0 && ig_cluster_others_waiting(v, me->models[i].name) == 0;
	return v;
fail:
	peers_free(&ps);
	ig_cluster_view_free(v);
	return NULL;
}

struct ig_cluster_view *ig_cluster_share_rekey(const struct ig_cluster_view *prev, const struct ig_share_key *keys,
					       size_t nkeys)
{
	struct ig_cluster_view *v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	if (prev) {
		v->seq = prev->seq + 1;
		v->live = prev->live;
		v->joined = prev->joined;
		v->others_wait_ms = prev->others_wait_ms;
		v->hurry = prev->hurry;
	} else {
		v->seq = 1;
		v->live = 1;
	}
	size_t nb = prev ? prev->nbackends : 0, nm = prev ? prev->nmodels : 0;
	v->backends = nb ? malloc(nb * sizeof(*v->backends)) : NULL;
	v->models = nm ? calloc(nm, sizeof(*v->models)) : NULL;
	if ((nb && !v->backends) || (nm && !v->models))
		goto fail;
	if (nb)
		memcpy(v->backends, prev->backends, nb * sizeof(*v->backends));
	v->nbackends = nb;
	for (size_t i = 0; i < nm; i++) {
		v->models[i] = prev->models[i];
		if (!(v->models[i].name = strdup(prev->models[i].name)))
			goto fail;
		v->nmodels++;
	}
	if (copy_keys(v, prev, keys, nkeys) < 0)
		goto fail;
	return v; /* the caller sets the keys' figures, then seals it */
fail:
	ig_cluster_view_free(v);
	return NULL;
}

void ig_cluster_share_key_figures(struct ig_cluster_view_key *e, const struct ig_key_figures *f, long rpm, long tpm,
				  long live, double *req, double *tok)
{
	*req = ig_cluster_share(f->mreq, f->req - f->mreq, live);
	*tok = ig_cluster_share(f->mtok, f->tok - f->mtok, live);
	/* the others' buckets hold no more than the key's whole limit */
	e->others_req = f->lreq < (double)rpm ? f->lreq : (double)rpm;
	e->others_tok = f->ltok < (double)tpm ? f->ltok : (double)tpm;
	e->retry_floor_ms = retry_floor(rpm, live);
}

double ig_cluster_share_key_even(struct ig_cluster_view_key *e, long rpm, long live)
{
	e->others_req = e->others_tok = 0;
	e->retry_floor_ms = retry_floor(rpm, live);
	return 1.0 / (double)(live > 0 ? live : 1);
}
