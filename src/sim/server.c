/* The HTTP side of infergate-sim: routing, request parsing and validation,
 * OpenAI-shaped errors, the read-only endpoints, fault switching, and turning
 * the engine's output into MHD responses (a content reader for streams, one
 * buffer otherwise). Scheduling and text are not here: see engine.c, text.c. */
#include "config.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "sim.h"

enum route {
	R_CHAT,        /* POST /v1/chat/completions */
	R_COMPLETIONS, /* POST /v1/completions */
	R_HEALTH,      /* GET /health: 200 "ok", 503 when down */
	R_MODELS,      /* GET /v1/models */
	R_LOAD,        /* GET /get_load */
	R_MODEL_INFO,  /* GET /get_model_info (SGLang) */
	R_METRICS,     /* GET /metrics */
	R_FAULT,       /* GET or POST /sim/fault */
};

static const struct {
	const char *path;
	enum route route;
	bool get, post;
	const char *allow; /* for 405 */
} routes[] = {
	{"/v1/chat/completions", R_CHAT, false, true, "POST"},
	{"/v1/completions", R_COMPLETIONS, false, true, "POST"},
	{"/health", R_HEALTH, true, false, "GET, HEAD"},
	{"/health_generate", R_HEALTH, true, false, "GET, HEAD"},
	{"/v1/models", R_MODELS, true, false, "GET, HEAD"},
	{"/get_load", R_LOAD, true, false, "GET, HEAD"},
	{"/get_model_info", R_MODEL_INFO, true, false, "GET, HEAD"},
	{"/metrics", R_METRICS, true, false, "GET, HEAD"},
	{"/sim/fault", R_FAULT, true, true, "GET, HEAD, POST"},
};

/* ---- responses ---- */

/* Queues body (malloc'd, taken over) with the given status and type. */
static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, char *body,
			       const char *ctype, const char *allow)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	enum MHD_Result ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned status, char *body)
{
	return respond(conn, status, body, "application/json", NULL);
}

/* An OpenAI-shaped error; 4xx answers count as invalid requests. */
static enum MHD_Result respond_error(struct sim *s, struct MHD_Connection *conn, unsigned status,
				     const char *allow, const char *param, const char *fmt, ...)
	IG_PRINTF(6, 7);

static enum MHD_Result respond_error(struct sim *s, struct MHD_Connection *conn, unsigned status,
				     const char *allow, const char *param, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	if (status >= 400 && status < 500)
		s->st.invalid++;
	char *body = ig_oaerror_json(msg ? msg : "error", ig_oaerror_type_for_status(status), param, NULL);
	free(msg);
	return respond(conn, status, body, "application/json", allow);
}

static char *dump(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		abort();
	return s;
}

/* ---- read-only endpoints ---- */

static char *models_json(struct sim *s)
{
	return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:n, s:i}]}",
			      "object", "list", "data",
			      "id", s->conf->model, "object", "model", "created", (json_int_t)s->started,
			      "owned_by", "infergate-sim", "root", s->conf->model, "parent",
			      "max_model_len", 32768));
}

static char *load_json(struct sim *s)
{
	return dump(json_pack("{s:I, s:I, s:I, s:I, s:I, s:s}",
			      "num_running_reqs", (json_int_t)s->running,
			      "num_waiting_reqs", (json_int_t)s->waiting,
			      "num_reqs", (json_int_t)(s->running + s->waiting),
			      "num_hung_reqs", (json_int_t)s->hung,
			      "max_running_requests", (json_int_t)s->conf->max_running,
			      "fault", sim_fault_name(s->fault)));
}

/* A Prometheus label value: \, " and newline escaped. */
static void label_value(struct ig_buf *o, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			ig_buf_printf(o, "\\%c", *v);
		else if (*v == '\n')
			ig_buf_printf(o, "\\n");
		else
			ig_buf_append(o, v, 1);
	}
}

static void metric(struct ig_buf *o, const char *name, const char *type, const char *help,
		   const char *model, uint64_t value)
{
	ig_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"", name, help, name, type, name);
	label_value(o, model);
	ig_buf_printf(o, "\"} %llu\n", (unsigned long long)value);
}

