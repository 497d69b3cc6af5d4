/* The HTTP side of infergate-sim: routing, the API key, errors in the
 * shape of the server imitated (--flavor), the answers of the read-only
 * endpoints and of the stored Responses, fault switching, and turning the
 * engine's output into MHD responses (a content reader for streams, one
 * buffer otherwise). Not here: reading a generation request (parse.c) and
 * translating Anthropic's Messages API to and from chat (anthropic.c), the
 * bodies of /metrics and the load reports (metrics.c), scheduling
 * (engine.c), the answers' bytes (wire.c). */
#include "config.h"
#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/tokenizer.h"
#include "infergate/util.h"
#include "anthropic.h"
#include "metrics.h"
#include "parse.h"
#include "pd.h"
#include "pooling.h"
#include "server.h"
#include "stored.h"
#include "wire.h"

enum route {
	R_CHAT,        /* POST /v1/chat/completions */
	R_COMPLETIONS, /* POST /v1/completions */
	R_HEALTH,      /* GET /health: empty 200, 503 when down */
	R_MODELS,      /* GET /v1/models */
	R_LOAD,        /* GET /get_load (SGLang, deprecated) */
	R_LOADS,       /* GET /v1/loads (SGLang) */
	R_MODEL_INFO,  /* GET /get_model_info (SGLang) */
	R_SERVER_INFO, /* GET /server_info, /get_server_info (SGLang) */
	R_METRICS,     /* GET /metrics */
	R_STATE,       /* GET /sim/state: the simulator's live counts */
	R_FAULT,       /* GET or POST /sim/fault */
	R_HOLD,        /* GET or POST /sim/hold */
	R_FLUSH,       /* GET or POST /flush_cache (SGLang) */
	R_TOKENIZE,    /* POST /tokenize */
	R_DETOKENIZE,  /* POST /detokenize */
	R_RESPONSES,   /* POST /v1/responses (OpenAI's Responses API) */
	R_RESPONSE_ID, /* GET /v1/responses/{id}, POST .../cancel */
	R_GENERATE,    /* POST /generate (SGLang) */
	R_EMBEDDINGS,  /* POST /v1/embeddings */
	R_RERANK,      /* POST /v1/rerank (and vLLM's /rerank, /v2/rerank) */
	R_SCORE,       /* POST /v1/score (and vLLM's /score) */
	R_POOLING,     /* POST /pooling (vLLM) */
	R_CLASSIFY,    /* POST /classify */
	R_MESSAGES,    /* POST /v1/messages (Anthropic's Messages API: anthropic.c) */
	R_COUNT_TOKENS, /* POST /v1/messages/count_tokens */
	R_LORA_LOAD,   /* POST /v1/load_lora_adapter (vLLM), /load_lora_adapter (SGLang): lora.c */
	R_LORA_UNLOAD, /* POST /v1/unload_lora_adapter, /unload_lora_adapter */
};

#define SGLANG (1u << SIM_FLAVOR_SGLANG)
#define VLLM (1u << SIM_FLAVOR_VLLM)

