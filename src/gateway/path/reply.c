/* The answer's parts every exchange's answer shares (exchange.h): its
 * headers (request id, trace, fallback, rate limits, backend, queue time),
 * its queueing on the connection, its count in the metrics and its key's
 * usage, its access log line. Not here: which answer (proxy.c's respond,
 * an observer's), its bytes (relay.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "infergate/httpd.h"
#include "infergate/util.h"
#include "keys/ratelimit.h"
#include "net/rx.h"
#include "obs/stats.h"
#include "path/exchange.h"

/* x-ratelimit-limit-WHAT, -remaining-WHAT and -reset-WHAT. */
static void limit_trio(struct MHD_Response *r, const char *what, long limit, long left, uint64_t reset_ms)
{
	char name[48], v[32];
	snprintf(name, sizeof(name), "x-ratelimit-limit-%s", what);
	snprintf(v, sizeof(v), "%ld", limit);
	MHD_add_response_header(r, name, v);
	snprintf(name, sizeof(name), "x-ratelimit-remaining-%s", what);
	snprintf(v, sizeof(v), "%ld", left);
	MHD_add_response_header(r, name, v);
	snprintf(name, sizeof(name), "x-ratelimit-reset-%s", what);
	ig_ratelimit_duration(v, sizeof(v), reset_ms);
	MHD_add_response_header(r, name, v);
}

/* OpenAI's rate-limit headers, for a key with limits: its buckets when the
 * request was admitted (or refused, or when answered if it never got so
 * far). */
static void add_limit_headers(struct ig_req *req, struct MHD_Response *r)
{
	const struct ig_admission *a = &req->adm;
	const struct ig_keyent *e = a->key ? a->key->ent : NULL;
	if (!e || (!e->rpm && !e->tpm))
		return;
	if (!a->rl_shown) {
		struct ig_key *k = a->key;
		uint64_t now = ig_now_ms();
		ig_bucket_refill(&k->rpm, now);
		ig_bucket_refill(&k->tpm, now);
		req->adm.rl_req_left = ig_bucket_remaining(&k->rpm);
		req->adm.rl_tok_left = ig_bucket_remaining(&k->tpm);
		req->adm.rl_req_reset_ms = ig_bucket_reset_ms(&k->rpm);
		req->adm.rl_tok_reset_ms = ig_bucket_reset_ms(&k->tpm);
		req->adm.rl_shown = true;
	}
	if (e->rpm)
		limit_trio(r, "requests", e->rpm, a->rl_req_left, a->rl_req_reset_ms);
	if (e->tpm)
		limit_trio(r, "tokens", e->tpm, a->rl_tok_left, a->rl_tok_reset_ms);
}

void ig_xch_add_common_headers(struct ig_req *req, struct MHD_Response *r)
{
	MHD_add_response_header(r, "X-Request-Id", req->request_id);
	if (req->trace.on) { /* where its trace is: the gateway's span */
		char tp[56];
		ig_trace_format(&req->trace, req->trace.span, tp);
		MHD_add_response_header(r, "traceparent", tp);
	}
	if (req->fallback)
		MHD_add_response_header(r, "X-Infergate-Fallback", req->fallback);
	add_limit_headers(req, r);
	if (req->wait.backend && !req->err_status)
		MHD_add_response_header(r, "X-Infergate-Backend", req->wait.backend->url);
	if (req->wait.backend && !req->err_status && req->wait.backend->dp_rank >= 0) {
		char rank[16]; /* the server's data-parallel rank it ran on (backend.h) */
		snprintf(rank, sizeof(rank), "%d", req->wait.backend->dp_rank);
		MHD_add_response_header(r, "X-Infergate-DP-Rank", rank);
	}
	if (req->pd_prefill && !req->err_status) /* the pair's other half (try_pd.c) */
		MHD_add_response_header(r, "X-Infergate-Prefill-Backend", req->pd_prefill->url);
	if (req->wait.was_queued) {
		char ms[24];
		snprintf(ms, sizeof(ms), "%llu", (unsigned long long)req->wait.waited_ms);
		MHD_add_response_header(r, "X-Infergate-Queued-Ms", ms);
	}
}

/* Relays the backend's response headers, but `skip` (NULL: none). */
void ig_xch_add_relayed_headers(struct ig_req *req, struct MHD_Response *r, const char *skip)
{
	const char *p = req->relay.up_headers.data, *end = p + req->relay.up_headers.len;
	while (p && p < end) {
		const char *name = p, *value = name + strlen(name) + 1;
		p = value + strlen(value) + 1;
		if (!skip || strcasecmp(name, skip) != 0)
			MHD_add_response_header(r, name, value);
	}
}

/* Counts the answer in the metrics and its key's usage, once: as soon as
 * all of it is decided (a whole body queued; a stream queued whose
 * backend is done, or done once queued), before its last bytes reach the
 * client, so that a client that has it and then reads /metrics (on any
 * reactor) finds it counted; else when the connection is done with it. */
