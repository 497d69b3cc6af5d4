/* Prefill/decode disaggregation (pd.h says what each side does). Modelled
 * on the engines' code, in simulated time:
 *   SGLang python/sglang/srt/disaggregation/prefill.py, decode.py,
 *   common/conn.py, mooncake/conn.py (the bootstrap server, KVPoll), and
 *   sgl-router's PD router (src/routers/http/pd_router.rs: the same body
 *   sent to both, bootstrap_host/_port/_room added, lists for a batch);
 *   vLLM vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py
 *   (request_finished's kv_transfer_params, VLLM_NIXL_ABORT_REQUEST_TIMEOUT)
 *   and its toy proxy (tests/v1/kv_connector/nixl_integration/
 *   toy_proxy_server.py: the prefill request's params, then the decode's).
 * A room is one prompt's KV on the prefill side: COMPUTING while the engine
 * runs the request, READY when its one token is made (the KV held), SENDING
 * once a decode asked for it (for the transfer's time). A fetch is the
 * decode side's: a request to the prefill's listener, then the transfer's
 * time, then the engine with no prefill to compute (sim_req.kv_ready). Not
 * here: the engine's steps (engine.c), the HTTP answers of the main port
 * (server.c). */
#include "config.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "engine.h"
#include "pd.h"
#include "wire.h"

enum room_state {
	ROOM_COMPUTING, /* the prefill request is in the engine */
	ROOM_READY,     /* its KV is held for a decode to take */
	ROOM_SENDING,   /* handed over: the transfer takes its time */
};

struct sim_pd_room {
	struct ig_list link;               /* pd->rooms */
	struct sim *s;
	char key[64];                      /* SGLang: the bootstrap_room; vLLM: the request id */
	enum room_state state;
	struct sim_req *req;               /* the prefill request while it waits (SGLang) or computes */
	void (*wake)(struct sim_req *r);   /* the server's wake of req */
	char rid[40];                      /* the engine's rid in SGLang's messages */
	long prompt_tokens;
	uint64_t bytes;
	uint64_t deadline_us;              /* READY: freed; SENDING: the transfer ends */
	bool never;                        /* --disaggregation-fail-transfer */
};

enum fetch_state {
	FETCH_SENDING,  /* connecting and writing the request */
	FETCH_READING,  /* reading the listener's answer */
	FETCH_RETRY,    /* asking again at next_us */
	FETCH_TRANSFER, /* the KV is coming: submitted at next_us */
};

struct sim_pd_fetch {
	struct ig_list link;               /* pd->fetches */
	struct sim *s;
	struct sim_req *req;
	struct sim_event ev;               /* the socket to the listener; fd -1: none */
	enum fetch_state st;
	char host[256];
	int port;
	char key[64];
	char rid[40];
	uint64_t started_us, deadline_us, next_us;
	unsigned attempts;                 /* connections tried: each takes the next address */
	struct ig_buf io;                  /* the request going out, then the answer coming in */
	size_t sent;
	uint64_t bytes;
};

/* A listener request waiting for a room (a long poll). */
struct waiter {
	struct ig_list link;               /* pd->waiters */
	struct sim *s;
	struct MHD_Connection *conn;
	struct sim_event ev;               /* its socket, watched for hang-up while it waits */
	bool watching;
	char key[64];
	uint64_t deadline_us;
	unsigned status;                   /* 0 while it waits */
	char *body;
};

struct sim_pd {
	struct MHD_Daemon *mhd;
	struct sim_event ev;
	unsigned port;
	struct ig_list rooms, waiters, fetches;
	long next_block;                   /* vLLM block ids handed out */
};

#define BLOCK_TOKENS 16                    /* vLLM's default block size */
#define RETRY_US 50000u                    /* a decode asks again after this */

uint64_t sim_pd_transfer_us(uint64_t bytes, double gbps, double time_scale)
{
	double us = (double)bytes / (gbps * 1e9) * 1e6 / (time_scale > 0 ? time_scale : 1);
	return us < 1 ? 1 : (uint64_t)ceil(us);
}

int sim_pd_parse_reply(const char *buf, size_t len, unsigned *status, const char **body, size_t *blen)
{
	unsigned st = 0;
	if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ')
		return -1;
	for (int i = 9; i < 12; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -1;
		st = st * 10 + (unsigned)(buf[i] - '0');
	}
	const char *end = memmem(buf, len, "\r\n\r\n", 4);
	if (!end)
		return -1;
	*status = st;
	*body = end + 4;
	*blen = len - (size_t)(end + 4 - buf);
	return 0;
}

/* Simulated wall time of the timeouts (--time-scale), microseconds. */
static uint64_t scaled_us(const struct sim_conf *c, double sim_us)
{
	double w = sim_us / c->time_scale;
	return w < 1 ? 1 : (uint64_t)w;
}

