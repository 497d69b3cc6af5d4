/* Prefill/decode pairs (strategy.h): an attempt on a decode server
 * (backends[].role "decode") is one half of a pair; the other half, a
 * detached exchange of its own (the "leg"), goes to a prefill server that
 * computes the prompt's KV and hands it over. The client's answer is the
 * decode server's; the leg's is read and dropped, its tokens not counted.
 *
 * SGLang (python/sglang/srt/disaggregation/: prefill.py, decode.py; the
 * router's bootstrap_injector.rs and pd_router.rs): both halves get the same
 * body with bootstrap_host, bootstrap_port (the prefill server's bootstrap
 * server) and bootstrap_room (random in 0..2^63-1), lists of them for a
 * batch (n > 1, a list of prompts); both are sent at once. The prefill
 * server answers once its KV is handed over.
 * vLLM (NixlConnector: vllm/distributed/kv_transfer/kv_connector/v1/
 * nixl_connector.py; its proxy tests/v1/kv_connector/nixl_integration/
 * toy_proxy_server.py): first the prefill server, with kv_transfer_params
 * {"do_remote_decode": true, ...}, stream false, max_tokens 1; then the
 * decode server, with the kv_transfer_params the prefill answered.
 *
 * Faults: a leg that fails before the decode's first byte makes the pair
 * again with another prefill server (the decode slot kept); a hand-over
 * not done within pd.transfer_timeout_ms is cut, a failure counted for
 * both, and the exchange's attempt fails as a timeout (retried elsewhere,
 * or a 504); a decode server that dies mid-stream is continued as any
 * stream is (try_continue.c), the continuation paired again.
 * Not here: which servers a half may go to (policy.c's roles), their
 * policies (dispatch.c, pd.*). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "fleet/health.h"
#include "infergate/oaerror.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "path/exchange.h"
#include "path/strategy.h"

#define PD_MAX_FAILED 4 /* prefill halves that may fail one request before it is answered 502 */

/* ---- the halves' bodies ---- */

/* The host of a URL "scheme://host[:port][/prefix]" (brackets of an IPv6
 * address kept off, as the router's get_hostname does). */
static void url_host(const char *url, char *out, size_t n)
{
	const char *p = strstr(url, "://");
	p = p ? p + 3 : url;
	size_t len;
	if (*p == '[') {
		p++;
		len = strcspn(p, "]");
	} else {
		len = strcspn(p, ":/");
	}
	snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p);
}

/* How many requests the body is, as SGLang's router counts them
 * (bootstrap_injector.rs extract_batch_size): n > 1, else a list of
 * prompts (completions), of texts or of input_ids (/generate); 0: one. */
static size_t batch_size(json_t *root)
{
	json_t *n = json_object_get(root, "n");
	if (json_is_integer(n) && json_integer_value(n) > 1)
		return (size_t)json_integer_value(n);
	static const char *const lists[] = {"prompt", "text", "input_ids"};
	for (size_t i = 0; i < 3; i++) {
		json_t *v = json_object_get(root, lists[i]);
		if (json_is_array(v))
			return json_array_size(v) ? json_array_size(v) : 1;
	}
	return 0;
}

static json_int_t new_room(void)
{
	uint64_t r = 0;
	ig_random_bytes(&r, sizeof(r));
	return (json_int_t)(r & (uint64_t)INT64_MAX);
}

/* SGLang: the bootstrap fields of prefill server pb set in root. */
static void set_bootstrap(json_t *root, const struct ig_backend *pb)
{
	char host[256];
	url_host(pb->url, host, sizeof(host));
	size_t n = batch_size(root);
	if (!n) {
		json_object_set_new(root, "bootstrap_host", json_string(host));
		json_object_set_new(root, "bootstrap_port", json_integer(pb->bootstrap_port));
		json_object_set_new(root, "bootstrap_room", json_integer(new_room()));
		return;
	}
	json_t *hosts = json_array(), *ports = json_array(), *rooms = json_array();
	for (size_t i = 0; i < n; i++) {
		json_array_append_new(hosts, json_string(host));
		json_array_append_new(ports, json_integer(pb->bootstrap_port));
		json_array_append_new(rooms, json_integer(new_room()));
	}
	json_object_set_new(root, "bootstrap_host", hosts);
	json_object_set_new(root, "bootstrap_port", ports);
	json_object_set_new(root, "bootstrap_room", rooms);
}