static const struct {
	const char *path;
	enum route route;
	bool get, post;
	const char *allow; /* for 405; "PUT" in it: PUT is taken as POST */
	unsigned flavors;  /* the servers that have it; elsewhere 404 */
} routes[] = {
	{"/v1/chat/completions", R_CHAT, false, true, "POST", SGLANG | VLLM},
	{"/v1/completions", R_COMPLETIONS, false, true, "POST", SGLANG | VLLM},
	{"/health", R_HEALTH, true, false, "GET, HEAD", SGLANG | VLLM},
	{"/health_generate", R_HEALTH, true, false, "GET, HEAD", SGLANG},
	{"/v1/models", R_MODELS, true, false, "GET, HEAD", SGLANG | VLLM},
	{"/get_load", R_LOAD, true, false, "GET, HEAD", SGLANG},
	{"/v1/loads", R_LOADS, true, false, "GET, HEAD", SGLANG},
	{"/get_model_info", R_MODEL_INFO, true, false, "GET, HEAD", SGLANG},
	{"/server_info", R_SERVER_INFO, true, false, "GET, HEAD", SGLANG},
	{"/get_server_info", R_SERVER_INFO, true, false, "GET, HEAD", SGLANG},
	{"/metrics", R_METRICS, true, false, "GET, HEAD", SGLANG | VLLM},
	{"/sim/state", R_STATE, true, false, "GET, HEAD", SGLANG | VLLM},
	{"/sim/fault", R_FAULT, true, true, "GET, HEAD, POST", SGLANG | VLLM},
	{"/sim/hold", R_HOLD, true, true, "GET, HEAD, POST", SGLANG | VLLM},
	{"/flush_cache", R_FLUSH, true, true, "GET, HEAD, POST", SGLANG},
	{"/tokenize", R_TOKENIZE, false, true, "POST", SGLANG | VLLM},
	{"/detokenize", R_DETOKENIZE, false, true, "POST", SGLANG | VLLM},
	{"/v1/responses", R_RESPONSES, false, true, "POST", SGLANG | VLLM},
	{"/generate", R_GENERATE, false, true, "POST, PUT", SGLANG},
	{"/v1/embeddings", R_EMBEDDINGS, false, true, "POST", SGLANG | VLLM},
	{"/v1/rerank", R_RERANK, false, true, "POST, PUT", SGLANG | VLLM},
	{"/rerank", R_RERANK, false, true, "POST", VLLM},
	{"/v2/rerank", R_RERANK, false, true, "POST", VLLM},
	{"/v1/score", R_SCORE, false, true, "POST", SGLANG | VLLM},
	{"/score", R_SCORE, false, true, "POST", VLLM},
	{"/pooling", R_POOLING, false, true, "POST", VLLM},
	{"/classify", R_CLASSIFY, false, true, "POST, PUT", SGLANG | VLLM},
	{"/v1/messages", R_MESSAGES, false, true, "POST", SGLANG | VLLM},
	{"/v1/messages/count_tokens", R_COUNT_TOKENS, false, true, "POST", SGLANG | VLLM},
	{"/v1/load_lora_adapter", R_LORA_LOAD, false, true, "POST", VLLM},
	{"/v1/unload_lora_adapter", R_LORA_UNLOAD, false, true, "POST", VLLM},
	{"/load_lora_adapter", R_LORA_LOAD, false, true, "POST", SGLANG},
	{"/unload_lora_adapter", R_LORA_UNLOAD, false, true, "POST", SGLANG},
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

/* A response with no body and no Content-Type, as FastAPI's
 * Response(status_code=...) sends it. */
static enum MHD_Result respond_empty(struct MHD_Connection *conn, unsigned status)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	enum MHD_Result ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static char *dump(json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	if (!s)
		abort();
	return s;
}

/* Messages may quote the client's bytes (a model name, a JSON parse
 * error): anything outside printable ASCII but a newline (SGLang's LoRA
 * message has one) becomes '?', so the body can always be built. Returns
 * msg, changed in place. */
static char *ascii(char *msg)
{
	for (unsigned char *p = (unsigned char *)msg; *p; p++)
		if ((*p < 0x20 && *p != '\n') || *p > 0x7e)
			*p = '?';
	return msg;
}

/* The error type create_error_response callers use for a status. */
static const char *type_for_status(unsigned status)
{
	switch (status) {
	case 400: return SIM_T_BAD_REQUEST;
	case 404: return "NotFoundError";
	case 413: return "Request Entity Too Large"; /* the framework's, as for validation */
	case 503: return "ServiceUnavailableError";
	default:  return status >= 500 ? "InternalServerError" : SIM_T_BAD_REQUEST;
	}
}

/* An error in the imitated server's shape. SGLang's is flat (after
 * sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_base.py
 * create_error_response, ErrorResponse in .../openai/protocol.py); vLLM's
 * nests it under "error" (vllm-project/vllm
 * vllm/entrypoints/openai/engine/protocol.py ErrorResponse, ErrorInfo).
 * type NULL: the usual one for the status. 4xx answers count as invalid. */
static enum MHD_Result respond_error(struct sim *s, struct MHD_Connection *conn, unsigned status,
				     const char *type, const char *param, const char *fmt, ...)
	IG_PRINTF(6, 7);

static enum MHD_Result respond_error(struct sim *s, struct MHD_Connection *conn, unsigned status,
				     const char *type, const char *param, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	if (status >= 400 && status < 500)
		s->eng.st.invalid++;
	if (!type)
		type = type_for_status(status);
	const char *m = msg ? ascii(msg) : "error";
	json_t *jp = param ? json_string(param) : json_null();
	json_t *j;
	if (s->conf->flavor == SIM_FLAVOR_VLLM)
		j = json_pack("{s:{s:s, s:s, s:o, s:i}}", "error", "message", m, "type", type, "param", jp,
			      "code", (int)status);
	else
		j = json_pack("{s:s, s:s, s:s, s:o, s:i}", "object", "error", "message", m, "type", type,
			      "param", jp, "code", (int)status);
	free(msg);
	return respond_json(conn, status, dump(j));
}

/* FastAPI's own answers for a path or method no route takes. */
static enum MHD_Result respond_detail(struct sim *s, struct MHD_Connection *conn, unsigned status,
				      const char *detail, const char *allow)
{
	s->eng.st.invalid++;
	return respond(conn, status, dump(json_pack("{s:s}", "detail", detail)), "application/json", allow);
}

/* The simulator's own test-control endpoints keep the OpenAI shape,
 * whatever the flavor: they are no server's. */
static enum MHD_Result respond_oaerror(struct sim *s, struct MHD_Connection *conn, unsigned status,
				       const char *param, const char *msg)
{
	if (status >= 400 && status < 500)
		s->eng.st.invalid++;
	return respond_json(conn, status, ig_oaerror_json(msg, ig_oaerror_type_for_status(status), param, NULL));
}

/* ---- the API key ---- */

/* Paths the key does not guard. SGLang lets OPTIONS and /health*, /ready*,
 * /metrics* through (after sgl-project/sglang python/sglang/srt/utils/auth.py
 * decide_request_auth); vLLM guards only paths under /v1 (vllm-project/vllm
 * vllm/entrypoints/openai/server_utils.py AuthenticationMiddleware). The
 * simulator's /sim/ control endpoints are open in both: tests need them. */
static bool key_exempt(const struct sim *s, const char *method, const char *url)
{
	if (strcmp(method, "OPTIONS") == 0 || strncmp(url, "/sim/", 5) == 0)
		return true;
	if (s->conf->flavor == SIM_FLAVOR_VLLM)
		return strncmp(url, "/v1", 3) != 0;
	return strncmp(url, "/health", 7) == 0 || strncmp(url, "/ready", 6) == 0 ||
	       strncmp(url, "/metrics", 8) == 0;
}

/* Compares in time that never depends on where the bytes differ, with
 * OpenSSL's CRYPTO_memcmp as the gateway does (the servers use Python's
 * secrets.compare_digest, which, like this, tells only a length mismatch). */
static bool key_equal(const char *given, const char *key)
{
	size_t kl = strlen(key);
	return strlen(given) == kl && CRYPTO_memcmp(given, key, kl) == 0;
}

/* `Authorization: Bearer KEY` (the scheme in any case) in both; SGLang also
 * takes `x-api-key: KEY`. */
static bool key_given(const struct sim *s, struct MHD_Connection *conn)
{
	const char *key = s->conf->api_key;
	const char *authz = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (authz && strncasecmp(authz, "bearer ", 7) == 0 && key_equal(authz + 7, key))
		return true;
	if (s->conf->flavor == SIM_FLAVOR_VLLM)
		return false;
	const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
	return x && key_equal(x, key);
}

/* ---- read-only endpoints (their bodies: metrics.c) ---- */

static char *models_json(struct sim *s)
{
	long len = s->conf->context_length > 0 ? s->conf->context_length : 32768;
	json_t *j = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:s, s:n, s:I}]}",
			      "object", "list", "data",
			      "id", s->conf->model, "object", "model", "created", (json_int_t)s->eng.started,
			      "owned_by", "infergate-sim", "root", s->conf->model, "parent",
			      "max_model_len", (json_int_t)len);
	/* The adapters after the base model, each with its path as root and the
	 * base as parent (vllm/entrypoints/openai/serving_models.py
	 * show_available_models; SGLang's http_server.py available_models). */
	for (size_t i = 0; s->eng.lora && i < s->eng.loras.n; i++) {
		const struct sim_lora *a = &s->eng.loras.a[i];
		if (!a->gone)
			json_array_append_new(json_object_get(j, "data"),
					      json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:n}", "id", a->name, "object",
							"model", "created", (json_int_t)s->eng.started, "owned_by",
							"infergate-sim", "root", a->path, "parent", s->conf->model,
							"max_model_len"));
	}
	return dump(j);
}