static bool key_ok(const char *k, size_t n)
{
	if (n == 0 || n >= 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((k[i] >= '0' && k[i] <= '9') || (k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') ||
		      k[i] == '-' || k[i] == '_' || k[i] == '.'))
			return false;
	return true;
}

static struct sim_pd_room *room_find(struct sim_pd *pd, const char *key)
{
	struct sim_pd_room *rm;
	IG_LIST_FOREACH(rm, &pd->rooms, struct sim_pd_room, link)
		if (rm->key[0] && strcmp(rm->key, key) == 0)
			return rm;
	return NULL;
}

static void room_free(struct sim *s, struct sim_pd_room *rm)
{
	if (rm->state == ROOM_READY)
		s->pd_st.held--;
	if (rm->req)
		rm->req->pd_room = NULL;
	ig_list_del(&rm->link);
	free(rm);
}

/* ---- errors, in the imitated server's shape ---- */

/* r's answer becomes a 500: SGLang's abort with INTERNAL_SERVER_ERROR, which
 * the tokenizer manager raises as an HTTPException and the server writes
 * flat with the status as its type (python/sglang/srt/managers/
 * tokenizer_manager.py, entrypoints/openai/serving_base.py); vLLM's request
 * that failed to load its KV (kv_load_failure_policy "fail": FINISHED_ERROR)
 * is its GenerationError, 500 "Internal server error". A stream (200 sent)
 * gets the error event and [DONE] instead. */
static void fail_answer(struct sim *s, struct sim_req *r, const char *msg)
{
	bool vllm = s->conf->flavor == SIM_FLAVOR_VLLM;
	ig_buf_free(&r->out);
	ig_buf_init(&r->out);
	if (r->stream) {
		json_t *e = json_pack("{s:{s:s, s:s, s:s, s:n, s:i}}", "error", "object", "error", "message", msg, "type",
				      "INTERNAL_SERVER_ERROR", "param", "code", 500);
		char *t = json_dumps(e, JSON_PRESERVE_ORDER);
		json_decref(e);
		if (vllm || r->kind == SIM_GENERATE || r->kind == SIM_RESPONSES)
			sim_wire_stream_error(&r->out, r, (enum sim_flavor)s->conf->flavor);
		else
			ig_buf_printf(&r->out, "data: %s\n\ndata: [DONE]\n\n", t);
		free(t);
	} else {
		json_t *j;
		if (vllm)
			j = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", "Internal server error", "type",
				      "InternalServerError", "param", "code", 500);
		else if (r->kind == SIM_GENERATE)
			j = json_pack("{s:{s:s}}", "error", "message", msg);
		else
			j = json_pack("{s:s, s:s, s:s, s:n, s:i}", "object", "error", "message", msg, "type", "500", "param",
				      "code", 500);
		char *t = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
		json_decref(j);
		ig_buf_append(&r->out, t, strlen(t));
		free(t);
		r->status = 500;
	}
	r->state = SIM_REQ_DONE;
	s->pd_st.failed++;
}

/* ---- the prefill side: rooms ---- */

static void waiter_answer(struct sim *s, struct waiter *w, unsigned status, char *body)
{
	w->status = status;
	w->body = body;
	MHD_resume_connection(w->conn);
	s->need_mhd_run = true;
}

/* A decode takes rm's KV: the transfer starts. Returns the listener's
 * answer body (malloc'd). */
static char *handover(struct sim *s, struct sim_pd_room *rm, uint64_t now)
{
	rm->state = ROOM_SENDING;
	s->pd_st.held--;
	rm->deadline_us = now + sim_pd_transfer_us(rm->bytes, s->conf->transfer_gbps, s->conf->time_scale);
	ig_log_debug("pd: room %s handed over, %llu bytes", rm->key, (unsigned long long)rm->bytes);
	return ig_strdupf("{\"room\":\"%s\",\"prompt_tokens\":%ld,\"bytes\":%llu}", rm->key, rm->prompt_tokens,
			  (unsigned long long)rm->bytes);
}

/* vLLM: the prefill's answer carries the params its decode will send, as
 * NixlConnectorScheduler.request_finished returns them. */
static void add_kv_params(struct sim *s, struct sim_req *r, struct sim_pd_room *rm)
{
	struct sim_pd *pd = s->pd;
	json_t *root = json_loadb(ig_buf_head(&r->out), ig_buf_pending(&r->out), 0, NULL);
	if (!json_is_object(root)) {
		json_decref(root);
		return;
	}
	json_t *ids = json_array();
	for (long i = 0; i < (rm->prompt_tokens + BLOCK_TOKENS - 1) / BLOCK_TOKENS; i++)
		json_array_append_new(ids, json_integer(pd->next_block++ % 1000000));
	const char *host = s->conf->listen_host;
	if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
		host = "127.0.0.1";
	json_object_set_new(root, "kv_transfer_params",
			    json_pack("{s:b, s:b, s:o, s:s, s:s, s:s, s:i, s:i}", "do_remote_prefill", 1,
				      "do_remote_decode", 0, "remote_block_ids", ids, "remote_engine_id", s->conf->engine_id,
				      "remote_request_id", rm->key, "remote_host", host, "remote_port", (int)pd->port,
				      "tp_size", 1));
	char *t = json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT);
	json_decref(root);
	ig_buf_free(&r->out);
	ig_buf_init(&r->out);
	ig_buf_append(&r->out, t, strlen(t));
	free(t);
}

