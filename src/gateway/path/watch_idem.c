/* Idempotency-Key as an observer of an exchange (watch.h): the first POST
 * with a key runs and its answer is kept (idem.c's table, shared with the
 * other gateways through idem_share.c); a duplicate reads that answer,
 * whole or as it streams (Idempotent-Replayed), or is refused (400 a
 * malformed key, 422 another body under the same key). A runner whose
 * client left runs on for its entry (proxy.c detaches it). A primary whose
 * hedge won reads the hedge's answer the same way (try_hedge.c).
 * Not here: the table, its expiry and its bounds (idem.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "path/exchange.h"
#include "path/idem.h"
#include "path/idem_share.h"
#include "path/watch.h"

static ssize_t idem_read(void *cls, uint64_t pos, char *buf, size_t max);
static enum MHD_Result respond_read(struct ig_req *req);

/* Readers waiting for more of e's answer: resumed. Under the lock. */
static void idem_wake(struct ig_idem_entry *e)
{
	struct ig_req *r;
	while ((r = IG_LIST_FIRST(&e->waiting, struct ig_req, idem_link))) {
		ig_list_del(&r->idem_link);
		ig_xch_resume(r);
	}
}

/* The answer's status and Content-Type, once. Under the lock. */
static void idem_status(struct ig_idem_entry *e, unsigned status, const char *ctype)
{
	if (!e || e->status)
		return;
	e->status = status;
	free(e->content_type);
	e->content_type = ctype ? strdup(ctype) : NULL;
	idem_wake(e);
}

/* A runner's stream bytes (the relay's tee, the lock let go). */
void ig_watch_idem_tee(struct ig_req *req, const char *p, size_t n)
{
	ig_gw_lock(req->gw);
	if (req->idem) {
		ig_idem_append(req->idem, p, n);
		idem_wake(req->idem);
	}
	ig_gw_unlock(req->gw);
}

/* A runner's stream commits: its status and type, for the readers (the
 * relay's, the lock let go). */
void ig_watch_idem_committed(struct ig_req *req)
{
	ig_gw_lock(req->gw);
	idem_status(req->idem, (unsigned)req->relay.up_status, ig_relay_header(&req->relay, "Content-Type"));
	ig_gw_unlock(req->gw);
}

/* A runner's answer is decided: its entry told (a whole answer's bytes, or
 * what a stream had not teed), kept or not. A refusal or failure of the
 * gateway's, a 5xx, a stream cut or ended by an error event are not kept:
 * a retry runs again. Under the lock; once. */
static void idem_finish(struct ig_req *req)
{
	struct ig_idem_entry *e = req->idem;
	struct ig_relay *rl = &req->relay;
	bool failed;
	if (!req->idem_runner || req->idem_ended)
		return;
	if (req->err_status && !rl->committed) {
		idem_status(e, req->err_status, "application/json");
		ig_idem_append(e, req->err_body, strlen(req->err_body));
		failed = true;
	} else if (rl->committed && rl->stream) {
		if (!rl->upstream_done)
			return;
		ig_relay_tee_rest(rl);
		failed = rl->upstream_failed || rl->stream_error || rl->client_gone;
	} else if (rl->upstream_done) {
		char *oa = rl->up_status >= 400 ? ig_oaerror_normalize((unsigned)rl->up_status, ig_buf_head(&rl->resp),
									ig_buf_pending(&rl->resp)) : NULL;
		idem_status(e, (unsigned)rl->up_status, oa ? "application/json" : ig_relay_header(rl, "Content-Type"));
		if (oa)
			ig_idem_append(e, oa, strlen(oa));
		else
			ig_idem_append(e, ig_buf_head(&rl->resp), ig_buf_pending(&rl->resp));
		free(oa);
		failed = rl->up_status >= 500;
	} else {
		return;
	}
	req->idem_ended = true;
	ig_idem_end(&req->gw->idem, e, failed, ig_now_ms());
	ig_idem_share_end(req->gw, e);
	idem_wake(e);
}

void ig_proxy_idem_wake(struct ig_idem_entry *e)
{
	idem_wake(e);
}

/* The Idempotency-Key of a POST, if it has one: 0 it runs (the first with
 * its key, or none), 1 it reads another's answer (joined or replayed), -1
 * refused (a malformed key: 400; another body under the same key: 422), 2
 * the other gateways are asked first (idem_share.h; idem_asked decides). */