/* The rank that served a generation, for tests and benchmarks (the real
 * servers say nothing of it): X-Sim-DP-Rank. */
static void rank_header(struct MHD_Response *resp, const struct sim_req *r)
{
	char v[24];
	if (!r->rank)
		return;
	snprintf(v, sizeof(v), "%d", r->rank->idx);
	MHD_add_response_header(resp, "X-Sim-DP-Rank", v);
}

/* /health and /health_generate answer with no body in both servers: 200,
 * or 503 when the server cannot serve (after sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py health_generate,
 * vllm-project/vllm vllm/entrypoints/serve/instrumentator/health.py). */
static enum MHD_Result answer_health(struct sim *s, struct MHD_Connection *conn)
{
	unsigned status = s->eng.fault == SIM_FAULT_DOWN ? 503 : 200;
	/* POST /sim/fault {"probes": N}: this was one of the N */
	if (s->fault_probes > 0 && --s->fault_probes == 0) {
		ig_log_info("fault mode %s -> %s (its /health answers given)", sim_engine_fault_name(s->eng.fault),
			    sim_engine_fault_name((enum sim_fault)s->fault_then));
		s->eng.fault = (enum sim_fault)s->fault_then;
	}
	return respond_empty(conn, status);
}

/* GET /sim/fault: the mode, and while it lasts for a number of /health
 * answers, how many are left and the mode after them. */
static char *fault_json(const struct sim *s)
{
	json_t *j = json_pack("{s:s}", "mode", sim_engine_fault_name(s->eng.fault));
	if (s->fault_probes > 0)
		json_object_update_new(j, json_pack("{s:I, s:s}", "probes_left", (json_int_t)s->fault_probes, "then",
						    sim_engine_fault_name((enum sim_fault)s->fault_then)));
	return dump(j);
}

/* GET /sim/hold and the answer to POST: where generations stop (null: they
 * do not) and how many are stopped there now. */
static char *hold_json(const struct sim *s)
{
	return dump(json_pack("{s:o, s:I}", "after_tokens",
			      s->eng.hold_after >= 0 ? json_integer((json_int_t)s->eng.hold_after) : json_null(), "held",
			      (json_int_t)s->eng.held));
}

/* SGLang's /flush_cache (python/sglang/srt/entrypoints/http_server.py):
 * the radix cache emptied when nothing runs or waits, else 400; plain text
 * either way. With --kv-events each rank publishes an AllBlocksCleared. */
static enum MHD_Result answer_flush(struct sim *s, struct MHD_Connection *conn)
{
	if (sim_engine_flush_cache(&s->eng) < 0)
		return respond(conn, 400, strdup("Flush cache failed.\n"), "text/plain; charset=utf-8", NULL);
	return respond(conn, 200,
		       strdup("Cache flushed.\nPlease check backend logs for more details. (When there are running or "
			      "waiting requests, the operation will not be performed.)\n"),
		       "text/plain; charset=utf-8", NULL);
}

static enum MHD_Result answer_get(struct sim *s, struct MHD_Connection *conn, enum route route)
{
	switch (route) {
	case R_HEALTH:
		return answer_health(s, conn);
	case R_MODELS:
		if (s->eng.fault == SIM_FAULT_DOWN)
			return respond_error(s, conn, 503, NULL, NULL, "infergate-sim is down (fault mode down)");
		return respond_json(conn, 200, models_json(s));
	case R_LOAD:
		return respond_json(conn, 200, sim_metrics_get_load(s));
	case R_LOADS: {
		char *body = sim_metrics_loads(s, MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "dp_rank"));
		if (!body)
			return respond_error(s, conn, 400, SIM_T_VALIDATION, NULL,
					     "dp_rank: Input should be a valid integer, unable to parse string as an integer");
		return respond_json(conn, 200, body);
	}
	case R_STATE:
		return respond_json(conn, 200, sim_metrics_state(s));
	case R_MODEL_INFO:
		return respond_json(conn, 200, dump(json_pack("{s:s, s:s, s:b}", "model_path", s->conf->model,
							      "tokenizer_path", s->conf->model,
							      "is_generation", 1)));
	case R_SERVER_INFO:
		return respond_json(conn, 200, sim_metrics_server_info(s));
	case R_METRICS:
		return respond(conn, 200, sim_metrics_text(s), "text/plain; version=0.0.4; charset=utf-8", NULL);
	case R_FAULT:
		return respond_json(conn, 200, fault_json(s));
	case R_HOLD:
		return respond_json(conn, 200, hold_json(s));
	case R_FLUSH:
		return answer_flush(s, conn);
	default:
		return MHD_NO;
	}
}

/* ---- the request object ---- */

/* One HTTP request that needs an object of its own (a completion, a fault
 * switch, a delayed /health): the engine's request and what only the HTTP
 * side knows about it. *con_cls points to it. */
struct sim_call {
	struct sim_req req;            /* what the engine sees */
	struct sim *sim;
	struct MHD_Connection *conn;
	struct ig_list link;           /* sim->calls */
	struct sim_event ev;           /* the client socket, watched for hang-up
					* while the connection is suspended */
	bool watching;                 /* ev is in the reactor's epoll set */
	bool suspended;                /* MHD connection suspended by us */
	bool client_gone;
	bool too_large;                /* body over SIM_MAX_BODY: 413 */
	struct ig_buf body;            /* request body */
	enum route route;
	struct sim_anth *anth;         /* /v1/messages: its translation (anthropic.c) */
};

static void wake(struct sim_req *r);
static void client_hangup(struct sim_event *ev, uint32_t events);

