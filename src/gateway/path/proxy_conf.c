/* The request path's settings: retries, the stream timeouts (first byte,
 * gap between events), hedging (proxy.c until hedging has a file of its own).
 * Rows of the configuration table (conf.h), registered at boot by
 * conf_parts.c; a file of their own beside the module so that the module's
 * file can change apart (moved out of conf.c). */
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

static const struct ig_flag retry_rows[] = {
	{.name = "--retries", .key = "retries", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(retries), .min = 0, .max = 20,
	 .def = "2", .metavar = "N", .help = "retries on another backend before any byte reached the client"},
};
const struct ig_conf_part ig_retry_conf = IG_CONF_PART(retry_rows);
static const struct ig_flag timeout_rows[] = {
	{.name = "--ttft-timeout-ms", .key = "timeouts.ttft_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(ttft_ms), .min = 0,
	 .max = 86400000, .def = "0", .metavar = "N",
	 .help = "a streamed request whose backend sends no first event in N ms is retried on another (0 = no limit)"},
	{.name = "--token-gap-timeout-ms", .key = "timeouts.token_gap_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(token_gap_ms),
	 .min = 0, .max = 86400000, .def = "0", .metavar = "N",
	 .help = "a stream whose backend sends no event for N ms after its first is continued on another (0 = only "
		 "timeouts.idle_s)"},
	{.name = "--ttft-timeout-high-ms", .key = "timeouts.ttft_high_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(ttft_high_ms),
	 .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.ttft_ms for requests of class high (-1 = the same)"},
	{.name = "--ttft-timeout-low-ms", .key = "timeouts.ttft_low_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(ttft_low_ms),
	 .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.ttft_ms for requests of class low (-1 = the same)"},
	{.name = "--token-gap-timeout-high-ms", .key = "timeouts.token_gap_high_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(token_gap_high_ms), .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.token_gap_ms for requests of class high (-1 = the same)"},
	{.name = "--token-gap-timeout-low-ms", .key = "timeouts.token_gap_low_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(token_gap_low_ms), .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.token_gap_ms for requests of class low (-1 = the same)"},
};
const struct ig_conf_part ig_timeouts_conf = IG_CONF_PART(timeout_rows);
static const struct ig_flag hedge_rows[] = {
	{.name = "--hedge-after-ms", .key = "hedge.after_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(hedge_after_ms),
	 .min = -1, .max = 86400000, .def = "0", .metavar = "N",
	 .help = "a request of class high or normal with no byte from its backend after N ms is sent to another "
		 "with a free slot too; the first to answer wins (0 = no hedging; -1 = after its model's learned p95 "
		 "time to first byte)"},
	{.name = "--hedge-budget-percent", .key = "hedge.budget_percent", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(hedge_budget_percent), .min = 0, .max = 100, .def = "5", .metavar = "P",
	 .help = "hedges over the last minute stay within P% of the requests (and the retry budget)"},
};
const struct ig_conf_part ig_hedge_conf = IG_CONF_PART(hedge_rows);
static const struct ig_flag hedge_low_rows[] = {
	{.name = "--hedge-low", .key = "hedge.low", .type = IG_FLAG_SWITCH, .off = IG_CONF_OFF(hedge_low), .def = "false",
	 .help = "requests of class low are hedged too (by default a bulk run's stragglers wait: its tail matters "
		 "less than the fleet's work)"},
};
const struct ig_conf_part ig_hedge_conf_low = IG_CONF_PART(hedge_low_rows);