/* vLLM: the prefill's request (the toy proxy's send_request_to_service). */
static void set_prefill_only(json_t *root)
{
	json_t *p = json_pack("{s:b, s:b, s:n, s:n, s:n, s:n}", "do_remote_decode", 1, "do_remote_prefill", 0,
			      "remote_engine_id", "remote_block_ids", "remote_host", "remote_port");
	json_object_set_new(root, "kv_transfer_params", p);
	json_object_set_new(root, "stream", json_false());
	json_object_set_new(root, "max_tokens", json_integer(1));
	if (json_object_get(root, "max_completion_tokens"))
		json_object_set_new(root, "max_completion_tokens", json_integer(1));
	json_object_del(root, "stream_options");
	json_object_del(root, "min_tokens");
	json_object_del(root, "min_completion_tokens");
}

/* req->body replaced by root's text. Returns 0 or -1. */
static int body_from(struct ig_req *req, json_t *root)
{
	char *text = json_dumps(root, JSON_COMPACT);
	if (!text)
		return -1;
	ig_buf_free(&req->body);
	ig_buf_init(&req->body);
	int rc = ig_buf_append(&req->body, text, strlen(text));
	free(text);
	return rc;
}

/* The leg's body from its exchange's, for the prefill server it got; for
 * SGLang the exchange's own gets the same bootstrap fields. A body that is
 * not a JSON object goes as it is (the server answers what it makes of it). */
static void leg_body(struct ig_req *leg)
{
	struct ig_req *p = leg->pd_of;
	if (!p)
		return;
	json_t *root = json_loadb(p->body.data ? p->body.data : "", p->body.len, 0, NULL);
	if (!json_is_object(root)) {
		json_decref(root);
		ig_buf_free(&leg->body);
		ig_buf_init(&leg->body);
		ig_buf_append(&leg->body, p->body.data ? p->body.data : "", p->body.len);
		return;
	}
	if (leg->wait.backend->engine == IG_ENGINE_SGLANG) {
		set_bootstrap(root, leg->wait.backend);
		if (body_from(p, root) < 0 || body_from(leg, root) < 0)
			ig_log_warn("request %s: out of memory for the pair's bodies", p->request_id);
	} else {
		set_prefill_only(root);
		body_from(leg, root);
	}
	json_decref(root);
}

/* ---- the leg ---- */

/* p's prefill half: a detached exchange on p's reactor, not dispatched
 * yet; its pick is among prefill servers that have not failed p. */
static struct ig_req *leg_new(struct ig_req *p, bool streamed)
{
	struct ig_req *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	ig_xch_fork(h, p, "-prefill"); /* try_pd makes the pair again, not try_retry */
	h->adm.stream = h->relay.stream = streamed;
	h->is_pd_leg = true;
	h->wait.pick.role = IG_PICK_PREFILL;
	h->wait.pick.low = p->wait.pick.low;
	memcpy(h->wait.pick.tried, p->pd_failed, sizeof(h->wait.pick.tried));
	h->wait.pick.ntried = p->pd_nfailed;
	if (p->wait.pick.chain && p->wait.pick.nchain &&
	    (h->wait.pick.chain = malloc(p->wait.pick.nchain * sizeof(*h->wait.pick.chain)))) {
		memcpy(h->wait.pick.chain, p->wait.pick.chain, p->wait.pick.nchain * sizeof(*h->wait.pick.chain));
		h->wait.pick.nchain = p->wait.pick.nchain;
	}
	h->pd_of = p;
	p->pd_leg = h;
	return h;
}

/* Its transfer stops now; it is freed later in this turn of its reactor
 * (ig_pd_leg_end, posted): the caller may be walking the reactor's
 * exchanges (the housekeeping scan), the leg among them. */
void ig_pd_drop_leg(struct ig_req *req)
{
	struct ig_req *h = req->pd_leg;
	if (!h)
		return;
	req->pd_leg = NULL;
	h->pd_of = NULL;
	ig_xch_stop_attempt(h);
	ig_xch_hand_over(h, IG_HAND_DETACHED_END);
}

/* The pair's decode slot given up: req answered err (its slot back). */
static void pair_refused(struct ig_req *req, unsigned status, const char *code, const char *msg)
{
	req->pd_waiting = false;
	ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
	ig_xch_set_error(req, status, code, "%s", msg);
}

/* A pair for req's attempt on its decode server: the leg made and placed.
 * Returns as ig_pd_launch does. */
