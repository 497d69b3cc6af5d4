/* The request path's family of /metrics (IG_METRICS_ORDER_PROXY): its
 * counters (path_stats.h, gw->stats) of retries, continuations, hedges and
 * Idempotency-Keys, and the Idempotency-Key table's size; registered at
 * boot by ig_proxy_init. A part of proxy. Not here: the gateway-wide
 * families that read the same counters (metrics.c: answers by class,
 * clients that left, upstream errors, tokens). */
#include "config.h"
#include <stdint.h>

#include "infergate/buf.h"
#include "net/upstream.h"
#include "obs/stats.h"
#include "path/proxy.h"

_Static_assert(IG_PATH_NUPERR == IG_UPERR_OTHER + 1, "path_stats.h counts every enum ig_upstream_error");

/* A counter family with one label, a sample per value. */
static void by_label(struct ig_buf *b, const char *name, const char *help, const char *label,
		     const char *const *values, const uint64_t *v, size_t n)
{
	ig_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
	for (size_t i = 0; i < n; i++)
		ig_buf_printf(b, "%s{%s=\"%s\"} %lu\n", name, label, values[i], (unsigned long)v[i]);
}

/* The request path's (gw->stats): retries, continuations, hedges, Idempotency-Keys. */
static void proxy_prom(void *arg, struct ig_buf *b)
{
	struct ig_gw *gw = arg;
	const struct ig_proxy_stats *s = &gw->stats;
	ig_buf_printf(b, "# HELP infergate_retries_total Requests moved to another backend.\n"
		      "# TYPE infergate_retries_total counter\ninfergate_retries_total %lu\n", (unsigned long)s->retries);
	static const char *const cont_why[IG_CONT_NREASONS] = {"reset", "error_event", "stall"};
	by_label(b, "infergate_stream_continuations_total",
		 "Broken streams continued on another backend, by why they broke.", "reason", cont_why, s->continued,
		 IG_CONT_NREASONS);
	ig_buf_printf(b, "# HELP infergate_stream_continuation_prompt_tokens_total Prompt tokens the continuations "
		      "sent again (the backend work a continuation costs).\n"
		      "# TYPE infergate_stream_continuation_prompt_tokens_total counter\n"
		      "infergate_stream_continuation_prompt_tokens_total %lu\n", (unsigned long)s->cont_prompt_tokens);
	static const char *const hedge_what[4] = {"sent", "won", "lost", "not_sent"};
	by_label(b, "infergate_hedges_total",
		 "Requests with no byte after hedge.after_ms sent to a second backend too, and how their races ended.",
		 "outcome", hedge_what, s->hedges, 4);
	ig_buf_printf(b, "# HELP infergate_hedge_waste_seconds_total Backend time of the attempts that lost a race "
		      "(dropped at the winner's first byte, or when they had one).\n"
		      "# TYPE infergate_hedge_waste_seconds_total counter\ninfergate_hedge_waste_seconds_total %.3f\n",
		      (double)s->hedge_waste_us / 1e6);
	ig_buf_printf(b, "# HELP infergate_hedge_waste_prompt_tokens_total The prompts the attempts that lost a race "
		      "were sent, in tokens (4 bytes of text a token): the prefill they may have cost.\n"
		      "# TYPE infergate_hedge_waste_prompt_tokens_total counter\n"
		      "infergate_hedge_waste_prompt_tokens_total %lu\n", (unsigned long)s->hedge_waste_prompt_tokens);
	static const char *const pd_what[5] = {"paired", "prefill_failed", "transfer_timeout", "alone", "no_params"};
	by_label(b, "infergate_pd_requests_total",
		 "Prefill/decode pairs: requests sent to a prefill and a decode server, prefill halves that failed "
		 "(the pair made again), hand-overs past pd.transfer_timeout_ms, short prompts run alone, vLLM "
		 "prefill answers without kv_transfer_params.", "outcome", pd_what, s->pd, 5);
	static const char *const idem_what[4] = {"ran", "joined", "replayed", "conflict"};
	by_label(b, "infergate_idempotency_requests_total", "Requests with an Idempotency-Key, by what became of them.",
		 "outcome", idem_what, s->idem, 4);
	ig_buf_printf(b, "# HELP infergate_idempotency_stored_bytes Memory the Idempotency-Key answers take.\n"
		      "# TYPE infergate_idempotency_stored_bytes gauge\ninfergate_idempotency_stored_bytes %zu\n"
		      "# HELP infergate_idempotency_keys Idempotency-Key answers kept or running.\n"
		      "# TYPE infergate_idempotency_keys gauge\ninfergate_idempotency_keys %zu\n",
		      gw->idem.bytes, gw->idem.n);
}

int ig_proxy_init(struct ig_gw *gw)
{
	return ig_stats_register_at(gw, &(struct ig_metrics_source){.name = "proxy", .prom = proxy_prom, .arg = gw},
				    IG_METRICS_ORDER_PROXY);
}
