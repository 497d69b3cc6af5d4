/* Tracing as an observer of an exchange (watch.h): its trace begun from
 * the client's traceparent, a CLIENT span per attempt (the GenAI
 * conventions' inference span) whose traceparent goes upstream, the queue
 * wait and the SERVER span at its end, handed to the exporter (trace.c).
 * Not here: the context's format, sampling, the exporter (trace.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "path/exchange.h"
#include "path/watch.h"

/* Its spans to the exporter: the queue wait, its attempts, and (but for a
 * hedge, whose spans are its primary's children) the server span with
 * what the GenAI conventions name (gen_ai.*) and ours (infergate.*). */
static void trace_finish(struct ig_req *req)
{
	struct ig_trace *t = &req->trace;
	if (!t->spans) { /* not sampled, or not recorded (the exporter is full): nothing to build */
		ig_trace_end(t, NULL, NULL);
		return;
	}
	if (req->t_submit_us && !req->is_hedge && !req->is_pd_leg) {
		json_t *q = ig_trace_child(t, "queue", IG_SPAN_INTERNAL, req->t_submit_us,
					   req->t_first_attempt_us ? req->t_first_attempt_us : ig_now_us());
		ig_span_str(q, "infergate.class", ig_conf_class_name(req->wait.q.klass));
		ig_span_int(q, "infergate.queue_ms", (long long)req->wait.waited_ms);
		ig_span_bool(q, "infergate.queued", req->wait.was_queued);
	}
	json_t *s = NULL;
	if (!req->is_hedge && !req->is_pd_leg) { /* a hedge's or a prefill half's spans are its exchange's children */
		const char *path = ig_xch_req_path(req);
		const char *method = ig_routes_method_name(req->adm.method);
		char name[300];
		snprintf(name, sizeof(name), "%s %s", method, path ? path : "");
		s = ig_trace_server_span(t, name);
		unsigned status = ig_proxy_req_status(req);
		const struct ig_relay *rl = &req->relay;
		ig_span_str(s, "http.request.method", method);
		ig_span_str(s, "url.path", path);
		ig_span_int(s, "http.response.status_code", status);
		ig_span_str(s, "gen_ai.operation.name", ig_xch_gen_ai_operation(req));
		ig_span_str(s, "gen_ai.request.model", req->adm.model);
		if (rl->prompt_tokens >= 0)
			ig_span_int(s, "gen_ai.usage.input_tokens", rl->prompt_tokens);
		if (rl->completion_tokens >= 0)
			ig_span_int(s, "gen_ai.usage.output_tokens", rl->completion_tokens);
		if (req->wait.backend)
			ig_span_str(s, "server.address", req->wait.backend->url);
		ig_span_str(s, "infergate.request_id", req->request_id);
		/* the believed client (X-Forwarded-For from trusted_proxies) and
		 * the socket's, as OpenTelemetry's HTTP server spans name them */
		if (*req->client)
			ig_span_str(s, "client.address", req->client);
		if (*req->peer)
			ig_span_str(s, "network.peer.address", req->peer);
		ig_span_str(s, "infergate.class", ig_conf_class_name(req->wait.q.klass));
		if (req->adm.key && req->adm.key->ent)
			ig_span_str(s, "infergate.key", req->adm.key->ent->name);
		ig_span_int(s, "infergate.queue_ms", (long long)req->wait.waited_ms);
		ig_span_int(s, "infergate.retries", req->retries_done);
		ig_span_int(s, "infergate.continuations", rl->cont.count);
		if (status >= 500 || status == 0)
			ig_span_error(s, rl->stream_error_msg ? rl->stream_error_msg : req->err_body ? "an error answer"
				      : "no answer");
	}
	ig_trace_end(t, req->gw->tracer, s);
}

/* What a request asks of a model, in the GenAI conventions' words
 * (gen_ai.operation.name), or NULL. */
const char *ig_xch_gen_ai_operation(const struct ig_req *req)
{
	const char *path = ig_xch_req_path(req);
	return !path ? NULL : strstr(path, "chat/completions") ? "chat" : strstr(path, "/completions") ? "text_completion"
	       : strstr(path, "/embeddings") ? "embeddings" : strstr(path, "/responses") ? "chat" : NULL;
}

/* A new attempt of a traced request on b: its span (CLIENT, the GenAI
 * conventions' inference span) and the traceparent naming it, the line of
 * up_headers rewritten (curl copies nothing: the list is read at send). */
static void trace_attempt(struct ig_req *req, struct ig_backend *b)
{
	struct ig_trace *t = &req->trace;
	const char *op = ig_xch_gen_ai_operation(req);
	char name[200];
	snprintf(name, sizeof(name), "%s %s", op ? op : "request", req->adm.model ? req->adm.model : "");
	if (!req->t_first_attempt_us)
		req->t_first_attempt_us = ig_now_us();
	ig_trace_attempt_begin(t, name);
	json_t *s = t->attempt;
	if (s) {
		ig_span_str(s, "gen_ai.operation.name", op);
		ig_span_str(s, "gen_ai.request.model", req->adm.model);
		ig_span_str(s, "server.address", b->url);
		ig_span_int(s, "infergate.attempt", req->wait.pick.ntried);
		ig_span_str(s, "infergate.attempt.kind", req->is_hedge ? "hedge" : req->is_pd_leg ? "prefill"
			    : req->relay.cont.count ? "continuation"
			    : req->wait.pick.ntried > 1 ? "retry" : "first");
		ig_span_bool(s, "infergate.over_slots", req->wait.pick.over);
	}
	char tp[56], line[80];
	ig_trace_format(t, t->attempt_id, tp);
	snprintf(line, sizeof(line), "traceparent: %s", tp);
	if (req->tp_node) {
		free(req->tp_node->data);
		req->tp_node->data = strdup(line);
	} else {
		req->up_headers = curl_slist_append(req->up_headers, line);
		for (req->tp_node = req->up_headers; req->tp_node->next;)
			req->tp_node = req->tp_node->next;
	}
}

static void trace_begin(struct ig_req *req)
{
	ig_trace_begin(&req->trace, req->gw->tracer,
		       MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "traceparent"),
		       MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "tracestate"));
}

static void trace_attempt_start(struct ig_req *req, struct ig_backend *b)
{
	if (req->trace.on)
		trace_attempt(req, b);
}

static void trace_attempt_end(struct ig_req *req, enum ig_upstream_error e, const char *detail)
{
	ig_trace_attempt_end(&req->trace, req->relay.up_status,
			     req->hedge_lost ? "lost the race to the other attempt" : e != IG_UPERR_NONE ? detail
			     : req->relay.cont.broken ? "an error event in the stream" : NULL);
}

const struct ig_watch ig_watch_trace = {
	.name = "trace",
	.on_begin = trace_begin,
	.on_attempt_start = trace_attempt_start,
	.on_attempt_end = trace_attempt_end,
	.on_done = trace_finish,
};