static bool pair_start(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct ig_backend *d = req->wait.backend;
	bool vllm = d->engine == IG_ENGINE_VLLM;
	char msg[512];
	if (req->pd_nfailed >= PD_MAX_FAILED) {
		snprintf(msg, sizeof(msg), "no prefill server completed the request's prefill (%d failed it; the last "
			 "%s)", req->pd_nfailed, req->pd_failed[req->pd_nfailed - 1]->url);
		pair_refused(req, 502, "prefill_failed", msg);
		return true;
	}
	struct ig_req *h = leg_new(req, vllm ? false : req->adm.stream);
	if (!h) {
		pair_refused(req, 500, "internal_error", "out of memory for the request's prefill half");
		return true;
	}
	req->pd_pairs++;
	req->pd_start_ms = ig_now_ms();
	req->pd_waiting = vllm; /* set first: the leg's launch reads the exchange */
	enum ig_dispatch_result r = ig_dispatch_retry(gw, &h->wait, false, "prefill");
	if (r != IG_DISPATCH_STARTED || h->hedge_refused || !h->xfer.running) {
		ig_pd_drop_leg(req);
		req->pd_waiting = false;
		if (vllm) { /* a vLLM decode server (kv_both) prefills it itself */
			gw->stats.pd[3]++;
			ig_log_debug("request %s: no prefill server free for %s: decoded alone", req->request_id, d->url);
			return false;
		}
		if (req->pd_nfailed) {
			snprintf(msg, sizeof(msg), "every prefill server of the model '%s' failed the request's prefill (%d "
				 "failures, the last on %s)", req->adm.model ? req->adm.model : "", req->pd_nfailed,
				 req->pd_failed[req->pd_nfailed - 1]->url);
			pair_refused(req, 502, "prefill_failed", msg);
			return true;
		}
		snprintf(msg, sizeof(msg), "no prefill server is up for the model '%s' (its decode server %s cannot "
			 "prefill alone)", req->adm.model ? req->adm.model : "", d->url);
		pair_refused(req, 503, "no_healthy_backend", msg);
		return true;
	}
	gw->stats.pd[0]++;
	atomic_fetch_add(&d->pd_pairs, 1);
	atomic_fetch_add(&h->wait.backend->pd_pairs, 1);
	req->pd_prefill = h->wait.backend;
	ig_log_debug("request %s: paired: prefill %s, decode %s (%s)", req->request_id, h->wait.backend->url, d->url,
		     vllm ? "vllm" : "sglang");
	return vllm;
}

/* Whether decode server d, which prefills alone (vLLM's kv_both), already
 * holds so much of the prompt that what is left is under
 * pd.min_prompt_tokens (as llm-d's decode sidecar skips the prefill): the
 * cache-aware decode policy's count of the prompt not cached there, made at
 * the pick (lb_cache_aware.c: prefill_charged). */
static bool holds_enough(const struct ig_req *req, const struct ig_backend *d)
{
	const struct ig_pick_req *rq = &req->wait.pick;
	long min = req->gw->cfg->pd_min_prompt_tokens;
	return min > 0 && d->engine == IG_ENGINE_VLLM && rq->nchain > 0 && req->wait.policy &&
	       strcmp(req->wait.policy->name, "cache-aware") == 0 && rq->prefill_charged < min;
}

bool ig_pd_launch(struct ig_req *req)
{
	if (req->is_pd_leg) {
		leg_body(req);
		return false;
	}
	struct ig_backend *d = req->wait.backend;
	if (req->pd_handed) { /* vLLM's decode half: its body has the prefill's params */
		req->pd_handed = false;
		return false;
	}
	ig_pd_drop_leg(req); /* an earlier pair's */
	if (req->wait.pick.role == IG_PICK_ALONE) { /* a short prompt, on a server that prefills alone */
		req->gw->stats.pd[3] += req->wait.m && req->wait.m->pairs;
		return false;
	}
	if (d->role != IG_ROLE_DECODE)
		return false;
	if (holds_enough(req, d)) {
		req->gw->stats.pd[3]++;
		return false;
	}
	return pair_start(req);
}

/* The exchange's decode attempt started anew on its slot (the pair made
 * again), or its error the answer. */
static void relaunch(struct ig_req *p)
{
	ig_upstream_stop(&p->xfer); /* SGLang: the decode waiting for the failed room */
	p->pd_waiting = false;
	ig_attempt_launch(p);
	if (!p->xfer.running && !p->pd_waiting)
		ig_xch_resume(p); /* its error is the answer */
}

/* vLLM: the prefill's kv_transfer_params put in the exchange's body; false
 * when its answer has none (the decode server then prefills itself). */
static bool hand_over(struct ig_req *p, struct ig_req *h)
{
	struct ig_relay *rl = &h->relay;
	json_t *ans = json_loadb(ig_buf_head(&rl->resp), ig_buf_pending(&rl->resp), 0, NULL);
	json_t *params = json_object_get(ans, "kv_transfer_params");
	json_t *root = json_is_object(params) ? json_loadb(p->body.data ? p->body.data : "", p->body.len, 0, NULL) : NULL;
	bool ok = json_is_object(root);
	if (ok) {
		json_object_set(root, "kv_transfer_params", params);
		ok = body_from(p, root) == 0;
	}
	json_decref(root);
	json_decref(ans);
	return ok;
}