static struct sim_call *call_new(struct sim *s, struct MHD_Connection *conn, enum sim_kind kind)
{
	struct sim_call *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	sim_engine_req_init(&c->req, kind);
	c->req.wake = wake;
	c->sim = s;
	c->conn = conn;
	c->ev.fd = -1;
	c->ev.handler = client_hangup;
	c->ev.data = c;
	ig_buf_init(&c->body);
	ig_list_append(&s->calls, &c->link);
	s->ncalls++;
	return c;
}

static void call_free(struct sim_call *c)
{
	if (c->watching)
		sim_event_del(c->sim, &c->ev);
	ig_list_del(&c->link);
	c->sim->ncalls--;
	ig_buf_free(&c->body);
	sim_anth_free(c->anth);
	sim_engine_req_free(&c->req);
	free(c);
}

/* Parks the connection until the engine has something for it; meanwhile
 * the reactor watches the client socket, since MHD does not while a
 * connection is suspended. */
static void suspend(struct sim_call *c)
{
	MHD_suspend_connection(c->conn);
	c->suspended = true;
	if (c->watching)
		return;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return;
	c->ev.fd = ci->connect_fd;
	/* Edge-triggered hang-up only: a report comes once, and a client that
	 * merely sends more bytes wakes nobody. */
	if (sim_event_add(c->sim, &c->ev, EPOLLRDHUP | EPOLLET) == 0)
		c->watching = true;
	else
		ig_log_warn("%s: epoll_ctl(%d): %s", __func__, c->ev.fd, strerror(errno));
}

/* Resumes a suspended connection so MHD picks up new bytes or the end. */
static void resume(struct sim_call *c)
{
	if (!c->suspended)
		return;
	c->suspended = false;
	MHD_resume_connection(c->conn);
	c->sim->need_mhd_run = true;
}

/* The engine's callback: r->out has bytes, or the answer is complete. */
static void wake(struct sim_req *r)
{
	resume(IG_CONTAINER_OF(r, struct sim_call, req));
}

/* The reactor saw the client socket hang up. */
static void client_hangup(struct sim_event *ev, uint32_t events IG_UNUSED)
{
	struct sim_call *c = ev->data;
	if (c->client_gone)
		return;
	c->client_gone = true;
	sim_pd_abort(c->sim, &c->req);
	sim_engine_abort(&c->sim->eng, &c->req);
	/* Let MHD see the end now: the reader or handler answers with an error
	 * and MHD closes the connection. */
	resume(c);
}

bool sim_server_wake_all(struct sim *s)
{
	bool any = false;
	struct sim_call *c;
	IG_LIST_FOREACH(c, &s->calls, struct sim_call, link) {
		if (c->suspended) {
			resume(c);
			any = true;
		}
	}
	return any;
}

void sim_server_init(struct sim *s)
{
	ig_list_init(&s->calls);
	s->ncalls = 0;
}

/* ---- stored Responses (kept by stored.c) ---- */

/* GET /v1/responses/{id} and POST /v1/responses/{id}/cancel, after
 * sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_responses.py
 * retrieve_responses and cancel_responses (vLLM's are the same): an id not
 * starting "resp_" is 400, one not held 404, a held one is given back; a
 * cancel of one that finished (they all have: no background mode here) is
 * 400 "Cannot cancel a synchronous response.". Errors nested under "error"
 * in both: /v1/responses* has its own handler in SGLang's http_server.py. */
static enum MHD_Result response_by_id(struct sim *s, struct MHD_Connection *conn, const char *url,
				      const char *method)
{
	const char *id = url + strlen("/v1/responses/"), *slash = strchr(id, '/');
	size_t n = slash ? (size_t)(slash - id) : strlen(id);
	bool cancel = slash && strcmp(slash, "/cancel") == 0;
	if ((slash && !cancel) || n == 0)
		return respond_detail(s, conn, 404, "Not Found", NULL);
	if (strcmp(method, cancel ? "POST" : "GET") != 0 && !(!cancel && strcmp(method, "HEAD") == 0))
		return respond_detail(s, conn, 405, "Method Not Allowed", cancel ? "POST" : "GET, HEAD");
	char rid[48];
	snprintf(rid, sizeof(rid), "%.*s", (int)(n < sizeof(rid) ? n : sizeof(rid) - 1), id);
	const struct sim_stored *e = n < sizeof(rid) ? sim_stored_find(s, rid) : NULL;
	unsigned status = strncmp(id, "resp_", 5) != 0 ? 400 : !e ? 404 : cancel ? 400 : 200;
	if (status != 200) {
		s->eng.st.invalid++;
		char *msg = status == 404 ? ig_strdupf("Response with id '%.*s' not found.", (int)n, id)
			  : cancel && e ? strdup("Cannot cancel a synchronous response.")
					: ig_strdupf("Invalid 'response_id': '%.*s'. Expected an ID that begins with 'resp'.",
						     (int)n, id);
		json_t *j = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", ascii(msg), "type",
				      "invalid_request_error", "param", "code", (int)status);
		free(msg);
		return respond_json(conn, status, dump(j));
	}
	struct sim_req r = {.created = e->created, .text_seed = e->text_seed, .prompt_tokens = e->prompt_tokens,
			    .n_tokens = e->n_tokens, .length_cut = e->length_cut};
	memcpy(r.id, e->id, sizeof(r.id));
	memcpy(r.prev_id, e->prev_id, sizeof(r.prev_id));
	r.model_json = (char *)e->model;
	struct ig_buf o;
	ig_buf_init(&o);
	sim_wire_response_object(&o, &r);
	ig_buf_append(&o, "", 1);
	return respond_json(conn, 200, o.data);
}

/* ---- completions ---- */

static ssize_t stream_reader(void *cls, uint64_t pos IG_UNUSED, char *buf, size_t max)
{
	struct sim_call *c = cls;
	struct sim_req *r = &c->req;

	if (c->client_gone || c->sim->stopping)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (r->pd_hold) { /* an SGLang prefill answers after its KV hand-over (pd.c) */
		suspend(c);
		return 0;
	}
	struct ig_buf *out = c->anth ? sim_anth_stream(c->anth, r) : &r->out;
	size_t n = ig_buf_pending(out);
	if (n > 0) {
		if (n > max)
			n = max;
		memcpy(buf, ig_buf_head(out), n);
		ig_buf_consume(out, n);
		return (ssize_t)n;
	}
	if (r->state == SIM_REQ_DONE)
		return MHD_CONTENT_READER_END_OF_STREAM;
	/* Nothing yet: returning 0 without suspending would spin. */
	suspend(c);
	return 0;
}

