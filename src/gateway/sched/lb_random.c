/* random: uniformly among the eligible backends. */
#include "config.h"

#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/policy.h"

static size_t pick(void *state IG_UNUSED, const struct ig_pick_set *set, const struct ig_pick_req *rq IG_UNUSED)
{
	return ig_rand_below(set->k);
}

const struct ig_policy ig_lb_random = {.name = "random", .pick = pick};
