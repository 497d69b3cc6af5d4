/* The routing policies, one row each: its id (the file is lb_ID.c and
 * defines `const struct ig_policy ig_lb_ID`), the name --policy and the
 * configuration take, and one line of --help. Adding a policy is one new
 * file and one row here; conf.c derives --policy's choices, its help and
 * its check from this list, policy.c the table of ops. No #include: conf.c
 * (below the policies) reads it too. */
#define IG_LB_DEFAULT "least-loaded"
#define IG_LB_LIST(X)                                                                                    \
	X(least_loaded, "least-loaded", "fewest requests in flight relative to weight, ties rotating")   \
	X(round_robin, "round-robin", "the next eligible backend in turn")                               \
	X(random, "random", "uniformly among eligible backends")                                         \
	X(power_of_two, "power-of-two", "two random candidates, the less loaded wins")                   \
	X(least_tokens, "least-tokens",                                                                  \
	  "the soonest expected finish: outstanding tokens over measured speed and weight")              \
	X(cache_aware, "cache-aware", "the backend sent the longest prefix of the prompt, unless overloaded") \
	X(session, "session",                                                                            \
	  "one backend per session (X-Session-Id, else the body's user, else the API key) by rendezvous " \
	  "hashing, moved only past 1.25x the pool's mean load; none: least-loaded")