/* The prefill request's wake (it replaces the server's): when its one
 * token is made the room's KV is ready. SGLang keeps the answer until the
 * hand-over (its prefill finishes a request when the KV sender reports
 * success: prefill.py process_disagg_prefill_inflight_queue); vLLM answers
 * at once with the params. */
static void room_wake(struct sim_req *r)
{
	struct sim_pd_room *rm = r->pd_room;
	if (!rm)
		return;
	struct sim *s = rm->s;
	if (r->state != SIM_REQ_DONE || rm->state != ROOM_COMPUTING) {
		if (!r->pd_hold)
			rm->wake(r);
		return;
	}
	uint64_t now = ig_now_us();
	rm->state = ROOM_READY;
	rm->prompt_tokens = r->prompt_tokens;
	rm->bytes = (uint64_t)r->prompt_tokens * (uint64_t)s->conf->kv_bytes_per_token;
	rm->never = s->conf->pd_fail;
	s->pd_st.held++;
	if (s->conf->flavor == SIM_FLAVOR_VLLM) {
		/* the blocks wait for a decode up to VLLM_NIXL_ABORT_REQUEST_TIMEOUT */
		snprintf(rm->key, sizeof(rm->key), "%s", r->id);
		rm->deadline_us = now + scaled_us(s->conf, s->conf->nixl_abort_s * 1e6);
		if (!r->stream)
			add_kv_params(s, r, rm);
		void (*w)(struct sim_req *) = rm->wake;
		rm->req = NULL;
		r->pd_room = NULL;
		r->wake = w;
		w(r);
		return;
	}
	/* SGLang: the bootstrap timeout runs until a decode takes it */
	rm->deadline_us = now + scaled_us(s->conf, (double)s->conf->pd_timeout_ms * 1000.0);
	if (rm->never)
		return;
	struct waiter *w;
	IG_LIST_FOREACH(w, &s->pd->waiters, struct waiter, link) {
		if (w->status == 0 && strcmp(w->key, rm->key) == 0) {
			waiter_answer(s, w, 200, handover(s, rm, now));
			break;
		}
	}
}

/* The room's deadline came. */
static void room_due(struct sim *s, struct sim_pd_room *rm, uint64_t now)
{
	struct sim_req *r = rm->req;
	if (rm->state == ROOM_SENDING) {
		s->pd_st.sent++;
		s->pd_st.bytes_sent += rm->bytes;
		if (r) {
			r->pd_hold = false;
			r->wake = rm->wake;
			r->pd_room = NULL;
			rm->req = NULL;
			r->wake(r);
		}
		room_free(s, rm);
		return;
	}
	if (rm->state != ROOM_READY)
		return;
	if (!r) { /* vLLM: no decode read the blocks in time; they are freed */
		ig_log_info("pd: blocks of %s freed after %g s unread", rm->key, s->conf->nixl_abort_s);
		s->pd_st.failed++;
		s->pd_st.expired++;
		room_free(s, rm);
		return;
	}
	/* SGLang: the prefill's KV sender timed out waiting for its decode
	 * (common/conn.py poll: SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT), and the
	 * request is aborted with 500 (prefill.py: "Prefill bootstrap failed") */
	char *msg = ig_strdupf("Prefill bootstrap failed for request rank=0 req.rid='%s' req.bootstrap_room=%s with "
			       "exception KVTransferError(bootstrap_room=%s): Request %s timed out after %.1fs in "
			       "KVPoll.Bootstrapping", rm->rid, rm->key, rm->key, rm->key,
			       (double)s->conf->pd_timeout_ms / 1000.0);
	ig_log_warn("pd: %s", msg);
	s->pd_st.bootstrap_failed++;
	fail_answer(s, r, msg);
	free(msg);
	(void)now;
	r->pd_hold = false;
	r->wake = rm->wake;
	r->pd_room = NULL;
	rm->req = NULL;
	room_free(s, rm);
	r->wake(r);
}

/* ---- the listener (SGLang's bootstrap server, vLLM's side channel) ---- */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, char *body)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	enum MHD_Result ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* The decode's connection hung up while it waited: it is answered (into
 * nothing) and goes. */
static void waiter_gone(struct sim_event *ev, uint32_t events IG_UNUSED)
{
	struct waiter *w = ev->data;
	if (w->status == 0)
		waiter_answer(w->s, w, 404, strdup("{\"error\":\"gone\"}"));
}