/* The finished non-streamed answer: hand r->out to MHD without a copy. */
static enum MHD_Result respond_final(struct sim_call *c)
{
	struct sim_req *r = &c->req;

	if (c->anth) {
		struct sim_anth_answer a;
		sim_anth_final(c->sim, c->anth, r, &a);
		return respond(c->conn, a.status, a.body, a.ctype, NULL);
	}
	if (r->out.off != 0 || ig_buf_append(&r->out, "", 1) < 0)
		return MHD_NO;
	char *body = r->out.data;
	ig_buf_init(&r->out);
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	rank_header(resp, r);
	enum MHD_Result ret = MHD_queue_response(c->conn, r->status ? r->status : 200, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* POST /sim/fault {"mode"?, "probes"?, "max_running"?}: the fault mode,
 * for good or (probes: N) for the next N /health answers, then back to the
 * mode before: a backend that fails exactly N probes in a row, whatever
 * the prober's timing. And the batch slots (a server that another tenant
 * now shares, for clients that adapt). */
static enum MHD_Result set_fault(struct sim *s, struct sim_call *c)
{
	json_error_t jerr;
	json_t *root = json_loadb(c->body.data ? c->body.data : "", c->body.len, 0, &jerr);
	json_t *mode = json_is_object(root) ? json_object_get(root, "mode") : NULL;
	json_t *slots = json_is_object(root) ? json_object_get(root, "max_running") : NULL;
	json_t *probes = json_is_object(root) ? json_object_get(root, "probes") : NULL;
	enum sim_fault f = s->eng.fault;
	enum MHD_Result ret;

	c->req.state = SIM_REQ_DONE;
	if (!root) {
		char *msg = ig_strdupf("invalid JSON body: %s", jerr.text);
		ret = respond_oaerror(s, c->conn, 400, NULL, msg);
		free(msg);
	} else if ((mode || !slots || probes) &&
		   (!json_is_string(mode) || sim_engine_fault_parse(json_string_value(mode), &f) < 0)) {
		ret = respond_oaerror(s, c->conn, 400, "mode",
				      "'mode' must be one of \"ok\", \"error\", \"hang\", \"slow\", \"down\"");
	} else if (slots && (!json_is_integer(slots) || json_integer_value(slots) < 1 ||
			     json_integer_value(slots) > 1000000)) {
		ret = respond_oaerror(s, c->conn, 400, "max_running", "'max_running' must be an integer in 1..1000000");
	} else if (probes && (!json_is_integer(probes) || json_integer_value(probes) < 1 ||
			      json_integer_value(probes) > 1000000)) {
		ret = respond_oaerror(s, c->conn, 400, "probes", "'probes' must be an integer in 1..1000000");
	} else {
		enum sim_fault old = s->eng.fault;
		s->eng.fault = f;
		if (mode) /* a new mode ends a window; "probes" opens one */
			s->fault_probes = probes ? (long)json_integer_value(probes) : 0;
		if (probes) {
			s->fault_then = (int)old;
			ig_log_info("fault mode %s -> %s for %ld /health answers", sim_engine_fault_name(old),
				    sim_engine_fault_name(f), s->fault_probes);
		} else if (old != f) {
			ig_log_info("fault mode %s -> %s", sim_engine_fault_name(old), sim_engine_fault_name(f));
		}
		if (slots && json_integer_value(slots) != s->conf->max_running) {
			ig_log_info("max running %ld -> %ld", s->conf->max_running, (long)json_integer_value(slots));
			s->conf->max_running = (long)json_integer_value(slots);
		}
		json_t *j = json_pack("{s:s, s:s, s:I}", "mode", sim_engine_fault_name(f), "previous",
				      sim_engine_fault_name(old), "max_running", (json_int_t)s->conf->max_running);
		if (probes)
			json_object_update_new(j, json_pack("{s:I, s:s}", "probes_left", (json_int_t)s->fault_probes,
							    "then", sim_engine_fault_name(old)));
		ret = respond_json(c->conn, 200, dump(j));
	}
	json_decref(root);
	return ret;
}

/* POST /sim/hold {"after_tokens": N | null}: every generation stops after
 * N tokens (a stream has sent them, a whole answer waits) until the next
 * call, which lets the held ones go on first; null: none stop. A test
 * control, so that "the client had the first event while the server had
 * not yet made the last" is a fact rather than a race (classic profile). */
static enum MHD_Result set_hold(struct sim *s, struct sim_call *c)
{
	json_error_t jerr;
	json_t *root = json_loadb(c->body.data ? c->body.data : "", c->body.len, 0, &jerr);
	json_t *after = json_is_object(root) ? json_object_get(root, "after_tokens") : NULL;
	enum MHD_Result ret;

