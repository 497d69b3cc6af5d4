/* One upstream attempt of an exchange (exchange.h): the request sent to a
 * backend (its headers, its body with "priority" for a backend that
 * schedules by it, curl's options), started on the exchange's reactor;
 * how it ended (a curl result, a status, a Retry-After); and what its end
 * tells of its backend (health, time to first byte, tokens). Not here:
 * what follows an attempt's end (proxy.c, the strategies), curl's sockets
 * (upstream.c), the answer's bytes (relay.c). */
#include "config.h"
#include <ctype.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cluster/cluster.h"
#include "conf/peer.h"
#include "fleet/health.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "keys/respstore.h"
#include "net/rx.h"
#include "path/exchange.h"

struct collect {
	struct ig_req *req;
	const char *connection; /* the request's Connection header, or NULL */
	struct ig_buf xff;      /* the client's X-Forwarded-For values, joined */
};

#define RETRY_AFTER_MAX_S 300

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
				      const char *value)
{
	struct collect *c = cls;
	struct ig_req *req = c->req;
	struct ig_gw *gw = req->gw;
	if (!key || !value || ig_relay_hop_by_hop(key, strlen(key)))
		return MHD_YES;
	/* Headers named in Connection are hop-by-hop too (RFC 9110 7.6.1). */
	const char *conn = c->connection;
	if (conn) {
		size_t kl = strlen(key);
		for (const char *p = conn; *p;) {
			while (*p == ' ' || *p == ',' || *p == '\t')
				p++;
			size_t n = strcspn(p, " ,\t");
			if (n == kl && strncasecmp(p, key, n) == 0)
				return MHD_YES;
			p += n;
		}
	}
	/* A batch's mark (IG_BATCH_HEADER) is the gateway's own; the chain
	 * of X-Forwarded-For goes on as one header (upstream_headers). */
	if (strcasecmp(key, IG_BATCH_HEADER) == 0)
		return MHD_YES;
	if (strcasecmp(key, "X-Forwarded-For") == 0)
		return ig_peer_collect_xff(&c->xff, kind, key, value);
	/* Traced, the trace goes on from each attempt's span (configure_transfer). */
	if (req->trace.on && (strcasecmp(key, "traceparent") == 0 || strcasecmp(key, "tracestate") == 0))
		return MHD_YES;
	/* The gateway's own key stays here (in either header a client may
	 * send it: entry.c); a backend key replaces it. */
	if ((strcasecmp(key, "Authorization") == 0 || strcasecmp(key, "x-api-key") == 0) &&
	    (gw->api_keys.enabled || *gw->cfg->backend_api_key))
		return MHD_YES;
	char *line = ig_strdupf("%s: %s", key, value);
	req->up_headers = curl_slist_append(req->up_headers, line);
	free(line);
	return MHD_YES;
}

void ig_attempt_request_id(struct ig_req *req)
{
	const char *id = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Request-Id");
	if (id) {
		size_t n = strlen(id);
		bool ok = n > 0 && n < sizeof(req->request_id);
		for (size_t i = 0; ok && i < n; i++)
			ok = isalnum((unsigned char)id[i]) || strchr("-_.:", id[i]);
		if (ok) {
			memcpy(req->request_id, id, n + 1);
			return;
		}
	}
	ig_random_hex(req->request_id, 32);
}

/* The upstream headers: the client's, less hop-by-hop ones and the
 * gateway's own, with its request id and the backend key. */
