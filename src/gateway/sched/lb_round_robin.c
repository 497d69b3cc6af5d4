/* round-robin: the next eligible backend in turn (the rotating start that
 * policy.c gives every policy is the turn). */
#include "config.h"

#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/policy.h"

static size_t pick(void *state IG_UNUSED, const struct ig_pick_set *set IG_UNUSED,
		   const struct ig_pick_req *rq IG_UNUSED)
{
	return 0;
}

const struct ig_policy ig_lb_round_robin = {.name = "round-robin", .pick = pick};