static char *metrics_text(struct sim *s)
{
	struct ig_buf o;
	const char *m = s->conf->model;

	ig_buf_init(&o);
	metric(&o, "sglang:num_running_reqs", "gauge", "The number of running requests.", m, (uint64_t)s->running);
	metric(&o, "sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", m, (uint64_t)s->waiting);
	metric(&o, "sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", m, s->st.prompt_tokens);
	metric(&o, "sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", m, s->st.generation_tokens);
	metric(&o, "sglang:num_requests_total", "counter", "Number of requests processed.", m, s->st.served);
	metric(&o, "infergate_sim_requests_served_total", "counter", "Completions generated to the end.", m, s->st.served);
	metric(&o, "infergate_sim_requests_aborted_total", "counter", "Completions stopped because the client disconnected.", m, s->st.aborted);
	metric(&o, "infergate_sim_requests_failed_total", "counter", "Completions answered 500 by fault injection (--fail-rate, mode error).", m, s->st.failed);
	metric(&o, "infergate_sim_requests_rejected_total", "counter", "Completions answered 503 in mode down.", m, s->st.rejected);
	metric(&o, "infergate_sim_requests_invalid_total", "counter", "Requests answered 4xx.", m, s->st.invalid);
	metric(&o, "infergate_sim_num_hung_reqs", "gauge", "Completions held without an answer in mode hang.", m, (uint64_t)s->hung);
	metric(&o, "infergate_sim_max_running_reqs", "gauge", "Batch slots (--max-running).", m, (uint64_t)s->conf->max_running);
	ig_buf_printf(&o, "# HELP infergate_sim_fault_mode The fault mode in force (1) and the others (0).\n"
		      "# TYPE infergate_sim_fault_mode gauge\n");
	for (int f = SIM_FAULT_OK; f <= SIM_FAULT_DOWN; f++)
		ig_buf_printf(&o, "infergate_sim_fault_mode{mode=\"%s\"} %d\n", sim_fault_name((enum sim_fault)f),
			      (int)s->fault == f);
	if (ig_buf_append(&o, "", 1) < 0)
		abort();
	return o.data; /* off is 0: never consumed */
}

static enum MHD_Result answer_get(struct sim *s, struct MHD_Connection *conn, enum route route)
{
	switch (route) {
	case R_HEALTH:
		if (s->fault == SIM_FAULT_DOWN)
			return respond(conn, 503, strdup("down"), "text/plain", NULL);
		return respond(conn, 200, strdup("ok"), "text/plain", NULL);
	case R_MODELS:
		if (s->fault == SIM_FAULT_DOWN)
			return respond_error(s, conn, 503, NULL, NULL, "infergate-sim is down (fault mode down)");
		return respond_json(conn, 200, models_json(s));
	case R_LOAD:
		return respond_json(conn, 200, load_json(s));
	case R_MODEL_INFO:
		return respond_json(conn, 200, dump(json_pack("{s:s, s:s, s:b}", "model_path", s->conf->model,
							      "tokenizer_path", s->conf->model,
							      "is_generation", 1)));
	case R_METRICS:
		return respond(conn, 200, metrics_text(s), "text/plain; version=0.0.4; charset=utf-8", NULL);
	case R_FAULT:
		return respond_json(conn, 200, dump(json_pack("{s:s}", "mode", sim_fault_name(s->fault))));
	default:
		return MHD_NO;
	}
}

/* ---- the request object ---- */

static struct sim_req *req_new(struct sim *s, struct MHD_Connection *conn, enum sim_kind kind)
{
	struct sim_req *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->sim = s;
	r->conn = conn;
	r->kind = kind;
	r->state = SIM_REQ_READING;
	r->heap_idx = -1;
	r->fd = -1;
	ig_buf_init(&r->body);
	ig_buf_init(&r->out);
	r->next = s->reqs;
	if (s->reqs)
		s->reqs->prev = r;
	s->reqs = r;
	s->nreqs++;
	return r;
}

void sim_req_free(struct sim_req *r)
{
	struct sim *s = r->sim;
	sim_reactor_unwatch(s, r);
	if (r->prev)
		r->prev->next = r->next;
	else
		s->reqs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	s->nreqs--;
	ig_buf_free(&r->body);
	ig_buf_free(&r->out);
	free(r->model_json);
	free(r);
}

static void suspend(struct sim_req *r)
{
	MHD_suspend_connection(r->conn);
	r->suspended = true;
	sim_reactor_watch(r->sim, r);
}

void sim_req_wake(struct sim_req *r)
{
	if (!r->suspended)
		return;
	r->suspended = false;
	MHD_resume_connection(r->conn);
	r->sim->need_mhd_run = true;
}