void ig_attempt_headers(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct collect c = {req, MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Connection"), {0}};
	ig_buf_init(&c.xff);
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, collect_header, &c);
	char *line = ig_strdupf("X-Request-Id: %s", req->request_id);
	req->up_headers = curl_slist_append(req->up_headers, line);
	free(line);
	/* X-Forwarded-For: the client's chain (believed or not, it is passed
	 * on) with the address that connected here added, as nginx's
	 * $proxy_add_x_forwarded_for and HAProxy's option forwardfor do. */
	if (c.xff.len || *req->peer) {
		line = ig_strdupf("X-Forwarded-For: %.*s%s%s", (int)c.xff.len, c.xff.data ? c.xff.data : "",
				  c.xff.len && *req->peer ? ", " : "", req->peer);
		req->up_headers = curl_slist_append(req->up_headers, line);
		free(line);
	}
	ig_buf_free(&c.xff);
	if ((req->adm.method == IG_RT_POST || req->adm.method == IG_RT_PUT) &&
	    !MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Type"))
		req->up_headers = curl_slist_append(req->up_headers, "Content-Type: application/json");
	req->up_headers = curl_slist_append(req->up_headers, "Expect:");
	if (req->trace.state) {
		line = ig_strdupf("tracestate: %s", req->trace.state);
		req->up_headers = curl_slist_append(req->up_headers, line);
		free(line);
	}
	req->up_headers = ig_upstream_backend_key(req->up_headers, gw->cfg);
}

/* The body with "priority" first among its members, for a backend that
 * schedules by it. SGLang runs larger values first unless started with
 * --schedule-low-priority-values-first (python/sglang/srt/managers/
 * schedule_policy.py: priority_sign); vLLM's priority policy runs smaller
 * values first (vllm/v1/core/sched/request_queue.py). A "priority" the
 * client sent comes later in the object and wins (the last of a repeated
 * key is what Python's json keeps). The body is a JSON object (checked).
 * The values: high `step`, normal 0, low -`step` (negated for smaller
 * first), `step` one more than the server's preemption threshold when it
 * told it, so that SGLang preempts a low request for a normal one
 * (priority_diff > threshold: schedule_policy.py preempt_to_schedule).
 * An adapter's request to SGLang gets its name as "lora_path" the same way
 * (sched/adapters.h; a "lora_path" the client sent wins).
 * malloc'd, or NULL to send the body as it is. */
static char *body_with_fields(const struct ig_req *req, int field, long step)
{
	const char *p = req->body.data, *end = p + req->body.len;
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	if (p >= end || *p != '{' || (!field && !req->wait.lora_path))
		return NULL;
	const char *q = p + 1;
	while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
		q++;
	long k = req->wait.q.klass;
	long v = (k == IG_CLASS_HIGH ? step : k == IG_CLASS_LOW ? -step : 0) * (field == 1 ? 1 : -1);
	char prio[40] = "", *lora = NULL;
	if (field)
		snprintf(prio, sizeof(prio), "\"priority\":%ld", v);
	if (req->wait.lora_path) {
		json_t *name = json_string(req->wait.model);
		char *quoted = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
		json_decref(name);
		if (!quoted)
			return NULL;
		lora = ig_strdupf("%s\"lora_path\":%s", field ? "," : "", quoted);
		free(quoted);
	}
	char *out = ig_strdupf("{%s%s%s%.*s", prio, lora ? lora : "", q < end && *q == '}' ? "" : ",",
			       (int)(end - (p + 1)), p + 1);
	free(lora);
	return out;
}

/* The line of up_headers naming the rank of an attempt on a server's
 * data-parallel rank (backend.h dp_rank), which the engine then runs it on
 * instead of balancing it itself: vLLM reads X-data-parallel-rank
 * (vllm/entrypoints/openai/engine/serving.py _get_data_parallel_rank),
 * SGLang X-Data-Parallel-Rank before the body's routed_dp_rank
 * (python/sglang/srt/entrypoints/openai/serving_base.py
 * extract_routed_dp_rank_from_header); names are not case-sensitive. On a
 * server without ranks after one with, the line has no value, which curl
 * does not send. Rewritten per attempt, as the traceparent is. */
static void rank_header(struct ig_req *req, const struct ig_backend *b)
{
	char line[48];
	if (b->dp_rank >= 0)
		snprintf(line, sizeof(line), "X-Data-Parallel-Rank: %d", b->dp_rank);
	else if (req->rank_node)
		snprintf(line, sizeof(line), "X-Data-Parallel-Rank:");
	else
		return;
	char *dup = strdup(line);
	if (!dup)
		return;
	if (req->rank_node) {
		free(req->rank_node->data);
		req->rank_node->data = dup;
		return;
	}
	struct curl_slist *l = curl_slist_append(req->up_headers, dup);
	free(dup);
	if (!l)
		return;
	req->up_headers = l;
	for (req->rank_node = l; req->rank_node->next;)
		req->rank_node = req->rank_node->next;
}

/* The easy handle of req's attempt on b, configured (on req's reactor:
 * a handle is configured only by its own). */
static void configure_transfer(struct ig_req *req, struct ig_backend *b)
{
	const struct ig_conf *cfg = req->gw->cfg;
	char url[2048];

	if (req->xfer.easy)
		curl_easy_reset(req->xfer.easy);
	else
		req->xfer.easy = ig_upstream_easy_get(req->rx);
	CURL *e = req->xfer.easy;
	snprintf(url, sizeof(url), "%s%s", b->url, ig_xch_req_path(req));
	curl_easy_setopt(e, CURLOPT_URL, url);
	if (req->adm.method == IG_RT_GET || req->adm.method == IG_RT_DELETE) {
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
		if (req->adm.method == IG_RT_DELETE)
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
		goto options;
	}
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	if (req->adm.method == IG_RT_PUT)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
	free(req->prio_body);
	long step;
	int field = ig_backend_priority_field(b, &step);
	req->prio_body = body_with_fields(req, field, step);
	if (req->prio_body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->prio_body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(req->prio_body));
	} else {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body.data ? req->body.data : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body.len);
	}