static int idem_begin(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	if (!gw->cfg->idem_ttl_s || req->adm.method != IG_RT_POST || req->adm.resp_id)
		return 0;
	const char *v = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Idempotency-Key");
	if (!v)
		return 0;
	size_t n = strlen(v);
	bool ok = n > 0 && n <= IG_IDEM_KEY_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = v[i] >= 0x20 && v[i] < 0x7f;
	if (!ok) {
		ig_xch_set_decided_error(req, 400, NULL, "Idempotency-Key", "invalid_idempotency_key",
				  "the Idempotency-Key header must be 1 to 255 printable ASCII characters");
		return -1;
	}
	/* what the value names: the route and the body; the same value sent to
	 * another route is a conflict, never that route's answer */
	unsigned char digest[32];
	const char *route = ig_gw_route(gw->cfg, req->adm.route_idx)->path;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL) || !EVP_DigestUpdate(md, route, strlen(route) + 1) ||
	    !EVP_DigestUpdate(md, req->body.data ? req->body.data : "", req->body.len) ||
	    !EVP_DigestFinal_ex(md, digest, NULL)) {
		EVP_MD_CTX_free(md);
		return 0; /* out of memory: it runs, not kept */
	}
	EVP_MD_CTX_free(md);
	/* keys are scoped to the API key: another's same value is another key */
	char *scope = ig_strdupf("%s\n%s", req->adm.key ? req->adm.key->digest : "", v);
	ig_idem_expire(&gw->idem, ig_now_ms());
	struct ig_idem_entry *e = ig_idem_find(&gw->idem, scope);
	if (!e) {
		e = ig_idem_add(&gw->idem, scope, digest);
		free(scope);
		if (!e)
			return 0; /* out of memory: it runs, not kept */
		req->idem = e;
		req->idem_runner = true;
		if (ig_idem_share_claim(gw, e) == 0) {
			req->idem_asking = true;
			req->answerer = &ig_watch_idem;
			return 2;
		}
		gw->stats.idem[0]++;
		return 0;
	}
	free(scope);
	if (memcmp(e->digest, digest, sizeof(digest)) != 0) {
		gw->stats.idem[3]++;
		ig_xch_set_decided_error(req, 422, "invalid_request_error", "Idempotency-Key", "idempotency_key_conflict",
				  IG_IDEM_CONFLICT_MESSAGE);
		return -1;
	}
	e->refs++;
	req->idem = e;
	req->idem_reader = true;
	req->answerer = &ig_watch_idem;
	gw->stats.idem[e->done ? 2 : 1]++;
	ig_log_debug("request %s: Idempotency-Key '%s' %s", req->request_id, v,
		     e->done ? "was answered: the answer is replayed" : "runs: its answer is followed");
	return 1;
}

/* Whether the other gateways hold its Idempotency-Key (idem_share.h):
 * 0 not, it runs (admit); 1 it reads the answer (run through another
 * gateway and kept, or the conflict's 422); 2 not known yet, or another
 * gateway runs it: it waits (and runs if that run fails). */
static int idem_asked(struct ig_req *req)
{
	struct ig_idem_entry *e = req->idem;
	if ((e->share == IG_IDEM_ASKING || e->share == IG_IDEM_THEIRS) && !e->done) {
		req->idem_followed |= e->share == IG_IDEM_THEIRS;
		if (!ig_list_linked(&req->idem_link))
			ig_list_append(&e->waiting, &req->idem_link);
		ig_xch_suspend(req);
		return 2;
	}
	req->idem_asking = false;
	if (!e->done) {
		req->gw->stats.idem[0]++;
		return 0;
	}
	req->idem_runner = false;
	req->idem_reader = true;
	req->answerer = &ig_watch_idem;
	req->gw->stats.idem[e->conflict ? 3 : req->idem_followed ? 1 : 2]++;
	ig_log_debug("request %s: its Idempotency-Key is held through another gateway%s", req->request_id,
		     e->conflict ? " with another body" : "");
	return 1;
}