void ig_pd_leg_end(struct ig_req *h)
{
	struct ig_gw *gw = h->gw;
	struct ig_req *p = h->pd_of;
	struct ig_backend *pb = h->wait.backend;
	bool ok = !h->err_status && !h->relay.upstream_failed && h->relay.up_status / 100 == 2;
	if (!p) {
		h->hooks->free(h);
		return;
	}
	p->pd_leg = NULL;
	h->pd_of = NULL;
	long st = h->relay.up_status;
	if (!h->err_status && st >= 400 && st < 500 && st != 408 && st != 429) {
		/* the request's own fault (a prompt too long, a bad field), not the
		 * prefill server's: vLLM's decode, not started, is answered it;
		 * SGLang's, sent the same body, answers its own */
		if (p->pd_waiting && p->wait.running) {
			const char *body = ig_buf_head(&h->relay.resp);
			size_t len = ig_buf_pending(&h->relay.resp);
			char *oa = ig_oaerror_normalize((unsigned)st, body, len); /* NULL: in OpenAI's shape already */
			pair_refused(p, (unsigned)st, "invalid_request_error", "the prefill server refused the request");
			if (oa || (oa = strndup(body ? body : "", len)))
				ig_xch_set_answer(p, (unsigned)st, oa);
			ig_xch_resume(p);
		}
		h->hooks->free(h);
		return;
	}
	if (!ok && !p->relay.first_seen && !p->relay.committed && (p->xfer.running || p->pd_waiting)) {
		/* the prefill failed before the hand-over: the pair again, another prefill server */
		gw->stats.pd[1]++;
		ig_log_info("request %s: prefill server %s failed (HTTP %ld%s%s): the pair made again", p->request_id,
			    pb ? pb->url : "?", h->relay.up_status, h->err_status ? ", " : "",
			    h->err_status ? "not answered" : "");
		if (pb && p->pd_nfailed < IG_MAX_TRIES)
			p->pd_failed[p->pd_nfailed++] = pb;
		h->hooks->free(h);
		relaunch(p);
		return;
	}
	if (ok && p->pd_waiting && p->wait.running) { /* vLLM: the decode half now */
		if (!hand_over(p, h)) {
			gw->stats.pd[4]++;
			ig_log_warn("request %s: prefill server %s answered no kv_transfer_params: the decode server "
				    "prefills it itself", p->request_id, pb ? pb->url : "?");
		}
		h->hooks->free(h);
		p->pd_waiting = false;
		p->pd_handed = true;
		ig_attempt_launch(p);
		if (!p->xfer.running)
			ig_xch_resume(p);
		return;
	}
	h->hooks->free(h);
}

/* ---- the strategy ---- */

/* A leg's end is its own business (ig_pd_leg_end, when its answer is
 * decided): no other strategy retries or continues it. */
static enum ig_try_verdict pd_attempt_end(struct ig_req *req, const struct ig_attempt_end *ae IG_UNUSED)
{
	return req->is_pd_leg ? IG_TRY_END : IG_TRY_PASS;
}

/* A pair whose hand-over is not done in pd.transfer_timeout_ms: the decode
 * has sent nothing and the prefill not answered. Both are failures (their
 * health told); the leg goes, and the exchange's attempt fails as a timeout
 * (SGLang: the decode waits for a room that will not come) or, vLLM's
 * decode not started, the pair is made again with another prefill server. */
static void pd_tick(struct ig_req *req, uint64_t now_ms)
{
	struct ig_req *h = req->pd_leg;
	long limit = req->gw->cfg->pd_transfer_timeout_ms;
	if (!h || req->relay.first_seen || req->relay.committed || now_ms - req->pd_start_ms < (uint64_t)limit)
		return;
	struct ig_gw *gw = req->gw;
	struct ig_backend *pb = h->wait.backend;
	char detail[160];
	snprintf(detail, sizeof(detail), "the KV hand-over from prefill server %s did not complete in %ld ms",
		 pb ? pb->url : "?", limit);
	gw->stats.pd[2]++;
	ig_log_warn("request %s: %s (decode server %s)", req->request_id, detail, req->wait.backend->url);
	if (pb) {
		atomic_fetch_add(&pb->failures, 1);
		ig_health_passive_fail(gw, pb, IG_UPERR_TIMEOUT, detail);
		if (req->pd_nfailed < IG_MAX_TRIES)
			req->pd_failed[req->pd_nfailed++] = pb;
	}
	ig_pd_drop_leg(req);
	if (req->pd_waiting) {
		relaunch(req);
		return;
	}
	if (req->xfer.running)
		req->hooks->attempt_cut(req, IG_UPERR_TIMEOUT, detail);
}

const struct ig_strategy ig_try_pd = {"pd", pd_attempt_end, pd_tick};