options:
	rank_header(req, b);
	req->hooks->attempt_start(req, b); /* its observers: a traced one names its span */
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->up_headers);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_ms);
	/* No total timeout: a generation may run for many minutes. The idle
	 * limit is ours (ig_proxy_tick_rx): curl's LOW_SPEED averages over
	 * several seconds and would count the upload as activity. */
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	if (req->relay.stream) /* SSE chunks are small; 10,000 streams x 16 KiB is not */
		curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 1024L); /* curl's minimum */
	ig_relay_attempt(&req->relay, &req->xfer, b);
}

/* The transfer configure_transfer set up goes into the multi of req's reactor (on
 * its thread). */
static void add_transfer(struct ig_req *req)
{
	CURLMcode mc = ig_upstream_start(req->rx, &req->xfer);
	if (mc != CURLM_OK) {
		ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		ig_xch_set_error(req, 500, "internal_error", "cannot start the upstream transfer: %s", curl_multi_strerror(mc));
	}
}

/* Whether the client of a request that waited in the queue has hung up:
 * its hang-up may not have been read yet (the watch's event, server.c's,
 * comes later in the loop, or on a slot freed on another reactor before
 * this one read it). A batch cancelled here closes its requests to this
 * gateway at once, and those queued behind the ones it aborted were sent
 * to a backend before their hang-ups were read. */
static bool client_left(struct ig_req *req)
{
	if (req->detached)
		return false;
	if (!req->wait.was_queued || req->relay.client_gone)
		return req->relay.client_gone;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd p = {ci ? ci->connect_fd : -1, POLLRDHUP, 0};
	return ci && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Its attempt, on its own reactor: configured and started. */
void ig_attempt_launch(struct ig_req *req)
{
	if (client_left(req)) { /* nothing sent for nobody: the slot back */
		ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		if (!req->relay.client_gone)
			req->gw->stats.client_aborts++;
		req->relay.client_gone = true;
		return;
	}
	if (req->hooks->attempt_pair(req)) /* a pair's decode waiting for its prefill, or refused */
		return;
	configure_transfer(req, req->wait.backend);
	add_transfer(req);
}

enum ig_upstream_error ig_attempt_classify(struct ig_req *req, CURLcode result)
{
	curl_off_t connect_us = 0;
	if (result == CURLE_OK)
		return (req->relay.up_status == 502 || req->relay.up_status == 503 || req->relay.up_status == 504)
			       ? IG_UPERR_STATUS : IG_UPERR_NONE;
	curl_easy_getinfo(req->xfer.easy, CURLINFO_CONNECT_TIME_T, &connect_us);
	switch (result) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		return IG_UPERR_CONNECT;
	case CURLE_OPERATION_TIMEDOUT:
		return connect_us == 0 ? IG_UPERR_CONNECT : IG_UPERR_TIMEOUT;
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return IG_UPERR_RESET;
	default:
		return IG_UPERR_OTHER;
	}
}

/* Seconds of a Retry-After value (delta-seconds or an HTTP-date), at most
 * RETRY_AFTER_MAX_S; 0 when there is none or it is not one. */
long ig_attempt_retry_after_s(const char *v)
{
	if (!v || !*v)
		return 0;
	char *end;
	long s;
	if (*v >= '0' && *v <= '9') {
		s = strtol(v, &end, 10);
		if (*end)
			return 0;
	} else {
		time_t at = curl_getdate(v, NULL);
		s = at < 0 ? 0 : (long)(at - time(NULL));
	}
	return s < 0 ? 0 : s > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S : s;
}