static enum MHD_Result respond_read(struct ig_req *req)
{
	struct ig_idem_entry *e = req->idem;
	struct MHD_Response *r;
	size_t len = 0;
	if (!e->status) {
		if (!ig_list_linked(&req->idem_link))
			ig_list_append(&e->waiting, &req->idem_link);
		ig_xch_suspend(req);
		return MHD_YES;
	}
	if (e->done) {
		len = e->bytes.len;
		r = MHD_create_response_from_buffer(len, e->bytes.data, MHD_RESPMEM_MUST_COPY);
		req->idem_off = len;
	} else {
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, idem_read, req, NULL);
	}
	if (e->content_type)
		MHD_add_response_header(r, "Content-Type", e->content_type);
	if (e->content_type && strncasecmp(e->content_type, "text/event-stream", 17) == 0) {
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		MHD_add_response_header(r, "X-Accel-Buffering", "no");
	}
	if (req->hedge_winner == 2)
		MHD_add_response_header(r, "X-Infergate-Hedged", "true");
	else if (!e->conflict)
		MHD_add_response_header(r, "Idempotent-Replayed", "true");
	ig_xch_add_common_headers(req, r);
	enum MHD_Result ret = ig_xch_queue_answer(req, e->status, r, len);
	if (e->done)
		ig_xch_count_answer(req);
	return ret;
}

/* The content reader of a duplicate following a running answer: inside
 * MHD_run, the lock let go (it is taken here, as the entry is shared). */
static ssize_t idem_read(void *cls, uint64_t pos IG_UNUSED, char *buf, size_t max)
{
	struct ig_req *req = cls;
	struct ig_gw *gw = req->gw;
	ssize_t ret = 0;
	if (req->relay.client_gone)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	ig_gw_lock(gw);
	struct ig_idem_entry *e = req->idem;
	size_t n = e->bytes.len - req->idem_off;
	if (n > max)
		n = max;
	if (n > 0) {
		memcpy(buf, e->bytes.data + req->idem_off, n);
		req->idem_off += n;
		req->relay.bytes_out += n;
		ret = (ssize_t)n;
	} else if (e->done) {
		ig_xch_count_answer(req);
		ret = MHD_CONTENT_READER_END_OF_STREAM;
	} else { /* more to come: wait for the runner's tee */
		if (!ig_list_linked(&req->idem_link))
			ig_list_append(&e->waiting, &req->idem_link);
		ig_xch_suspend(req);
	}
	ig_gw_unlock(gw);
	return ret;
}

/* It answers the exchange itself: while the other gateways are asked
 * (then admitted, when none holds the key), and a duplicate (or a primary
 * whose hedge won) with the answer it reads. */
static bool idem_answer(struct ig_req *req, enum MHD_Result *ret)
{
	if (req->idem_asking) {
		int asked = idem_asked(req);
		if (asked == 2) {
			*ret = MHD_YES;
			return true;
		}
		if (asked == 0) {
			*ret = req->hooks->admit(req);
			return true;
		}
	}
	if (req->idem_reader && !req->err_status) {
		*ret = respond_read(req);
		return true;
	}
	return false;
}

/* Its entry let go: a runner that never told its answer fails it (not
 * kept; its readers told), so that the client's retry runs it again. */
static void idem_done(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	if (!req->idem)
		return;
	ig_list_del(&req->idem_link);
	if (req->idem_runner && !req->idem_ended) {
		char *body = ig_oaerror_json("the first request with this Idempotency-Key ended before its "
					     "answer; send it again", "api_error", NULL, "idempotent_request_failed");
		ig_idem_fail(&gw->idem, req->idem, 502, body ? body : "{}", ig_now_ms());
		free(body);
		ig_idem_share_end(gw, req->idem);
	}
	ig_idem_put(&gw->idem, req->idem);
}

const struct ig_watch ig_watch_idem = {
	.name = "idempotency",
	.on_admit = idem_begin,
	.answer = idem_answer,
	.on_decided = idem_finish,
	.on_done = idem_done,
};

/* Its client left while it ran: with an Idempotency-Key it runs on, its
 * answer going to the entry alone, so that the client's retry gets it
 * rather than running it twice. */
void ig_watch_idem_detach(struct ig_req *req)
{
	struct ig_relay *rl = &req->relay;
	req->suspended = false;
	req->conn = NULL;
	req->detached = true;
	ig_relay_detach(rl);
	if (rl->paused && req->xfer.running) {
		rl->paused = false;
		ig_upstream_unpause(&req->xfer);
	}
	ig_log_info("request %s: its client left; it runs on for its Idempotency-Key", req->request_id);
}
