/* libFuzzer target: one gateway's state as the sync's reply carries it
 * (cluster_state.c's ig_cluster_state_text: "g NAME" and lines "b URL N", "m MODEL W",
 * "h MODEL N", "k DIGEST WAITING WEIGHT CLAIM"), the raw bytes through
 * ig_redismsg_state and ig_redismsg_state_next: refused, or every line read within its rule (the same
 * parser the sync target reaches through RESP, fed directly here so that
 * the fuzzer works on the lines). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "net/redismsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ig_state st;
	struct ig_state_line l;
	struct ig_redismsg_bad bad = {0};
	const char *s = (const char *)data;
	if (ig_redismsg_state(s, size, &st, &bad) < 0) {
		if (!bad.kind || strcmp(bad.kind, IG_BAD_SYNC_STATE) != 0)
			abort();
		return 0;
	}
	if (!ig_redismsg_name_ok(st.name, strlen(st.name)) || st.text < s || st.text + st.len != s + size)
		abort(); /* its lines are the input's, after the first */
	size_t lines = 1, keys = 0;
	for (size_t i = 0; i < size; i++)
		lines += data[i] == '\n';
	size_t n = 0;
	for (size_t at = 0; ig_redismsg_state_next(&st, &at, &l); n++) {
		long long lo = l.what == 'k' ? 0 : 1;
		if (!strchr("bmhk", l.what) || !*l.name || strchr(l.name, ' ') || l.v[0] < lo ||
		    l.v[0] > IG_REDISMSG_CLAIM_MAX || strlen(l.name) > IG_REDISMSG_URL_MAX)
			abort();
		if (l.what == 'k' && (l.v[1] > 1000 || l.v[2] > IG_REDISMSG_CLAIM_MAX || l.v[1] < 0 || l.v[2] < 0 ||
				      (strcmp(l.name, "-") != 0 && !ig_redismsg_digest_ok(l.name, strlen(l.name)))))
			abort();
		keys += l.what == 'k';
	}
	if (n >= lines || keys != st.nkeys)
		abort(); /* the "g" line is not among them; every 'k' counted */
	return 0;
}
