/* cache-aware: the candidate that was sent the longest prefix of the
 * prompt, when the match covers threshold_percent of it and the load guard
 * lets it; else the least loaded. After SGLang's gateway
 * (sgl-router/src/policies/cache_aware.rs: a match rate over
 * cache_threshold wins unless the fleet is imbalanced, max - min >
 * balance_abs_threshold and max > min x balance_rel_threshold), with two
 * differences: the guard weighs the preferred backend's own load against
 * the least loaded (so one hot conversation does not turn affinity off for
 * every other), and a weak match goes to the least loaded rather than to
 * the backend with the smallest record. What each backend was sent lives
 * in an ig_affinity (affinity.h), forgotten when the backend goes down. */
#include "config.h"
#include <stdlib.h>

#include "conf/conf.h"
#include "infergate/log.h"
#include "sched/affinity.h"
#include "sched/policy.h"

struct cache_aware {
	struct ig_affinity *sent;   /* prefixes sent to each backend */
	size_t max_blocks;
	long threshold_percent, balance_abs;
	double balance_rel;
};

static void take_settings(struct cache_aware *c, const struct ig_conf *cfg)
{
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

static size_t pick(void *state, const struct ig_pick_set *set, const struct ig_pick_req *rq)
{
	const struct cache_aware *c = state;
	size_t fallback = ig_policy_least_loaded(set), k = set->k, best = k, bm = 0;
	if (rq->nchain == 0)
		return fallback;
	/* Among those with the longest match, the least loaded: a prefix
	 * every backend holds (a shared system prompt) is no reason to prefer
	 * one of them. */
	for (size_t i = 0; i < k; i++) {
		size_t m = ig_affinity_match(c->sent, set->cand[i]->id, rq->chain, rq->nchain);
		if (m > bm || (m == bm && m > 0 && best < k && ig_policy_less_loaded(set->cand[i], set->cand[best]))) {
			bm = m;
			best = i;
		}
	}
	if (best == k || (long)(bm * 100) < c->threshold_percent * (long)rq->nchain)
		return fallback;
	long lb = ig_policy_load(set->cand[best]), lmin = ig_policy_load(set->cand[fallback]);
	if (lb - lmin > c->balance_abs && (double)lb > (double)lmin * c->balance_rel)
		return fallback;
	return best;
}

/* This backend now holds the prefix. */
static void started(void *state, struct ig_backend *b, struct ig_pick_req *rq)
{
	struct cache_aware *c = state;
	if (rq->nchain)
		ig_affinity_insert(c->sent, b->id, rq->chain, rq->nchain);
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
}

static void report_gateway(const void *state, json_t *o)
{
	const struct cache_aware *c = state;
	json_object_set_new(o, "cache_aware_bytes", json_integer((json_int_t)ig_affinity_bytes(c->sent)));
}

const struct ig_policy ig_lb_cache_aware = {
	.name = "cache-aware",
	.needs = IG_POLICY_NEEDS_PREFIX,
	.init = init,
	.free = cache_free,
	.reconfigure = reconfigure,
	.pick = pick,
	.started = started,
	.gone = gone,
	.report = report,
	.report_gateway = report_gateway,
};

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag cache_aware_rows[] = {
	{.name = "--cache-threshold-percent", .key = "cache_aware.threshold_percent", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(cache_threshold_percent), .min = 1, .max = 100, .def = "50", .metavar = "N",
	 .help = "cache-aware: a request goes to the backend sent its longest prefix when that covers N% of its "
		 "prompt's blocks (SGLang's gateway: cache_threshold 0.5), else to the least loaded"},
	{.name = "--cache-balance-abs", .key = "cache_aware.balance_abs", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(cache_balance_abs), .min = 0, .max = 1000000, .def = "32", .metavar = "N",
	 .help = "cache-aware load guard: the preferred backend is passed over when it has more than N requests "
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
