/* power-of-two: two distinct random candidates, the less loaded wins
 * (Mitzenmacher's "power of two choices"). */
#include "config.h"

#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/policy.h"

static size_t pick(void *state IG_UNUSED, const struct ig_pick_set *set, const struct ig_pick_req *rq IG_UNUSED)
{
	if (set->k < 2)
		return 0;
	size_t a = ig_rand_below(set->k), b = ig_rand_below(set->k - 1);
	if (b >= a)
		b++;
	return ig_policy_less_loaded(set->cand[b], set->cand[a]) ? b : a;
}

const struct ig_policy ig_lb_power_of_two = {.name = "power-of-two", .pick = pick};