static enum MHD_Result listener(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
				const char *version IG_UNUSED, const char *upload_data IG_UNUSED,
				size_t *upload_data_size, void **con_cls)
{
	struct sim *s = cls;
	struct waiter *w = *con_cls;
	if (w) { /* resumed: its answer is decided */
		char *body = w->body;
		w->body = NULL;
		return reply(conn, w->status, body ? body : strdup("{}"));
	}
	if (*upload_data_size > 0) {
		*upload_data_size = 0; /* no bodies here */
		return MHD_YES;
	}
	if (strcmp(url, "/health") == 0)
		return reply(conn, 200, strdup("\"OK\""));
	if (strcmp(url, "/sim/pd/kv") != 0)
		return reply(conn, 404, strdup("{\"detail\":\"Not Found\"}"));
	if (strcmp(method, "GET") != 0)
		return reply(conn, 405, strdup("{\"detail\":\"Method Not Allowed\"}"));
	const char *key = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "room");
	const char *wait = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "wait_ms");
	if (!key || !key_ok(key, strlen(key)))
		return reply(conn, 400, strdup("{\"error\":\"room: a key of 1..63 characters [A-Za-z0-9_.-]\"}"));
	long wait_ms = wait ? strtol(wait, NULL, 10) : 0;
	uint64_t now = ig_now_us();
	struct sim_pd_room *rm = room_find(s->pd, key);
	if (rm && rm->state == ROOM_READY && !rm->never)
		return reply(conn, 200, handover(s, rm, now));
	if (wait_ms <= 0 || s->stopping)
		return reply(conn, 404, ig_strdupf("{\"error\":\"room %s has no KV to hand over\"}", key));
	if (!(w = calloc(1, sizeof(*w))))
		return MHD_NO;
	snprintf(w->key, sizeof(w->key), "%s", key);
	w->s = s;
	w->conn = conn;
	w->deadline_us = now + (uint64_t)(wait_ms > 3600000 ? 3600000 : wait_ms) * 1000u;
	ig_list_append(&s->pd->waiters, &w->link);
	s->pd_st.asking++;
	*con_cls = w;
	MHD_suspend_connection(conn);
	/* MHD does not see a suspended client leave: a decode that gave up
	 * must not be handed the KV its successor should get */
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci) {
		w->ev = (struct sim_event){.fd = ci->connect_fd, .handler = waiter_gone, .data = w};
		w->watching = sim_event_add(s, &w->ev, EPOLLRDHUP | EPOLLET) == 0;
	}
	return MHD_YES;
}

static void listener_done(void *cls IG_UNUSED, struct MHD_Connection *conn IG_UNUSED, void **con_cls,
			  enum MHD_RequestTerminationCode toe IG_UNUSED)
{
	struct waiter *w = *con_cls;
	if (!w)
		return;
	*con_cls = NULL;
	if (w->watching)
		sim_event_del(w->s, &w->ev);
	w->s->pd_st.asking--;
	ig_list_del(&w->link);
	free(w->body);
	free(w);
}