	c->req.state = SIM_REQ_DONE;
	if (!root) {
		char *msg = ig_strdupf("invalid JSON body: %s", jerr.text);
		ret = respond_oaerror(s, c->conn, 400, NULL, msg);
		free(msg);
	} else if (!after || !(json_is_null(after) || (json_is_integer(after) && json_integer_value(after) >= 0 &&
						       json_integer_value(after) <= 1000000000))) {
		ret = respond_oaerror(s, c->conn, 400, "after_tokens",
				      "'after_tokens' must be an integer in 0..1000000000, or null");
	} else if (sim_engine_hold(&s->eng, json_is_null(after) ? -1 : (long)json_integer_value(after),
				   ig_now_us()) < 0) {
		ret = respond_oaerror(s, c->conn, 400, "after_tokens",
				      "/sim/hold needs --profile classic (decode steps are not held)");
	} else {
		ig_log_info("generations %s", json_is_null(after) ? "no longer held" : "held");
		ret = respond_json(c->conn, 200, hold_json(s));
	}
	json_decref(root);
	return ret;
}

/* POST /tokenize and /detokenize, answered at once with the tokenizer of
 * text.c (/tokenize: --tokenizer's when given; /detokenize stays text.c's). Shapes: SGLang's TokenizeRequest {"prompt": str | [str]} ->
 * {"tokens", "count", "max_model_len"} (lists for a list) and
 * DetokenizeRequest {"tokens": [int] | [[int]]} -> {"text"}
 * (sgl-project/sglang python/sglang/srt/entrypoints/openai/protocol.py);
 * vLLM's TokenizeCompletionRequest {"prompt": str} -> {"count",
 * "max_model_len", "tokens", "token_strs": null} and DetokenizeRequest
 * {"tokens": [int]} -> {"prompt"} (vllm-project/vllm
 * vllm/entrypoints/openai/protocol.py). "model" is optional in both. */
static enum MHD_Result tokenize(struct sim *s, struct sim_call *c)
{
	json_error_t jerr;
	json_t *root = json_loadb(c->body.data ? c->body.data : "", c->body.len, 0, &jerr);
	bool vllm = s->conf->flavor == SIM_FLAVOR_VLLM, detok = c->route == R_DETOKENIZE;
	const char *field = detok ? "tokens" : "prompt";
	json_t *in = json_object_get(root, field), *model = json_object_get(root, "model");
	enum MHD_Result ret;

	c->req.state = SIM_REQ_DONE;
	if (!json_is_object(root)) {
		ret = root ? respond_error(s, c->conn, 400, SIM_T_VALIDATION, NULL, "the body must be a JSON object")
			   : respond_error(s, c->conn, 400, SIM_T_VALIDATION, NULL, "invalid JSON body: %s", jerr.text);
		goto out;
	}
	if (model && (!json_is_string(model) || strcmp(json_string_value(model), s->conf->model) != 0)) {
		ret = respond_error(s, c->conn, 404, "NotFoundError", "model", "The model `%s` does not exist.",
				    json_is_string(model) ? json_string_value(model) : "?");
		goto out;
	}
	/* one input, or (SGLang) a list of them */
	bool batch = !vllm && json_is_array(in) && json_array_size(in) > 0 &&
		     (detok ? json_is_array(json_array_get(in, 0)) : true);
	bool ok = detok ? json_is_array(in) : json_is_string(in) || batch;
	size_t i;
	json_t *v;
	if (batch)
		json_array_foreach(in, i, v)
			ok = ok && (detok ? json_is_array(v) : json_is_string(v));
	if (!ok) {
		ret = respond_error(s, c->conn, 400, SIM_T_VALIDATION, field, "'%s' must be %s", field,
				    detok ? (vllm ? "a list of integers" : "a list of integers or of lists")
					  : (vllm ? "a string" : "a string or a list of strings"));
		goto out;
	}
	json_t *answer, *outs = json_array(), *counts = json_array();
	size_t n = batch ? json_array_size(in) : 1;
	for (i = 0; i < n; i++) {
		json_t *x = batch ? json_array_get(in, i) : in;
		if (detok) {
			char *text = sim_text_detokenize(x);
			if (!text) {
				json_decref(outs);
				json_decref(counts);
				ret = respond_error(s, c->conn, 400, SIM_T_VALIDATION, field,
						    "token ids must be integers in 0..4294967295");
				goto out;
			}
			json_array_append_new(outs, json_string(text));
			free(text);
		} else {
			json_t *ids = json_array();
			uint32_t *tk = NULL;
			size_t ntk = 0;
			if (s->conf->tok) { /* --tokenizer: the model's own ids, as the prompt is counted */
				if (ig_tokenizer_encode(s->conf->tok, json_string_value(x), json_string_length(x), true, &tk,
							&ntk) < 0)
					abort();
				for (size_t k = 0; k < ntk; k++)
					json_array_append_new(ids, json_integer(tk[k]));
				free(tk);
			} else {
				sim_text_tokenize(json_string_value(x), json_string_length(x), ids);
			}
			json_array_append_new(counts, json_integer((json_int_t)json_array_size(ids)));
			json_array_append_new(outs, ids);
		}
	}
	long max_len = s->conf->context_length > 0 ? s->conf->context_length : 32768;
	json_t *toks = batch ? outs : json_array_get(outs, 0), *cnt = batch ? counts : json_array_get(counts, 0);
	if (detok)
		answer = json_pack("{s:O}", vllm ? "prompt" : "text", toks);
	else if (vllm)
		answer = json_pack("{s:O, s:I, s:O, s:n}", "count", cnt, "max_model_len", (json_int_t)max_len, "tokens",
				   toks, "token_strs");
	else
		answer = json_pack("{s:O, s:O, s:I}", "tokens", toks, "count", cnt, "max_model_len",
				   (json_int_t)max_len);
	json_decref(outs);
	json_decref(counts);
	ret = respond_json(c->conn, 200, dump(answer));
out:
	json_decref(root);
	return ret;
}

/* Embeddings, rerank, score, pooling, classify (pooling.c), at once. */
static enum MHD_Result pool(struct sim *s, struct sim_call *c)
{
	static const enum sim_pool_kind kinds[] = {[R_EMBEDDINGS] = SIM_POOL_EMBED, [R_RERANK] = SIM_POOL_RERANK,
						   [R_SCORE] = SIM_POOL_SCORE, [R_POOLING] = SIM_POOL_POOLING,
						   [R_CLASSIFY] = SIM_POOL_CLASSIFY};
	struct sim_pool_answer a;
	c->req.state = SIM_REQ_DONE;
	sim_pool_answer(s->conf, kinds[c->route], c->body.data, c->body.len,
			MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "X-Request-Id"), &a);
	if (a.body) {
		s->eng.st.prompt_tokens += (uint64_t)a.prompt_tokens;
		return respond_json(c->conn, 200, a.body);
	}
	enum MHD_Result ret;
	struct sim_perr *e = &a.err;
	if (a.native) { /* SGLang's native routes: _create_error_response */
		s->eng.st.invalid++;
		ret = respond_json(c->conn, e->status, dump(json_pack("{s:{s:s}}", "error", "message", ascii(e->msg))));
	} else {
		ret = respond_error(s, c->conn, e->status, e->type ? e->type : e->status == 400 ? SIM_T_VALIDATION : NULL,
				    e->param, "%s", e->msg);
	}
	free(e->msg);
	return ret;
}