void ig_xch_count_answer(struct ig_req *req)
{
	if (req->counted || !req->status_sent)
		return;
	req->counted = true;
	if (req->adm.key)
		ig_clients_count(req->adm.key, ig_proxy_req_status(req));
	unsigned status = ig_proxy_req_status(req);
	uint64_t duration_us = ig_now_us() - req->t_start_us;
	int64_t ttfb_us = req->adm.stream && req->relay.t_first_byte_us
				  ? (int64_t)(req->relay.t_first_byte_us - req->t_start_us) : -1;
	ig_stats_observe(req->gw, req->adm.route_idx, status, req->relay.stream_error != 0,
			   req->wait.backend ? req->wait.backend->url : "", duration_us, ttfb_us);
	if (status / 100 == 2 && !req->relay.stream_error)
		ig_stats_observe_model(req->gw, req->adm.model, duration_us, ttfb_us, req->relay.prompt_tokens,
					 req->relay.completion_tokens);
}

/* Queues r; body_len counts bytes sent at once (a stream counts its own, as
 * read_stream hands them out). */
enum MHD_Result ig_xch_queue_answer(struct ig_req *req, unsigned status, struct MHD_Response *r, size_t body_len)
{
	struct ig_gw *gw = req->gw;
	req->relay.bytes_out += body_len;
	/* A duplicate following a running answer: its reader (idem_read) takes
	 * the lock inside MHD's response mutex, so its response is queued and
	 * let go with the lock let go (never the two the other way round). */
	int depth = req->idem_reader && !req->idem->done ? ig_gw_release(gw) : -1;
	enum MHD_Result ret = MHD_queue_response(req->conn, status, r);
	MHD_destroy_response(r);
	if (depth >= 0)
		ig_gw_reacquire(gw, depth);
	if (status >= 100 && status < 600)
		gw->stats.responses[status / 100]++;
	req->status_sent = status;
	req->t_answer_us = ig_now_us();
	return ret;
}

void ig_xch_req_log(struct ig_req *req, bool completed)
{
	struct ig_gw *gw = req->gw;
	char ts[40];
	uint64_t now = ig_now_us();

	if (gw->alog.fd < 0)
		return;
	ig_iso_time(ts, sizeof(ts));
	/* Time to first byte: the first streamed chunk, or the whole answer. */
	uint64_t first = req->relay.t_first_byte_us ? req->relay.t_first_byte_us : req->t_answer_us;
	/* A stream that carried an error event is logged as the error's status
	 * (status_sent says what went on the wire) with its message. */
	json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:s, s:I, s:o, s:b, s:b, s:I, s:I, s:o, "
			      "s:f, s:I, s:I, s:o, s:o, s:b}",
			      "time", ts, "request_id", req->request_id, "client", req->client,
			      "method", ig_routes_method_name(req->adm.method), "path",
			      req->relay.xlate ? ig_route_path(gw->cfg, req->adm.route_idx) : ig_xch_req_path(req),
			      "status", (json_int_t)ig_proxy_req_status(req),
			      "status_sent", (json_int_t)req->status_sent,
			      "error", req->relay.stream_error_msg ? json_string(req->relay.stream_error_msg) : json_null(),
			      "backend", req->wait.backend ? json_string(req->wait.backend->url) : json_null(),
			      "model", req->adm.model ? json_string(req->adm.model) : json_null(),
			      "alias", req->adm.alias ? json_string(req->adm.alias) : json_null(),
			      "key", req->adm.key && req->adm.key->ent ? json_string(req->adm.key->ent->name) : json_null(),
			      "priority", ig_conf_class_name(req->wait.q.klass),
			      "queue_ms", (json_int_t)req->wait.waited_ms,
			      "dispatch", req->wait.dispatch_seq ? json_integer((json_int_t)req->wait.dispatch_seq) : json_null(),
			      "over_slots", req->wait.pick.over,
			      "stream", req->adm.stream,
			      "bytes_in", (json_int_t)req->bytes_in,
			      "bytes_out", (json_int_t)req->relay.bytes_out,
			      "ttfb_ms", first ? json_real((double)(first - req->t_start_us) / 1000.0) : json_null(),
			      "duration_ms", (double)(now - req->t_start_us) / 1000.0,
			      "retries", (json_int_t)req->retries_done,
			      "continuations", (json_int_t)req->relay.cont.count,
			      "prompt_tokens", req->relay.prompt_tokens >= 0 ? json_integer(req->relay.prompt_tokens) : json_null(),
			      "completion_tokens",
			      req->relay.completion_tokens >= 0 ? json_integer(req->relay.completion_tokens) : json_null(),
			      "completed", completed);
	if (req->pd_prefill) /* a pair's prefill server (try_pd.c) */
		json_object_set_new(e, "prefill_backend", json_string(req->pd_prefill->url));
	if (req->wait.backend && req->wait.backend->dp_rank >= 0) /* its server's rank */
		json_object_set_new(e, "dp_rank", json_integer(req->wait.backend->dp_rank));
	if (req->relay.xlate) /* Anthropic's Messages sent as a chat completion (xlate.h) */
		json_object_set_new(e, "translated", json_true());
	ig_accesslog_write(&gw->alog, e);
}