int sim_pd_init(struct sim *s)
{
	const struct sim_conf *c = s->conf;
	bool prefill = c->flavor == SIM_FLAVOR_SGLANG && c->pd_mode == SIM_PD_MODE_PREFILL;
	bool nixl = c->flavor == SIM_FLAVOR_VLLM && c->kv_transfer_config;
	if (!prefill && !nixl && !(c->flavor == SIM_FLAVOR_SGLANG && c->pd_mode == SIM_PD_MODE_DECODE))
		return 0;
	struct sim_pd *pd = calloc(1, sizeof(*pd));
	if (!pd)
		return -1;
	ig_list_init(&pd->rooms);
	ig_list_init(&pd->waiters);
	ig_list_init(&pd->fetches);
	pd->ev.fd = -1;
	s->pd = pd;
	if (!prefill && !nixl)
		return 0; /* an SGLang decode server only asks */
	struct sockaddr_storage addr = c->addr;
	long port = prefill ? c->bootstrap_port : c->nixl_port;
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
	if (addr.ss_family == AF_INET6) {
		flags |= MHD_USE_IPv6;
		((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)port);
	} else {
		((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)port);
	}
	pd->mhd = MHD_start_daemon(flags, 0, NULL, NULL, listener, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
				   MHD_OPTION_NOTIFY_COMPLETED, listener_done, s, MHD_OPTION_CONNECTION_TIMEOUT, 600u,
				   /* a decode's every request asks once: as many as the main port takes */
				   MHD_OPTION_CONNECTION_LIMIT, 16000u, MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u,
				   MHD_OPTION_EXTERNAL_LOGGER, ig_httpd_log, NULL, MHD_OPTION_END);
	if (!pd->mhd) {
		ig_log_error("cannot listen on %s port %ld for %s", c->listen_host, port,
			     prefill ? "--disaggregation-bootstrap-port" : "--nixl-side-channel-port");
		return -1;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(pd->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	/* no handler: sim_pd_run runs MHD every loop turn */
	pd->ev = (struct sim_event){.fd = di ? di->epoll_fd : -1, .handler = NULL, .data = s};
	if (!di || sim_event_add(s, &pd->ev, EPOLLIN) < 0) {
		ig_log_error("%s: epoll_ctl: %s", __func__, strerror(errno));
		return -1;
	}
	di = MHD_get_daemon_info(pd->mhd, MHD_DAEMON_INFO_BIND_PORT);
	pd->port = di ? di->port : (unsigned)port;
	ig_log_info("%s listening on http://%s%s%s:%u (GET /sim/pd/kv)",
		    prefill ? "bootstrap server" : "NIXL side channel", flags & MHD_USE_IPv6 ? "[" : "", c->listen_host,
		    flags & MHD_USE_IPv6 ? "]" : "", pd->port);
	return 0;
}

/* ---- the decode side: fetches ---- */

static void fetch_close(struct sim *s, struct sim_pd_fetch *f)
{
	if (f->ev.fd >= 0) {
		sim_event_del(s, &f->ev);
		close(f->ev.fd);
		f->ev.fd = -1;
	}
	ig_buf_free(&f->io);
	ig_buf_init(&f->io);
	f->sent = 0;
}

static void fetch_free(struct sim *s, struct sim_pd_fetch *f)
{
	fetch_close(s, f);
	if (f->req)
		f->req->pd_fetch = NULL;
	ig_list_del(&f->link);
	free(f);
}

/* The decode could not get its KV: SGLang's decode aborts it with 500
 * (decode.py pop_transferred: "Decode transfer failed", after
 * SGLANG_DISAGGREGATION_WAITING_TIMEOUT); vLLM with kv_load_failure_policy
 * "recompute" prefills it here instead, with "fail" (its default) fails it. */
static void fetch_failed(struct sim *s, struct sim_pd_fetch *f, const char *why)
{
	struct sim_req *r = f->req;
	ig_log_warn("pd: the KV of %s from %s:%d: %s", f->key, f->host, f->port, why);
	if (s->conf->flavor == SIM_FLAVOR_VLLM && s->conf->kv_recompute) {
		fetch_free(s, f);
		s->pd_st.failed++;
		r->state = SIM_REQ_READING;
		sim_engine_submit(&s->eng, r);
		return;
	}
	char *msg = ig_strdupf("Decode transfer failed for request rank=0 decode_req.req.rid='%s' "
			       "decode_req.req.bootstrap_room=%s with exception KVTransferError(bootstrap_room=%s): "
			       "Request %s timed out after %.1fs in KVPoll.WaitingForInput",
			       f->rid, f->key, f->key, f->key, (double)(ig_now_us() - f->started_us) / 1e6);
	fetch_free(s, f);
	fail_answer(s, r, msg);
	free(msg);
	if (r->wake)
		r->wake(r);
}

static void fetch_io(struct sim_event *ev, uint32_t events);

/* Asks the listener for the room: SGLang waits there (a long poll) for as
 * long as its timeout leaves; vLLM's blocks exist already or never will. */
static void fetch_start(struct sim *s, struct sim_pd_fetch *f, uint64_t now)
{
	struct addrinfo hints, *res = NULL;
	char ps[16];
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(ps, sizeof(ps), "%d", f->port);
	f->st = FETCH_RETRY;
	f->next_us = now + RETRY_US;
	/* a name resolves from /etc/hosts or DNS here, blocking: hosts in PD
	 * tests are addresses or localhost */
	if (getaddrinfo(f->host, ps, &hints, &res) != 0 || !res)
		return;
	/* each attempt takes the next address (localhost: ::1, then 127.0.0.1) */
	unsigned n = 0;
	for (struct addrinfo *a = res; a; a = a->ai_next)
		n++;
	struct addrinfo *ai = res;
	for (unsigned k = f->attempts++ % n; k > 0; k--)
		ai = ai->ai_next;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS)) {
		if (fd >= 0)
			close(fd);
		freeaddrinfo(res);
		return;
	}
	freeaddrinfo(res);
	long wait_ms = 0;
	if (s->conf->flavor == SIM_FLAVOR_SGLANG && f->deadline_us > now)
		wait_ms = (long)((f->deadline_us - now + 999) / 1000);
	ig_buf_printf(&f->io, "GET /sim/pd/kv?room=%s&wait_ms=%ld HTTP/1.0\r\nHost: %s:%d\r\n\r\n", f->key, wait_ms,
		      f->host, f->port);
	f->ev = (struct sim_event){.fd = fd, .handler = fetch_io, .data = f};
	if (sim_event_add(s, &f->ev, EPOLLOUT) < 0) {
		close(fd);
		f->ev.fd = -1;
		ig_buf_free(&f->io);
		ig_buf_init(&f->io);
		return;
	}
	f->st = FETCH_SENDING;
}