/* POST /v1/messages/count_tokens (anthropic.c), at once. */
static enum MHD_Result count_tokens(struct sim *s, struct sim_call *c)
{
	struct sim_anth_answer a;
	c->req.state = SIM_REQ_DONE;
	sim_anth_count_tokens(s, c->body.data, c->body.len, &a);
	if (a.status >= 400 && a.status < 500)
		s->eng.st.invalid++;
	return respond(c->conn, a.status, a.body, a.ctype, NULL);
}

/* A refusal of the generation path; on /v1/messages as the server's
 * Anthropic handler answers it (anthropic.c). */
static enum MHD_Result respond_gen_error(struct sim *s, struct sim_call *c, unsigned status, const char *type,
					 const char *param, const char *msg)
{
	if (!c->anth)
		return respond_error(s, c->conn, status, type, param, "%s", msg);
	struct sim_anth_answer a;
	if (status >= 400 && status < 500)
		s->eng.st.invalid++;
	sim_anth_error(s, c->anth, status, type ? type : type_for_status(status), msg, &a);
	return respond(c->conn, a.status, a.body, a.ctype, NULL);
}

/* The rank header, read as vLLM's _get_data_parallel_rank reads it
 * (vllm/entrypoints/openai/engine/serving.py: int() of
 * "X-data-parallel-rank", anything else ignored). SGLang reads the same
 * header before the body's routed_dp_rank (parse.c), the header winning
 * (python/sglang/srt/entrypoints/openai/serving_base.py
 * extract_routed_dp_rank_from_header). */
static void dp_rank_header(struct sim *s IG_UNUSED, struct sim_call *c)
{
	const char *v = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, "X-data-parallel-rank");
	char *end;
	if (!v)
		return;
	long k = strtol(v, &end, 10);
	while (*end == ' ' || *end == '\t')
		end++;
	if (end == v || *end)
		return;
	c->req.dp_rank = k;
	c->req.dp_rank_set = true;
}

/* The LoRA adapters' load and unload (lora.c); vLLM has them only with
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING (here --allow-runtime-lora-updating):
 * else 404, the route is not there (vllm/entrypoints/openai/api_server.py). */
static enum MHD_Result lora_update(struct sim *s, struct sim_call *c)
{
	bool vllm = s->conf->flavor == SIM_FLAVOR_VLLM;
	struct sim_lora_answer a;
	c->req.state = SIM_REQ_DONE;
	if (vllm && !s->conf->lora_runtime)
		return respond_detail(s, c->conn, 404, "Not Found", NULL);
	sim_lora_update(&s->eng.loras, s->eng.lora, vllm, c->route == R_LORA_LOAD, c->body.data, c->body.len, &a);
	if (a.body)
		return respond(c->conn, a.status, a.body, a.ctype, NULL);
	enum MHD_Result ret = respond_error(s, c->conn, a.status, a.type, NULL, "%s", a.msg);
	free(a.msg);
	return ret;
}

/* The body is complete: validate, then answer, stream, queue or hang. */
static enum MHD_Result start_request(struct sim *s, struct sim_call *c)
{
	struct sim_req *r = &c->req;
	struct sim_perr e = {0, NULL, NULL, NULL};

	if (r->kind == SIM_HEALTH) {
		sim_engine_defer(&s->eng, r);
		suspend(c);
		return MHD_YES;
	}
	if (c->too_large) {
		r->state = SIM_REQ_DONE;
		return respond_error(s, c->conn, 413, NULL, NULL, "request body larger than %u bytes", SIM_MAX_BODY);
	}
	if (r->kind == SIM_FAULT_SET && c->route == R_FLUSH) {
		r->state = SIM_REQ_DONE;
		return answer_flush(s, c->conn);
	}
	if (r->kind == SIM_FAULT_SET)
		return c->route == R_HOLD ? set_hold(s, c) : set_fault(s, c);
	if (r->kind == SIM_UTILITY && (c->route == R_LORA_LOAD || c->route == R_LORA_UNLOAD))
		return lora_update(s, c);
	if (r->kind == SIM_UTILITY)
		return c->route == R_TOKENIZE || c->route == R_DETOKENIZE ? tokenize(s, c)
		       : c->route == R_COUNT_TOKENS			 ? count_tokens(s, c)
									 : pool(s, c);
	if (c->route == R_MESSAGES) { /* into the chat request the rest reads */
		struct sim_anth_answer a;
		if (!(c->anth = sim_anth_begin(s, &c->body, &a))) {
			r->state = SIM_REQ_DONE;
			s->eng.st.invalid++;
			return respond(c->conn, a.status, a.body, a.ctype, NULL);
		}
	}
	if (s->stopping || s->eng.fault == SIM_FAULT_DOWN) {
		r->state = SIM_REQ_DONE;
		s->eng.st.rejected++;
		return respond_gen_error(s, c, 503, NULL, NULL,
					 s->stopping ? "infergate-sim is shutting down"
						     : "infergate-sim is down (fault mode down)");
	}
	dp_rank_header(s, c);
	if (sim_parse_completion(s, r, c->body.data, c->body.len, &e) < 0) {
		r->state = SIM_REQ_DONE;
		enum MHD_Result ret;
		if (r->kind == SIM_GENERATE) { /* http_server.py _create_error_response */
			s->eng.st.invalid++;
			ret = respond_json(c->conn, e.status, dump(json_pack("{s:{s:s}}", "error", "message", ascii(e.msg))));
		} else {
			ret = respond_gen_error(s, c, e.status, e.type, e.param, e.msg);
		}
		free(e.msg);
		return ret;
	}
	if (sim_engine_should_fail(&s->eng)) {
		r->state = SIM_REQ_DONE;
		s->eng.st.failed++;
		/* serving_base.py handle_request's catch-all: "Internal server error: ..." */
		return respond_gen_error(s, c, 500, NULL, NULL,
					 s->eng.fault == SIM_FAULT_ERROR
						 ? "Internal server error: simulated server failure (fault mode error)"
						 : "Internal server error: simulated server failure (--fail-rate)");
	}
	/* prefill/decode disaggregation: a prefill or decode side of a request (pd.c) */
	int pd = sim_pd_begin(s, r, c->body.data, c->body.len, &e);
	ig_buf_free(&c->body);
	if (pd < 0) {
		r->state = SIM_REQ_DONE;
		enum MHD_Result ret = respond_error(s, c->conn, e.status, e.type, e.param, "%s", e.msg);
		free(e.msg);
		return ret;
	}
	if (r->stream && sim_engine_should_fail_stream(&s->eng))
		r->fail_at = r->n_tokens / 2; /* about half the answer, then the error */
	const char *prefix = r->kind == SIM_CHAT ? "chatcmpl-" : r->kind == SIM_RESPONSES ? "resp_"
			   : r->kind == SIM_GENERATE ? "" : "cmpl-";
	if (!r->id[0]) { /* /generate: its rid, else uuid4().hex */
		memcpy(r->id, prefix, strlen(prefix));
		ig_random_hex(r->id + strlen(prefix), r->kind == SIM_GENERATE ? 32 : 24);
	}
	r->t_recv_us = ig_now_us();
	r->created = ig_wall_s();
	if (r->kind == SIM_RESPONSES && r->store) /* the id is known from now on */
		sim_stored_put(s, r);