/* A failed attempt's backend accounted: one that asked for time is alive;
 * one slow to its first byte is busy (its own queue), not failing; one
 * that sent an error event answers (the request failed there). */
void ig_attempt_failed(struct ig_req *req, enum ig_upstream_error e, const char *detail, struct ig_backend *b)
{
	req->last_err = e;
	req->gw->stats.upstream_errors[e]++;
	if (atomic_load(&b->rest_until_ms) <= ig_now_ms() && !req->ttft_cut && !req->relay.cont.broken) {
		atomic_fetch_add(&b->failures, 1);
		ig_health_passive_fail(req->gw, b, e, detail);
	}
	req->ttft_cut = false;
}

/* The client's deadline passed: not the backend's fault, no retry, no
 * health failure; a 504, or a stream's end with an error event. */
void ig_attempt_deadline(struct ig_req *req, struct ig_backend *b)
{
	atomic_fetch_add(&b->aborted, 1);
	if (req->relay.committed)
		ig_relay_fail_stream(&req->relay, "the request's deadline (X-Infergate-Timeout-Ms) passed; the response "
						  "is incomplete");
	else
		ig_xch_set_error(req, 504, "deadline_exceeded",
				 "the request's deadline (X-Infergate-Timeout-Ms: %ld) passed before %s answered",
				 req->adm.timeout_ms, b->url);
}

/* An attempt that answered: its backend's health, time to first byte and
 * tokens; a continuation the next backend would not take (its 4xx) ends
 * the stream. */
void ig_attempt_answered(struct ig_req *req, struct ig_backend *b)
{
	struct ig_gw *gw = req->gw;
	struct ig_relay *rl = &req->relay;
	if (rl->committed && !ig_relay_streaming(rl)) {
		char msg[160];
		snprintf(msg, sizeof(msg), "the backend failed while streaming and %s refused to continue the stream "
			 "(HTTP %ld); the response is incomplete", b->url, rl->up_status);
		ig_log_warn("request %s: %s", req->request_id, msg);
		ig_relay_fail_stream(rl, msg);
		return;
	}
	atomic_fetch_add(&b->served, 1);
	ig_health_passive_ok(gw, b);
	if (req->is_pd_leg)
		return; /* a prefill half: the request's tokens are its decode's */
	if (req->wait.m && !rl->cont.count && rl->up_status / 100 == 2) { /* its time to first byte */
		uint64_t first = rl->t_first_byte_us ? rl->t_first_byte_us : ig_now_us();
		ig_sched_ttfb(req->wait.m, first > req->wait.attempt_us ? (first - req->wait.attempt_us) / 1000 : 0);
	}
	gw->stats.cont_prompt_tokens += (uint64_t)rl->cont.reprefilled;
	if (rl->prompt_tokens > 0) {
		atomic_fetch_add(&b->prompt_tokens, (unsigned long)rl->prompt_tokens);
		gw->stats.prompt_tokens += (uint64_t)rl->prompt_tokens;
		if (req->adm.key)
			req->adm.key->prompt_tokens += (uint64_t)rl->prompt_tokens;
	}
	if (rl->completion_tokens > 0) {
		atomic_fetch_add(&b->completion_tokens, (unsigned long)rl->completion_tokens);
		gw->stats.completion_tokens += (uint64_t)rl->completion_tokens;
		if (req->adm.key)
			req->adm.key->completion_tokens += (uint64_t)rl->completion_tokens;
	}
}

/* A stored Responses API answer: which backend has it. The store is shared:
 * the lock is taken (nested when the caller holds it already). */
void ig_attempt_stored(struct ig_req *req, json_t *response)
{
	struct ig_gw *gw = req->gw;
	json_t *id = json_object_get(response, "id");
	if (!json_is_string(id) || !req->wait.backend)
		return;
	ig_gw_lock(gw);
	uint32_t owner = ig_admission_owner(gw, &req->adm);
	if (gw->responses || (gw->responses = ig_respstore_new()))
		ig_respstore_put(gw->responses, json_string_value(id), json_string_length(id), req->wait.backend->server->id,
				 owner, ig_now_ms());
	ig_cluster_response_stored(gw, json_string_value(id), json_string_length(id), req->wait.backend, owner);
	ig_gw_unlock(gw);
}
