/* Prefill/decode pairs' settings (try_pd.c): each half's routing policy,
 * the prompt below which a request skips the pair, the hand-over's
 * deadline. Rows of the configuration table (conf.h), registered at boot by
 * conf_parts.c. */
#include "config.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/policy_list.h"

#define LB_BAR(id, name, help) "|" name
#define LB_SPACE(id, name, help) " " name
static const struct ig_flag pd_rows[] = {
	{.name = "--pd-prefill-policy", .key = "pd.prefill_policy", .type = IG_FLAG_CHOICE,
	 .off = IG_CONF_OFF(pd_prefill_policy), .def = "cache-aware", .metavar = IG_LB_LIST(LB_BAR) + 1,
	 .bad = "%s: unknown policy '%s' (one of:" IG_LB_LIST(LB_SPACE) ")",
	 .help = "how a pair's prefill server is chosen among a model's prefill servers (backends[].role "
		 "\"prefill\"); the prefill half never waits: with every one at its limit, the least loaded"},
	{.name = "--pd-decode-policy", .key = "pd.decode_policy", .type = IG_FLAG_CHOICE,
	 .off = IG_CONF_OFF(pd_decode_policy), .def = "least-loaded", .metavar = IG_LB_LIST(LB_BAR) + 1,
	 .bad = "%s: unknown policy '%s' (one of:" IG_LB_LIST(LB_SPACE) ")",
	 .help = "how the decode server (or a co-located one) is chosen for a model that has prefill servers; "
		 "a decode server's request goes to a prefill server too, as SGLang's or vLLM's protocol says "
		 "(backends[].engine)"},
	{.name = "--pd-min-prompt-tokens", .key = "pd.min_prompt_tokens", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(pd_min_prompt_tokens), .min = 0, .max = 100000000, .def = "0", .metavar = "N",
	 .help = "a prompt shorter than N tokens skips the pair: it goes to a server that prefills it alone "
		 "(role both, or a vLLM decode server) when one has a free slot; with pd.decode_policy cache-aware, "
		 "so does a prompt of which the chosen vLLM decode server lacks fewer than N tokens (0: every "
		 "request is paired)"},
	{.name = "--pd-transfer-timeout-ms", .key = "pd.transfer_timeout_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(pd_transfer_timeout_ms), .min = 100, .max = 3600000, .def = "60000", .metavar = "N",
	 .help = "a pair whose decode server has sent nothing and whose prefill server has not answered N ms "
		 "after they started is cut: a failure counted for both, the request tried again elsewhere or "
		 "answered 504"},
};
const struct ig_conf_part ig_pd_conf = IG_CONF_PART(pd_rows);