	if (pd != SIM_PD_DECODE) /* a decode is submitted once its KV is here */
		sim_engine_submit(&s->eng, r);
	if (r->state == SIM_REQ_HUNG) {
		suspend(c);
		return MHD_YES;
	}
	if (r->stream) {
		struct MHD_Response *resp =
			MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, c, NULL);
		if (!resp)
			return MHD_NO;
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
		rank_header(resp, r);
		enum MHD_Result ret = MHD_queue_response(c->conn, 200, resp);
		MHD_destroy_response(resp);
		return ret;
	}
	if (r->state == SIM_REQ_DONE && !r->pd_hold)
		return respond_final(c);
	suspend(c);
	return MHD_YES;
}

enum MHD_Result sim_server_handler(void *cls, struct MHD_Connection *conn, const char *url,
				   const char *method, const char *version IG_UNUSED,
				   const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct sim *s = cls;
	struct sim_call *c = *con_cls;

	if (!c) {
		/* The servers check the key in a middleware, before routing: an
		 * unknown path without the key is 401, not 404. */
		if (s->conf->api_key && !key_exempt(s, method, url) && !key_given(s, conn)) {
			s->eng.st.invalid++;
			return respond_json(conn, 401, dump(json_pack("{s:s}", "error", "Unauthorized")));
		}
		size_t i;
		for (i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
			if (strcmp(url, routes[i].path) == 0 && (routes[i].flavors & (1u << s->conf->flavor)))
				break;
		if (i == sizeof(routes) / sizeof(routes[0]) && strncmp(url, "/v1/responses/", 14) == 0)
			return response_by_id(s, conn, url, method);
		if (i == sizeof(routes) / sizeof(routes[0]))
			return respond_detail(s, conn, 404, "Not Found", NULL);
		bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
		bool post = strcmp(method, "POST") == 0 || (strcmp(method, "PUT") == 0 && strstr(routes[i].allow, "PUT"));
		if (routes[i].post && post) {
			enum route rt = routes[i].route;
			enum sim_kind kind = rt == R_CHAT || rt == R_MESSAGES ? SIM_CHAT
					   : rt == R_COMPLETIONS ? SIM_COMPLETION
					   : rt == R_RESPONSES ? SIM_RESPONSES
					   : rt == R_GENERATE ? SIM_GENERATE
					   : rt == R_FAULT || rt == R_HOLD || rt == R_FLUSH ? SIM_FAULT_SET : SIM_UTILITY;
			if (kind == SIM_CHAT || kind == SIM_COMPLETION || kind == SIM_RESPONSES || kind == SIM_GENERATE) {
				s->eng.st.received++;
				const char *tp = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent");
				if (tp)
					snprintf(s->traceparents[s->ntraceparents++ % 16], sizeof(s->traceparents[0]), "%s",
						 tp);
			}
			c = call_new(s, conn, kind);
			if (!c)
				return MHD_NO;
			c->route = routes[i].route;
			*con_cls = c;
			return MHD_YES;
		}
		/* A health probe to delay: it needs a request object to wait in. */
		if (routes[i].route == R_HEALTH && get && s->conf->health_delay_ms > 0 &&
		    s->eng.fault != SIM_FAULT_DOWN && !s->stopping) {
			c = call_new(s, conn, SIM_HEALTH);
			if (!c)
				return MHD_NO;
			*con_cls = c;
			return MHD_YES;
		}
		if (routes[i].get && get)
			return answer_get(s, conn, routes[i].route);
		return respond_detail(s, conn, 405, "Method Not Allowed", routes[i].allow);
	}
	if (*upload_data_size > 0) {
		if (!c->too_large && (c->body.len + *upload_data_size > SIM_MAX_BODY ||
				      ig_buf_append(&c->body, upload_data, *upload_data_size) < 0)) {
			c->too_large = true;
			ig_buf_free(&c->body);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	struct sim_req *r = &c->req;
	if (r->state == SIM_REQ_READING)
		return start_request(s, c);
	/* Called again after a resume. */
	if (c->client_gone || s->stopping)
		return MHD_NO;
	if (r->kind == SIM_HEALTH && r->state == SIM_REQ_DONE)
		return answer_health(s, conn);
	if (r->state == SIM_REQ_DONE && !r->stream && !r->pd_hold)
		return respond_final(c);
	suspend(c);
	return MHD_YES;
}

void sim_server_completed(void *cls IG_UNUSED, struct MHD_Connection *conn IG_UNUSED, void **con_cls,
			  enum MHD_RequestTerminationCode toe IG_UNUSED)
{
	struct sim_call *c = *con_cls;
	if (!c)
		return;
	*con_cls = NULL;
	/* MHD noticed the disconnect itself (the connection was not suspended). */
	sim_pd_abort(c->sim, &c->req);
	sim_engine_abort(&c->sim->eng, &c->req);
	call_free(c);
}
