/* least-loaded: the fewest requests in flight relative to weight; equals
 * take turns (the candidates come in rotated order). The default. */
#include "config.h"

#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/policy.h"

static size_t pick(void *state IG_UNUSED, const struct ig_pick_set *set, const struct ig_pick_req *rq IG_UNUSED)
{
	return ig_policy_least_loaded(set);
}

const struct ig_policy ig_lb_least_loaded = {.name = "least-loaded", .pick = pick};