void sim_server_client_gone(struct sim_req *r)
{
	if (r->client_gone)
		return;
	r->client_gone = true;
	sim_engine_abort(r->sim, r);
	/* Let MHD see the end now: the reader or handler answers with an error
	 * and MHD closes the connection. */
	sim_req_wake(r);
}

/* ---- parsing ---- */

/* A parse failure: the message and the offending parameter. */
struct perr {
	char *msg;
	const char *param;
};

static int fail(struct perr *e, const char *param, char *msg)
{
	e->param = param;
	e->msg = msg;
	return -1;
}

/* Appends a message's content (string, null, or an array of parts whose
 * "text" members count) to the prompt. Returns 0 or -1. */
static int add_content(struct ig_buf *p, json_t *content)
{
	if (!content || json_is_null(content))
		return 0;
	if (json_is_string(content))
		return ig_buf_append(p, json_string_value(content), json_string_length(content));
	if (!json_is_array(content))
		return -1;
	size_t i;
	json_t *part;
	json_array_foreach(content, i, part) {
		if (!json_is_object(part))
			return -1;
		json_t *text = json_object_get(part, "text");
		if (text && !json_is_string(text))
			return -1;
		if (text && ig_buf_append(p, json_string_value(text), json_string_length(text)) < 0)
			return -1;
	}
	return 0;
}

/* The prompt text the answer is seeded from: for chat, each message's role
 * and content on their own lines. Returns 0 or -1 with *e. */
static int prompt_text(struct sim_req *r, json_t *root, struct ig_buf *p, struct perr *e)
{
	if (r->kind == SIM_CHAT) {
		json_t *msgs = json_object_get(root, "messages");
		if (!msgs)
			return fail(e, "messages", strdup("'messages' is required"));
		if (!json_is_array(msgs) || json_array_size(msgs) == 0)
			return fail(e, "messages", strdup("'messages' must be a non-empty array"));
		size_t i;
		json_t *m;
		json_array_foreach(msgs, i, m) {
			json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
			if (!json_is_string(role))
				return fail(e, "messages", ig_strdupf("messages[%zu] must be an object with a string 'role'", i));
			ig_buf_append(p, json_string_value(role), json_string_length(role));
			ig_buf_append(p, "\n", 1);
			if (add_content(p, json_object_get(m, "content")) < 0)
				return fail(e, "messages", ig_strdupf("messages[%zu].content must be a string, null or an array of parts", i));
			ig_buf_append(p, "\n", 1);
		}
		return 0;
	}
	json_t *prompt = json_object_get(root, "prompt");
	if (!prompt)
		return fail(e, "prompt", strdup("'prompt' is required"));
	if (json_is_array(prompt) && json_array_size(prompt) == 1)
		prompt = json_array_get(prompt, 0);
	if (!json_is_string(prompt))
		return fail(e, "prompt", strdup("'prompt' must be a string (or an array of one string)"));
	ig_buf_append(p, json_string_value(prompt), json_string_length(prompt));
	return 0;
}

/* A positive integer member, or 0 when absent or null. Returns 0 or -1. */
static int get_limit(json_t *root, const char *key, long *out, struct perr *e)
{
	json_t *v = json_object_get(root, key);
	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1)
		return fail(e, key, ig_strdupf("'%s' must be an integer of at least 1", key));
	json_int_t n = json_integer_value(v);
	*out = n > 1000000000 ? 1000000000 : (long)n;
	return 0;
}