/* The listener's answer, read whole. */
static void fetch_answered(struct sim *s, struct sim_pd_fetch *f, uint64_t now)
{
	unsigned status = 0;
	const char *body;
	size_t blen;
	bool ok = sim_pd_parse_reply(f->io.data ? f->io.data : "", f->io.len, &status, &body, &blen) == 0;
	json_t *j = ok && status == 200 ? json_loadb(body, blen, 0, NULL) : NULL;
	json_t *bytes = json_object_get(j, "bytes");
	if (json_is_integer(bytes) && json_integer_value(bytes) >= 0) {
		f->bytes = (uint64_t)json_integer_value(bytes);
		f->st = FETCH_TRANSFER;
		f->next_us = now + sim_pd_transfer_us(f->bytes, s->conf->transfer_gbps, s->conf->time_scale);
		json_decref(j);
		fetch_close(s, f);
		return;
	}
	json_decref(j);
	fetch_close(s, f);
	if (s->conf->flavor == SIM_FLAVOR_VLLM) {
		fetch_failed(s, f, ok ? "the blocks are gone" : "no answer from the side channel");
		return;
	}
	f->st = FETCH_RETRY; /* not there yet: ask again until the timeout */
	f->next_us = now + RETRY_US;
}

static void fetch_io(struct sim_event *ev, uint32_t events)
{
	struct sim_pd_fetch *f = ev->data;
	struct sim *s = f->s;
	uint64_t now = ig_now_us();
	if (f->st == FETCH_SENDING) {
		int err = 0;
		socklen_t l = sizeof(err);
		if ((events & (EPOLLERR | EPOLLHUP)) || getsockopt(ev->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0 || err) {
			fetch_close(s, f);
			f->st = FETCH_RETRY; /* vLLM: at once, to its next address or its failure */
			f->next_us = s->conf->flavor == SIM_FLAVOR_VLLM ? now : now + RETRY_US;
			s->need_mhd_run = true; /* the loop turns at once */
			return;
		}
		while (f->sent < f->io.len) {
			ssize_t n = send(ev->fd, f->io.data + f->sent, f->io.len - f->sent, MSG_NOSIGNAL);
			if (n < 0 && errno == EAGAIN)
				return;
			if (n <= 0) {
				fetch_close(s, f);
				f->st = FETCH_RETRY;
				f->next_us = now + RETRY_US;
				return;
			}
			f->sent += (size_t)n;
		}
		ig_buf_free(&f->io);
		ig_buf_init(&f->io);
		struct epoll_event e = {.events = EPOLLIN, .data.ptr = ev};
		epoll_ctl(s->epfd, EPOLL_CTL_MOD, ev->fd, &e);
		f->st = FETCH_READING;
		return;
	}
	if (f->st != FETCH_READING)
		return;
	for (;;) {
		char buf[4096];
		ssize_t n = recv(ev->fd, buf, sizeof(buf), 0);
		if (n > 0) {
			if (f->io.len + (size_t)n > 65536 || ig_buf_append(&f->io, buf, (size_t)n) < 0)
				n = 0; /* no answer of ours is that long */
			else
				continue;
		}
		if (n < 0 && errno == EAGAIN)
			return;
		fetch_answered(s, f, now); /* the end (HTTP/1.0: the listener closes), or an error */
		return;
	}
}

/* The KV is here: the engine decodes it, no prefill to compute. */
static void fetch_arrived(struct sim *s, struct sim_pd_fetch *f)
{
	struct sim_req *r = f->req;
	s->pd_st.received++;
	s->pd_st.bytes_received += f->bytes;
	fetch_free(s, f);
	r->kv_ready = true;
	r->state = SIM_REQ_READING;
	sim_engine_submit(&s->eng, r);
}

/* ---- taking a request on ---- */

static int refuse(struct sim_perr *e, unsigned status, const char *type, char *msg)
{
	return sim_refuse(e, status, type, NULL, msg);
}

/* A member that SGLang's router may send as a list (a batch: one per
 * prompt, pd_router.rs): the only item of a list of one, else itself.
 * *many: a longer list. */
static json_t *one_of(json_t *v, bool *many)
{
	if (!json_is_array(v))
		return v;
	if (json_array_size(v) != 1)
		*many = true;
	return json_array_get(v, 0);
}

static struct sim_pd_fetch *fetch_new(struct sim *s, struct sim_req *r, const char *host, int port, const char *key)
{
	struct sim_pd_fetch *f = calloc(1, sizeof(*f));
	if (!f)
		abort();
	f->s = s;
	f->req = r;
	f->ev.fd = -1;
	snprintf(f->host, sizeof(f->host), "%s", host);
	f->port = port;
	snprintf(f->key, sizeof(f->key), "%s", key);
	ig_random_hex(f->rid, 32);
	ig_buf_init(&f->io);
	f->started_us = ig_now_us();
	f->deadline_us = f->started_us + scaled_us(s->conf, (double)s->conf->pd_timeout_ms * 1000.0);
	ig_list_append(&s->pd->fetches, &f->link);
	r->pd_fetch = f;
	r->state = SIM_REQ_FETCHING;
	fetch_start(s, f, f->started_us);
	return f;
}

static struct sim_pd_room *room_new(struct sim *s, struct sim_req *r, const char *key)
{
	struct sim_pd_room *rm = calloc(1, sizeof(*rm));
	if (!rm)
		abort();
	rm->s = s;
	rm->req = r;
	rm->wake = r->wake;
	snprintf(rm->key, sizeof(rm->key), "%s", key ? key : "");
	ig_random_hex(rm->rid, 32);
	rm->state = ROOM_COMPUTING;
	ig_list_append(&s->pd->rooms, &rm->link);
	r->pd_room = rm;
	r->wake = room_wake;
	return rm;
}

/* SGLang: bootstrap_host, bootstrap_port, bootstrap_room (GenerateReqInput
 * and the OpenAI requests take them; python/sglang/srt/managers/io_struct.py).
 * A request without a room is refused as the scheduler does in either mode
 * (managers/scheduler.py handle_generate_request: 400 "Disaggregated
 * request received without boostrap room id", its spelling). */
static int begin_sglang(struct sim *s, struct sim_req *r, json_t *root, struct sim_perr *e)
{
	bool many = false;
	json_t *host = one_of(json_object_get(root, "bootstrap_host"), &many);
	json_t *port = one_of(json_object_get(root, "bootstrap_port"), &many);
	json_t *room = one_of(json_object_get(root, "bootstrap_room"), &many);
	char rid[33];
	if (many)
		return refuse(e, 400, "BadRequestError",
			      strdup("bootstrap fields with more than one item (infergate-sim answers one prompt)"));
	if (!room || json_is_null(room)) {
		ig_random_hex(rid, 32);
		return refuse(e, 400, "BadRequestError",
			      ig_strdupf("Invalid request: Disaggregated request received without boostrap room id. "
					 "req.rid='%s'", rid));
	}
	if (!json_is_integer(room) || json_integer_value(room) < 0)
		return refuse(e, 400, "Bad Request", strdup("'bootstrap_room' must be a non-negative integer"));
	char key[32];
	snprintf(key, sizeof(key), "%lld", (long long)json_integer_value(room));
	if (s->conf->pd_mode == SIM_PD_MODE_PREFILL) {
		/* the prefill makes one token: prefill.py sets max_new_tokens = 1 */
		room_new(s, r, key);
		r->pd_hold = true;
		if (r->n_tokens > 1) {
			r->n_tokens = 1;
			r->length_cut = true;
		}
		return SIM_PD_PREFILL;
	}
	if (!json_is_string(host) || json_string_length(host) == 0 || json_string_length(host) > 255 ||
	    !json_is_integer(port) || json_integer_value(port) < 1 || json_integer_value(port) > 65535)
		return refuse(e, 400, "Bad Request",
			      strdup("a decode request needs 'bootstrap_host' (a string) and 'bootstrap_port' (1..65535)"));
	fetch_new(s, r, json_string_value(host), (int)json_integer_value(port), key);
	return SIM_PD_DECODE;
}

/* vLLM: kv_transfer_params, as the toy proxy sends them
 * (toy_proxy_server.py) and NixlConnectorScheduler reads them
 * (update_state_after_alloc): do_remote_decode makes a prefill;
 * do_remote_prefill with remote_block_ids, remote_engine_id,
 * remote_request_id, remote_host and remote_port a decode. Params short of
 * those are logged and the request runs whole ("Got invalid
 * KVTransferParams"). */
static int begin_vllm(struct sim *s, struct sim_req *r, json_t *root)
{
	json_t *p = json_object_get(root, "kv_transfer_params");
	if (!json_is_object(p))
		return SIM_PD_NONE;
	if (json_is_true(json_object_get(p, "do_remote_decode"))) {
		room_new(s, r, NULL);
		return SIM_PD_PREFILL;
	}
	if (!json_is_true(json_object_get(p, "do_remote_prefill")))
		return SIM_PD_NONE;
	json_t *ids = json_object_get(p, "remote_block_ids"), *host = json_object_get(p, "remote_host"),
	       *port = json_object_get(p, "remote_port"), *rid = json_object_get(p, "remote_request_id");
	if (!json_is_array(ids) || json_array_size(ids) == 0)
		return SIM_PD_NONE; /* nothing to pull: computed here */
	if (!json_is_string(host) || json_string_length(host) == 0 || json_string_length(host) > 255 ||
	    !json_is_integer(port) || json_integer_value(port) < 1 || json_integer_value(port) > 65535 ||
	    !json_is_string(rid) || !key_ok(json_string_value(rid), json_string_length(rid)) ||
	    !json_is_string(json_object_get(p, "remote_engine_id"))) {
		ig_log_warn("pd: Got invalid KVTransferParams. This request will not utilize KVTransfer");
		return SIM_PD_NONE;
	}
	fetch_new(s, r, json_string_value(host), (int)json_integer_value(port), json_string_value(rid));
	return SIM_PD_DECODE;
}

int sim_pd_begin(struct sim *s, struct sim_req *r, const char *body, size_t len, struct sim_perr *e)
{
	if (!s->pd || (r->kind != SIM_CHAT && r->kind != SIM_COMPLETION && r->kind != SIM_GENERATE))
		return SIM_PD_NONE;
	json_t *root = json_loadb(body ? body : "", len, 0, NULL);
	int rc = s->conf->flavor == SIM_FLAVOR_VLLM ? begin_vllm(s, r, root) : begin_sglang(s, r, root, e);
	json_decref(root);
	return rc;
}

void sim_pd_abort(struct sim *s, struct sim_req *r)
{
	if (r->pd_fetch)
		fetch_free(s, r->pd_fetch);
	struct sim_pd_room *rm = r->pd_room;
	if (!rm)
		return;
	r->wake = rm->wake;
	r->pd_room = NULL;
	rm->req = NULL;
	if (rm->state != ROOM_SENDING) /* an aborted prefill frees its KV */
		room_free(s, rm);
}

/* ---- the loop ---- */

void sim_pd_run(struct sim *s, uint64_t now)
{
	struct sim_pd *pd = s->pd;
	if (!pd)
		return;
	struct waiter *w;
	IG_LIST_FOREACH(w, &pd->waiters, struct waiter, link)
		if (w->status == 0 && w->deadline_us <= now)
			waiter_answer(s, w, 404, ig_strdupf("{\"error\":\"room %s has no KV to hand over\"}", w->key));
	struct sim_pd_room *rm, *rn;
	IG_LIST_FOREACH_SAFE(rm, rn, &pd->rooms, struct sim_pd_room, link)
		if ((rm->state == ROOM_READY || rm->state == ROOM_SENDING) && rm->deadline_us <= now)
			room_due(s, rm, now);
	struct sim_pd_fetch *f, *fn;
	IG_LIST_FOREACH_SAFE(f, fn, &pd->fetches, struct sim_pd_fetch, link) {
		if (f->st == FETCH_TRANSFER) {
			if (f->next_us <= now)
				fetch_arrived(s, f);
		} else if (f->deadline_us <= now) {
			fetch_failed(s, f, "timed out");
		} else if (f->st == FETCH_RETRY && f->next_us <= now) {
			/* vLLM reads blocks that exist or never will: no asking again,
			 * only a second address of the name (localhost's ::1, then
			 * 127.0.0.1); a name that does not resolve fails at once */
			if (s->conf->flavor == SIM_FLAVOR_VLLM && f->attempts != 1)
				fetch_failed(s, f, "cannot reach the side channel");
			else
				fetch_start(s, f, now);
		}
	}
	if (pd->mhd)
		MHD_run(pd->mhd);
}

int sim_pd_timeout_ms(struct sim *s, uint64_t now)
{
	struct sim_pd *pd = s->pd;
	if (!pd)
		return -1;
	uint64_t d = UINT64_MAX;
	struct waiter *w;
	IG_LIST_FOREACH(w, &pd->waiters, struct waiter, link)
		if (w->status == 0 && w->deadline_us < d)
			d = w->deadline_us;
	struct sim_pd_room *rm;
	IG_LIST_FOREACH(rm, &pd->rooms, struct sim_pd_room, link)
		if ((rm->state == ROOM_READY || rm->state == ROOM_SENDING) && rm->deadline_us < d)
			d = rm->deadline_us;
	struct sim_pd_fetch *f;
	IG_LIST_FOREACH(f, &pd->fetches, struct sim_pd_fetch, link) {
		uint64_t t = f->st == FETCH_TRANSFER ? f->next_us
			   : f->st == FETCH_RETRY && f->next_us < f->deadline_us ? f->next_us : f->deadline_us;
		if (t < d)
			d = t;
	}
	int ms = -1;
	MHD_UNSIGNED_LONG_LONG mt;
	if (pd->mhd && MHD_get_timeout(pd->mhd, &mt) == MHD_YES)
		ms = mt > 3600000 ? 3600000 : (int)mt;
	if (d != UINT64_MAX) {
		uint64_t us = d > now ? d - now : 0;
		int t = us > 3600000000ull ? 3600000 : (int)((us + 999) / 1000);
		if (ms < 0 || t < ms)
			ms = t;
	}
	return ms;
}

void sim_pd_free(struct sim *s)
{
	struct sim_pd *pd = s->pd;
	if (!pd)
		return;
	struct sim_pd_fetch *f, *fn;
	IG_LIST_FOREACH_SAFE(f, fn, &pd->fetches, struct sim_pd_fetch, link)
		fetch_free(s, f);
	if (pd->mhd) {
		/* no suspended connection may remain when MHD stops */
		struct waiter *w;
		IG_LIST_FOREACH(w, &pd->waiters, struct waiter, link)
			if (w->status == 0)
				waiter_answer(s, w, 503, strdup("{\"error\":\"shutting down\"}"));
		for (int i = 0; i < 4 && !ig_list_empty(&pd->waiters); i++)
			MHD_run(pd->mhd);
		MHD_stop_daemon(pd->mhd);
	}
	struct sim_pd_room *rm, *rn;
	IG_LIST_FOREACH_SAFE(rm, rn, &pd->rooms, struct sim_pd_room, link)
		room_free(s, rm);
	free(pd);
	s->pd = NULL;
}
