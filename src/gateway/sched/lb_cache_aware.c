/* cache-aware: requests go where their prompt's prefix was sent, so the
 * server's prefix cache (SGLang's radix cache, vLLM's prefix caching) skips
 * that part of the prefill. Two ways to weigh a match against load
 * (cache_aware.mode):
 *
 * - cost (default): the candidate with the least work a new request waits
 *   behind there, in tokens: the prefill of its requests not yet started
 *   (their prompts less what was cached), plus this prompt less the prefix
 *   that backend was sent, times prefill_weight; plus the KV its requests
 *   hold (prompt and output so far). After Dynamo's KV router
 *   (docs/router/kv_cache_routing.md in ai-dynamo/dynamo: cost =
 *   overlap_score_weight x potential prefill blocks + potential active
 *   blocks, the lowest wins), with the prefill of requests already routed
 *   counted as Dynamo's slot manager does until their first token. A
 *   prefix every backend holds (a shared system prompt) costs the same
 *   everywhere and so decides nothing; a long conversation's history
 *   outweighs a small difference in load, not a queue of prefills.
 *   Measured on the Mooncake conversation trace (bench/trace.py), where
 *   prompts run from 100 to 126,000 tokens and a count of requests says
 *   little about the work behind them.
 * - threshold: the candidate sent the longest prefix when it covers
 *   threshold_percent of the prompt and the load guard lets it; else the
 *   least loaded. After SGLang's gateway (sgl-router/src/policies/
 *   cache_aware.rs: a match rate over cache_threshold wins unless the fleet
 *   is imbalanced, max - min > balance_abs_threshold and max > min x
 *   balance_rel_threshold), with two differences: the guard weighs the
 *   preferred backend's own load against the least loaded (so one hot
 *   conversation does not turn affinity off for every other), and a weak
 *   match goes to the least loaded rather than to the backend with the
 *   smallest record.
 *
 * What each backend was sent lives in an ig_affinity (affinity.h),
 * forgotten when the backend goes down. What it holds, when its engine
 * publishes its KV events (fleet/kvevents.c), is in the exact index
 * (kvindex.h): for a backend whose events flow (backend.h kv_exact) a
 * match is the engine's own word, the prefix it holds now, whoever sent
 * it and whatever it evicted; for the others, the record of what was
 * sent. The index is keyed by the same chain of 16-token blocks the
 * request carries (blockhash.h ig_block_chain_ids), so a match reads it
 * without hashing again.
 * A backend with data-parallel ranks counts its best rank's match: the
 * engine chooses the rank itself. */
#include "config.h"
#include <stdlib.h>

#include "conf/conf.h"
#include "infergate/blockhash.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/affinity.h"
#include "sched/kvindex.h"
#include "sched/policy.h"

/* Tokens in a block of the chain: 64 bytes of text at about 4 bytes a
 * token (blockhash.h). */
#define BLOCK_TOKENS (IG_BLOCK_BYTES / 4)

struct cache_aware {
	struct ig_affinity *sent;   /* prefixes sent to each backend */
	size_t max_blocks;
	int mode;                   /* enum ig_cache_mode */
	double prefill_weight;
	long threshold_percent, balance_abs;
	double balance_rel;
	/* With the exact index, per request started: its prompt in whole
	 * blocks, the longest prefix any backend's engine held at the pick
	 * (an oracle's pick, the engines' own caches read then) and the one
	 * the chosen backend held, in tokens. What bench/trace.py compares. */
	_Atomic uint64_t ex_prompt, ex_best, ex_chosen;
};

static void take_settings(struct cache_aware *c, const struct ig_conf *cfg)
{
	c->mode = cfg->cache_mode;
	c->prefill_weight = cfg->cache_prefill_weight;
	c->threshold_percent = cfg->cache_threshold_percent;
	c->balance_abs = cfg->cache_balance_abs;
	c->balance_rel = cfg->cache_balance_rel;
}