/* Reads a completion request into r. Returns 0 or -1 with *e. */
static int parse_completion(struct sim *s, struct sim_req *r, struct perr *e)
{
	json_error_t jerr;
	json_t *root = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &jerr);
	struct ig_buf p;
	int ret = -1;

	ig_buf_init(&p);
	if (!root) {
		fail(e, NULL, ig_strdupf("invalid JSON body: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column));
		goto out;
	}
	if (!json_is_object(root)) {
		fail(e, NULL, strdup("the request body must be a JSON object"));
		goto out;
	}
	json_t *model = json_object_get(root, "model");
	if (model && !json_is_null(model) && !json_is_string(model)) {
		fail(e, "model", strdup("'model' must be a string"));
		goto out;
	}
	json_t *stream = json_object_get(root, "stream");
	if (stream && !json_is_null(stream) && !json_is_boolean(stream)) {
		fail(e, "stream", strdup("'stream' must be a boolean"));
		goto out;
	}
	r->stream = json_is_true(stream);
	json_t *so = json_object_get(root, "stream_options");
	if (so && !json_is_null(so)) {
		json_t *iu = json_is_object(so) ? json_object_get(so, "include_usage") : NULL;
		if (!json_is_object(so) || (iu && !json_is_null(iu) && !json_is_boolean(iu))) {
			fail(e, "stream_options", strdup("'stream_options' must be an object with a boolean 'include_usage'"));
			goto out;
		}
		r->include_usage = r->stream && json_is_true(iu);
	}
	long max_tokens, max_completion_tokens;
	if (get_limit(root, "max_tokens", &max_tokens, e) < 0 ||
	    get_limit(root, "max_completion_tokens", &max_completion_tokens, e) < 0)
		goto out;
	json_t *n = json_object_get(root, "n");
	if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1)) {
		fail(e, "n", strdup("'n' must be 1 (infergate-sim answers one choice)"));
		goto out;
	}
	if (prompt_text(r, root, &p, e) < 0)
		goto out;

	const char *name = json_is_string(model) && json_string_length(model) > 0 ? json_string_value(model)
										   : s->conf->model;
	json_t *jname = json_string(name);
	r->model_json = json_dumps(jname, JSON_ENCODE_ANY | JSON_COMPACT);
	json_decref(jname);
	if (!r->model_json)
		abort();
	r->text_seed = sim_text_seed(p.data ? p.data : "", p.len, (uint64_t)s->conf->seed);
	r->prompt_tokens = sim_text_prompt_tokens(p.len);
	long natural = s->conf->output_tokens > 0 ? s->conf->output_tokens : sim_text_natural_tokens(r->text_seed);
	long limit = max_tokens;
	if (max_completion_tokens > 0 && (limit == 0 || max_completion_tokens < limit))
		limit = max_completion_tokens;
	r->n_tokens = natural;
	if (limit > 0 && natural > limit) {
		r->n_tokens = limit;
		r->length_cut = true;
	}
	sim_text_init(&r->text, r->text_seed);
	ret = 0;
out:
	json_decref(root);
	ig_buf_free(&p);
	return ret;
}

/* ---- completions ---- */

static ssize_t stream_reader(void *cls, uint64_t pos IG_UNUSED, char *buf, size_t max)
{
	struct sim_req *r = cls;

	if (r->client_gone || r->sim->stopping)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	size_t n = ig_buf_pending(&r->out);
	if (n > 0) {
		if (n > max)
			n = max;
		memcpy(buf, ig_buf_head(&r->out), n);
		ig_buf_consume(&r->out, n);
		return (ssize_t)n;
	}
	if (r->state == SIM_REQ_DONE)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* Nothing yet: returning 0 without suspending would spin. */
	suspend(r);
	return 0;
}

/* The finished non-streamed answer: hand r->out to MHD without a copy. */
static enum MHD_Result respond_final(struct sim_req *r)
{
	if (r->out.off != 0 || ig_buf_append(&r->out, "", 1) < 0)
		return MHD_NO;
	char *body = r->out.data;
	ig_buf_init(&r->out);
	return respond_json(r->conn, 200, body);
}

static enum MHD_Result set_fault(struct sim *s, struct sim_req *r)
{
	json_error_t jerr;
	json_t *root = json_loadb(r->body.data ? r->body.data : "", r->body.len, 0, &jerr);
	json_t *mode = json_is_object(root) ? json_object_get(root, "mode") : NULL;
	enum sim_fault f;
	enum MHD_Result ret;

	r->state = SIM_REQ_DONE;
	if (!root)
		ret = respond_error(s, r->conn, 400, NULL, NULL, "invalid JSON body: %s", jerr.text);
	else if (!json_is_string(mode) || sim_fault_parse(json_string_value(mode), &f) < 0)
		ret = respond_error(s, r->conn, 400, NULL, "mode",
				    "'mode' must be one of \"ok\", \"error\", \"hang\", \"slow\", \"down\"");
	else {
		enum sim_fault old = s->fault;
		s->fault = f;
		if (old != f)
			ig_log_info("fault mode %s -> %s", sim_fault_name(old), sim_fault_name(f));
		ret = respond_json(r->conn, 200, dump(json_pack("{s:s, s:s}", "mode", sim_fault_name(f),
								 "previous", sim_fault_name(old))));
	}
	json_decref(root);
	return ret;
}

