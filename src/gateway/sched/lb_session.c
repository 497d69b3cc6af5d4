/* session: the requests of one session go to the same backend of their
 * model, so its prefix cache holds the conversation, and move only when
 * that backend is overloaded. The session key is the header X-Session-Id,
 * else the body's `user`, else the API key (admission.c hashes it);
 * requests with none go to the least loaded.
 *
 * Rendezvous (highest-random-weight) hashing: each backend scores
 * hash(session, backend URL) and the highest wins, so a backend that
 * leaves moves only its own sessions and every gateway that sees the same
 * backends agrees without talking. Bounded load (Mirrokni, Thorup and
 * Zadimoghaddam, "Consistent Hashing with Bounded Loads", 2018): a backend
 * is passed over while it holds more than 1.25x its weighted share of the
 * pool's requests in flight (this one counted), then the next in hash
 * order takes the request; so one hot session, or an unlucky split of
 * sessions, never piles onto one server. SGLang's model gateway and vLLM's
 * router offer consistent hashing by session; the bound is what keeps it
 * from hot-spotting. */
#include "config.h"

#include "infergate/log.h"
#include "sched/policy.h"

/* The bound: 1.25x the mean, as fractions of 4. */
#define CAP_QUARTERS 5

/* FNV-1a over the URL, then a 64-bit finaliser (splitmix64's) over it and
 * the session: every bit of both moves the score. */
static uint64_t score(uint64_t session, const char *url)
{
	uint64_t h = 1469598103934665603ull;
	for (const unsigned char *p = (const unsigned char *)url; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	uint64_t z = h ^ session;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* (sa, ia) comes after (sb, ib) in hash order: a lower score, or an equal
 * one at a later index. */
static bool after(uint64_t sa, size_t ia, uint64_t sb, size_t ib)
{
	return sa < sb || (sa == sb && ia > ib);
}

static size_t pick(void *state IG_UNUSED, const struct ig_pick_set *set, const struct ig_pick_req *rq)
{
	if (!rq->session)
		return ig_policy_least_loaded(set);
	/* The pool's load and weight, over the backends that take requests. */
	long total = 1, weights = 0; /* this request counted */
	for (size_t i = 0; i < set->npool; i++) {
		const struct ig_backend *b = set->pool[i];
		if (!ig_backend_usable(b))
			continue;
		total += ig_policy_load(b);
		weights += b->weight;
	}
	if (weights <= 0)
		weights = 1;
	/* The candidates in hash order, highest score first (a selection, not
	 * a sort: the first is nearly always taken); the first under its cap
	 * wins. */
	uint64_t last_s = UINT64_MAX;
	size_t last_i = SIZE_MAX;
	for (size_t round = 0; round < set->k; round++) {
		size_t top = SIZE_MAX;
		uint64_t ts = 0;
		for (size_t i = 0; i < set->k; i++) {
			uint64_t s = score(rq->session, set->cand[i]->key);
			if ((round == 0 || after(s, i, last_s, last_i)) && (top == SIZE_MAX || after(ts, top, s, i))) {
				top = i;
				ts = s;
			}
		}
		const struct ig_backend *b = set->cand[top];
		/* load + 1 <= 1.25 x total x its weight's share, rounded up */
		long cap = (CAP_QUARTERS * total * b->weight + 4 * weights - 1) / (4 * weights);
		if (ig_policy_load(b) + 1 <= cap)
			return top;
		last_s = ts;
		last_i = top;
	}
	/* Every candidate past its cap (a pool near its limits): the least
	 * loaded, as without a session. */
	return ig_policy_least_loaded(set);
}

const struct ig_policy ig_lb_session = {
	.name = "session",
	.needs = IG_POLICY_NEEDS_SESSION,
	.pick = pick,
};