static void cache_free(void *state)
{
	struct cache_aware *c = state;
	if (c)
		ig_affinity_free(c->sent);
	free(c);
}

static int init(void **state, const struct ig_conf *cfg)
{
	struct cache_aware *c = calloc(1, sizeof(*c));
	if (!c || !(c->sent = ig_affinity_new((size_t)cfg->cache_max_blocks))) {
		free(c);
		return -1;
	}
	c->max_blocks = (size_t)cfg->cache_max_blocks;
	take_settings(c, cfg);
	*state = c;
	return 0;
}

/* A reload: new thresholds at once; a new record size starts the records
 * anew. Returns 0 or -1 (out of memory: the old records kept). */
static int reconfigure(void *state, const struct ig_conf *cfg)
{
	struct cache_aware *c = state;
	take_settings(c, cfg);
	if ((size_t)cfg->cache_max_blocks == c->max_blocks)
		return 0;
	struct ig_affinity *a = ig_affinity_new((size_t)cfg->cache_max_blocks);
	if (!a)
		return -1;
	ig_affinity_free(c->sent);
	c->sent = a;
	c->max_blocks = (size_t)cfg->cache_max_blocks;
	return 0;
}

/* The exact index and its sources (fleet.kvindex), NULL without
 * kv_events; set once at boot, before any pick. */
static struct ig_kvindex *kv_index;
static size_t kv_nsrc;

void ig_cache_aware_use_index(struct ig_kvindex *ix, size_t nsrc)
{
	kv_index = ix;
	kv_nsrc = nsrc;
}

static bool exact_for(const struct ig_backend *b)
{
	return kv_index && atomic_load(&b->kv_src) > 0 && atomic_load(&b->kv_exact);
}

/* Every source's match of the request's chain, in tokens (malloc'd), when
 * one of the candidates' events flow; else NULL. */
static uint32_t *exact_matches(struct ig_backend *const *v, size_t n, const struct ig_pick_req *rq)
{
	size_t i = 0;
	while (i < n && !exact_for(v[i]))
		i++;
	uint32_t *m = i < n && rq->nchain ? malloc(kv_nsrc * sizeof(*m)) : NULL;
	if (m)
		ig_kvindex_match_chain(kv_index, rq->chain, rq->nchain, m);
	return m;
}

/* Blocks of the request's chain that b holds: its engine's word while its
 * events flow (its best rank), else what was sent there. */
static size_t held(const struct cache_aware *c, const struct ig_backend *b, const struct ig_pick_req *rq,
		   const uint32_t *exact)
{
	if (exact && exact_for(b)) {
		size_t src = (size_t)atomic_load(&b->kv_src) - 1, ranks = (size_t)atomic_load(&b->kv_ranks);
		uint32_t best = 0;
		for (size_t r = 0; r < ranks && src + r < kv_nsrc; r++)
			if (exact[src + r] > best)
				best = exact[src + r];
		return best / IG_BLOCK_TOKENS;
	}
	return ig_affinity_match(c->sent, b->id, rq->chain, rq->nchain);
}

/* The work a request waits behind on b, in tokens, weighted. */
static double cost(const struct cache_aware *c, const struct ig_backend *b, size_t uncached_blocks)
{
	double prefill = (double)atomic_load(&b->prefill_tokens) + (double)(uncached_blocks * BLOCK_TOKENS);
	return (c->prefill_weight * prefill + (double)atomic_load(&b->kv_tokens)) / (double)b->weight;
}

static size_t pick_cost(const struct cache_aware *c, const struct ig_pick_set *set, const struct ig_pick_req *rq)
{
	size_t best = 0;
	double bc = 0;
	uint32_t *exact = exact_matches(set->cand, set->k, rq);
	for (size_t i = 0; i < set->k; i++) {
		size_t m = held(c, set->cand[i], rq, exact);
		double x = cost(c, set->cand[i], rq->nchain - m);
		/* equal costs (an idle fleet): the rotated order's first, so
		 * idle backends share the work */
		if (i == 0 || x < bc) {
			bc = x;
			best = i;
		}
	}
	free(exact);
	return best;
}