/* The body is complete: validate, then answer, stream, queue or hang. */
static enum MHD_Result start_request(struct sim *s, struct sim_req *r)
{
	struct perr e = {NULL, NULL};

	if (r->too_large) {
		r->state = SIM_REQ_DONE;
		return respond_error(s, r->conn, 413, NULL, NULL, "request body larger than %u bytes", SIM_MAX_BODY);
	}
	if (r->kind == SIM_FAULT_SET)
		return set_fault(s, r);
	if (s->stopping || s->fault == SIM_FAULT_DOWN) {
		r->state = SIM_REQ_DONE;
		s->st.rejected++;
		return respond_error(s, r->conn, 503, NULL, NULL, "infergate-sim is %s",
				     s->stopping ? "shutting down" : "down (fault mode down)");
	}
	if (parse_completion(s, r, &e) < 0) {
		r->state = SIM_REQ_DONE;
		enum MHD_Result ret = respond_error(s, r->conn, 400, NULL, e.param, "%s", e.msg);
		free(e.msg);
		return ret;
	}
	ig_buf_free(&r->body);
	if (sim_engine_should_fail(s)) {
		r->state = SIM_REQ_DONE;
		s->st.failed++;
		return respond_error(s, r->conn, 500, NULL, NULL, "simulated server failure (%s)",
				     s->fault == SIM_FAULT_ERROR ? "fault mode error" : "--fail-rate");
	}
	memcpy(r->id, r->kind == SIM_CHAT ? "chatcmpl-" : "cmpl-", r->kind == SIM_CHAT ? 9 : 5);
	ig_random_hex(r->id + (r->kind == SIM_CHAT ? 9 : 5), 24);
	r->created = ig_wall_s();

	sim_engine_submit(s, r);
	if (r->state == SIM_REQ_HUNG) {
		suspend(r);
		return MHD_YES;
	}
	if (r->stream) {
		struct MHD_Response *resp =
			MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, NULL);
		if (!resp)
			return MHD_NO;
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
		enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
		MHD_destroy_response(resp);
		return ret;
	}
	if (r->state == SIM_REQ_DONE)
		return respond_final(r);
	suspend(r);
	return MHD_YES;
}

enum MHD_Result sim_server_handler(void *cls, struct MHD_Connection *conn, const char *url,
				   const char *method, const char *version IG_UNUSED,
				   const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct sim *s = cls;
	struct sim_req *r = *con_cls;

	if (!r) {
		size_t i;
		for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
			if (strcmp(url, routes[i].path) == 0)
				break;
		if (i == sizeof(routes) / sizeof(routes[0]))
			return respond_error(s, conn, 404, NULL, NULL, "no such endpoint: %s %s", method, url);
		bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
		if (routes[i].post && strcmp(method, "POST") == 0) {
			enum sim_kind kind = routes[i].route == R_CHAT ? SIM_CHAT
					   : routes[i].route == R_COMPLETIONS ? SIM_COMPLETION : SIM_FAULT_SET;
			r = req_new(s, conn, kind);
			if (!r)
				return MHD_NO;
			*con_cls = r;
			return MHD_YES;
		}
		if (routes[i].get && get)
			return answer_get(s, conn, routes[i].route);
		return respond_error(s, conn, 405, routes[i].allow, NULL, "method %s not allowed on %s (allowed: %s)",
				     method, url, routes[i].allow);
	}
	if (*upload_data_size > 0) {
		if (!r->too_large && (r->body.len + *upload_data_size > SIM_MAX_BODY ||
				      ig_buf_append(&r->body, upload_data, *upload_data_size) < 0)) {
			r->too_large = true;
			ig_buf_free(&r->body);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->state == SIM_REQ_READING)
		return start_request(s, r);
	/* Called again after a resume. */
	if (r->client_gone || s->stopping)
		return MHD_NO;
	if (r->state == SIM_REQ_DONE && !r->stream)
		return respond_final(r);
	suspend(r);
	return MHD_YES;
}

void sim_server_completed(void *cls IG_UNUSED, struct MHD_Connection *conn IG_UNUSED, void **con_cls,
			  enum MHD_RequestTerminationCode toe IG_UNUSED)
{
	struct sim_req *r = *con_cls;
	if (!r)
		return;
	*con_cls = NULL;
	/* MHD noticed the disconnect itself (the connection was not suspended). */
	sim_engine_abort(r->sim, r);
	sim_req_free(r);
}