static size_t pick(void *state, const struct ig_pick_set *set, const struct ig_pick_req *rq)
{
	const struct cache_aware *c = state;
	if (c->mode == IG_CACHE_COST)
		return pick_cost(c, set, rq);
	size_t fallback = ig_policy_least_loaded(set), k = set->k, best = k, bm = 0;
	if (rq->nchain == 0)
		return fallback;
	/* Among those with the longest match, the least loaded: a prefix
	 * every backend holds (a shared system prompt) is no reason to prefer
	 * one of them. */
	uint32_t *exact = exact_matches(set->cand, k, rq);
	for (size_t i = 0; i < k; i++) {
		size_t m = held(c, set->cand[i], rq, exact);
		if (m > bm || (m == bm && m > 0 && best < k && ig_policy_less_loaded(set->cand[i], set->cand[best]))) {
			bm = m;
			best = i;
		}
	}
	free(exact);
	if (best == k || (long)(bm * 100) < c->threshold_percent * (long)rq->nchain)
		return fallback;
	long lb = ig_policy_load(set->cand[best]), lmin = ig_policy_load(set->cand[fallback]);
	if (lb - lmin > c->balance_abs && (double)lb > (double)lmin * c->balance_rel)
		return fallback;
	return best;
}

/* This backend now holds the prefix, and the request's work waits there:
 * its prompt less what the record says is cached, until its first event,
 * and its KV until it ends. */
static void started(void *state, struct ig_backend *b, struct ig_pick_req *rq)
{
	struct cache_aware *c = state;
	if (!rq->nchain)
		return;
	uint32_t *exact = exact_matches(&b, 1, rq);
	size_t m = held(c, b, rq, exact);
	if (exact && exact_for(b)) {
		uint32_t best = 0;
		for (size_t s = 0; s < kv_nsrc; s++)
			best = exact[s] > best ? exact[s] : best;
		atomic_fetch_add(&c->ex_prompt, rq->nchain * BLOCK_TOKENS);
		atomic_fetch_add(&c->ex_best, best);
		atomic_fetch_add(&c->ex_chosen, m * BLOCK_TOKENS);
	}
	free(exact);
	rq->prefill_charged = (long)((rq->nchain - m) * BLOCK_TOKENS);
	rq->charged = (long)(rq->nchain * BLOCK_TOKENS);
	atomic_fetch_add(&b->prefill_tokens, rq->prefill_charged);
	atomic_fetch_add(&b->kv_tokens, rq->charged);
	ig_affinity_insert(c->sent, b->id, rq->chain, rq->nchain);
}

/* An event relayed: the prefill is done (its first token came), and the
 * request holds one more token of KV. Without the lock: atomics. */
static void progress(struct ig_backend *b, struct ig_pick_req *rq)
{
	if (rq->prefill_charged > 0) {
		atomic_fetch_sub(&b->prefill_tokens, rq->prefill_charged);
		rq->prefill_charged = 0;
	}
	if (rq->charged > 0) {
		rq->charged++;
		atomic_fetch_add(&b->kv_tokens, 1);
	}
}

static void done(void *state IG_UNUSED, struct ig_backend *b, struct ig_pick_req *rq,
		 const struct ig_pick_outcome *o IG_UNUSED)
{
	atomic_fetch_sub(&b->prefill_tokens, rq->prefill_charged);
	atomic_fetch_sub(&b->kv_tokens, rq->charged);
	rq->prefill_charged = rq->charged = 0;
}

/* Gone or restarted: its cache, and its record, are empty. */
static void gone(void *state, const struct ig_backend *b)
{
	struct cache_aware *c = state;
	ig_affinity_forget(c->sent, b->id);
}

static void report(const void *state, const struct ig_backend *b, json_t *o)
{
	const struct cache_aware *c = state;
	json_object_set_new(o, "cache_blocks", json_integer((json_int_t)ig_affinity_blocks(c->sent, b->id)));
	json_object_set_new(o, "prefill_tokens", json_integer(atomic_load(&b->prefill_tokens)));
	json_object_set_new(o, "kv_tokens", json_integer(atomic_load(&b->kv_tokens)));
}

static void report_gateway(const void *state, json_t *o)
{
	const struct cache_aware *c = state;
	json_object_set_new(o, "cache_aware_bytes", json_integer((json_int_t)ig_affinity_bytes(c->sent)));
	if (kv_index)
		json_object_set_new(o, "cache_aware_exact",
				    json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)atomic_load(&c->ex_prompt),
					      "best_tokens", (json_int_t)atomic_load(&c->ex_best), "chosen_tokens",
					      (json_int_t)atomic_load(&c->ex_chosen)));
}

const struct ig_policy ig_lb_cache_aware = {
	.name = "cache-aware",
	.needs = IG_POLICY_NEEDS_PREFIX,
	.init = init,
	.free = cache_free,
	.reconfigure = reconfigure,
	.pick = pick,
	.started = started,
	.progress = progress,
	.done = done,
	.gone = gone,
	.report = report,
	.report_gateway = report_gateway,
};

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag cache_aware_rows[] = {
	{.name = "--cache-mode", .key = "cache_aware.mode", .type = IG_FLAG_CHOICE, .off = IG_CONF_OFF(cache_mode),
	 .def = "cost", .metavar = "cost|threshold",
	 .help = "cache-aware: cost sends a request where the least prefill and KV wait (its prompt less the "
		 "prefix that backend was sent, the prefills routed there and not started, the KV its requests "
		 "hold: Dynamo's KV router); threshold sends it to the backend sent its longest prefix when that "
		 "covers --cache-threshold-percent of it, unless the load guard says no (SGLang's router)"},
	{.name = "--cache-prefill-weight", .key = "cache_aware.prefill_weight", .type = IG_FLAG_DOUBLE,
	 .off = IG_CONF_OFF(cache_prefill_weight), .min = 0, .max = 1000, .def = "16", .metavar = "X",
	 .help = "cache-aware cost: a prompt token to prefill weighs X tokens of KV held (Dynamo's "
		 "kv-overlap-score-weight, which counts both in blocks at 1: a prefill holds up every request of "
		 "its batch, a token of KV costs a step little; 4 to 1000 gave the same TTFT on the Mooncake "
		 "trace, 1 a quarter more; 0 balances KV alone)"},
	{.name = "--cache-threshold-percent", .key = "cache_aware.threshold_percent", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(cache_threshold_percent), .min = 1, .max = 100, .def = "50", .metavar = "N",
	 .help = "cache-aware threshold: a request goes to the backend sent its longest prefix when that covers "
		 "N% of its prompt's blocks (SGLang's gateway: cache_threshold 0.5), else to the least loaded"},
	{.name = "--cache-balance-abs", .key = "cache_aware.balance_abs", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(cache_balance_abs), .min = 0, .max = 1000000, .def = "32", .metavar = "N",
	 .help = "cache-aware threshold's load guard: the preferred backend is passed over when it has more than N requests "
		 "in flight beyond the least loaded..."},
	{.name = "--cache-balance-rel", .key = "cache_aware.balance_rel", .type = IG_FLAG_DOUBLE,
	 .off = IG_CONF_OFF(cache_balance_rel), .min = 1, .max = 1000, .def = "1.5", .metavar = "X",
	 .help = "...and more than X times as many (SGLang's balance_abs_threshold / balance_rel_threshold)"},
	{.name = "--cache-max-blocks", .key = "cache_aware.max_blocks", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(cache_max_blocks), .min = 16, .max = 100000000, .def = "32768", .metavar = "N",
	 .help = "cache-aware: prefix blocks (64 bytes of prompt each) remembered per backend, least recently "
		 "used forgotten first; 32768 take at most about 0.9 MB per backend"},
};
const struct ig_conf_part ig_cache_aware_conf = IG_CONF_PART(cache_aware_rows);
