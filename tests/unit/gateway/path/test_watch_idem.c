/* Unit tests for Idempotency-Key as an observer of an exchange
 * (src/gateway/path/watch_idem.c, included to reach its static ops): the
 * first POST with a key runs; a second with the same key and body waits
 * for the first one's answer and gets it (Idempotent-Replayed), whole or
 * as it streams; a later one gets it replayed at once; another body under
 * the key is a 422, a malformed key a 400; an answer that failed is not
 * kept, so a retry runs again; a runner whose client left is detached and
 * its answer still reaches the entry. Fake exchanges on a fake reactor,
 * the client connections fake (fake_mhd.h); the table is idem.c's own. */
#include "../../../../src/gateway/path/watch_idem.c"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../check_main.h"
#include "fake_mhd.h"

static int admitted;

static enum MHD_Result fake_admit(struct ig_req *req IG_UNUSED)
{
	admitted++;
	return MHD_YES;
}

static const struct ig_xch_hooks hooks = {.admit = fake_admit};

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx;
	struct ig_req r[4];
	struct fake_conn c[4];
};

static struct fake *fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	f->cfg.idem_ttl_s = 60;
	ig_routes_default(&f->cfg.routes);
	f->gw.cfg = &f->cfg;
	ig_idem_init(&f->gw.idem, 1u << 20, 60000);
	f->gw.idem.wake = ig_proxy_idem_wake; /* as boot.c sets it */
	f->rx.gw = &f->gw;
	f->rx.ev_wake.fd = -1;
	ig_list_init(&f->rx.posted);
	ig_list_init(&f->rx.reqs);
	ig_list_init(&f->rx.unpause);
	ig_rx_self = &f->rx;
	admitted = 0;
	return f;
}

/* Request i: a POST to the first route with `body`, its key `key`. */
static struct ig_req *post(struct fake *f, int i, const char *key, const char *body)
{
	struct ig_req *r = &f->r[i];
	memset(r, 0, sizeof(*r));
	memset(&f->c[i], 0, sizeof(f->c[i]));
	ig_xch_init(r, &f->gw, 0, IG_RT_POST, &hooks);
	snprintf(r->request_id, sizeof(r->request_id), "r%d", i);
	f->c[i].idem_key = key;
	r->conn = FAKE_CONN(&f->c[i]);
	ig_buf_append(&r->body, body, strlen(body));
	return r;
}

/* What the observer says when the exchange is classified (under the lock,
 * as proxy.c calls it). */
static int admit(struct ig_req *r)
{
	ig_gw_lock(r->gw);
	int v = ig_watch_idem.on_admit(r);
	ig_gw_unlock(r->gw);
	return v;
}

static bool answer(struct ig_req *r)
{
	enum MHD_Result ret = MHD_NO;
	ig_gw_lock(r->gw);
	bool took = ig_watch_idem.answer(r, &ret);
	ig_gw_unlock(r->gw);
	ck_assert(!took || ret == MHD_YES);
	return took;
}

static void decided(struct ig_req *r)
{
	ig_gw_lock(r->gw);
	ig_watch_idem.on_decided(r);
	ig_gw_unlock(r->gw);
}

/* The backend answered r whole: status, Content-Type, body. */
static void upstream_answer(struct ig_req *r, long status, const char *ctype, const char *body)
{
	r->relay.up_status = status;
	ig_buf_append(&r->relay.up_headers, "Content-Type", 13);
	ig_buf_append(&r->relay.up_headers, ctype, strlen(ctype) + 1);
	ig_buf_append(&r->relay.resp, body, strlen(body));
	r->relay.upstream_done = true;
}

static void done(struct ig_req *r)
{
	ig_gw_lock(r->gw);
	ig_watch_idem.on_done(r);
	ig_gw_unlock(r->gw);
	ig_list_del(&r->link);
	ig_list_del(&r->post_link);
	ig_relay_free(&r->relay);
	ig_buf_free(&r->body);
	free(r->err_body);
	r->gw->nreqs--;
}

static void fake_free(struct fake *f)
{
	ig_idem_free(&f->gw.idem);
	ig_stats_free(&f->gw); /* the answers counted */
	ig_routes_clear(&f->cfg.routes);
	ig_rx_self = NULL;
	free(f);
}

/* The first runs; the second with its key and body waits, suspended, and
 * is woken by the first one's answer, which it gets (its status, type and
 * bytes, Idempotent-Replayed); a third, later, has it replayed at once. */
START_TEST(a_second_request_waits_for_the_first_ones_answer)
{
	struct fake *f = fake_new();
	const char *body = "{\"model\":\"m\",\"prompt\":\"hi\"}";
	struct ig_req *r0 = post(f, 0, "k-1", body), *r1 = post(f, 1, "k-1", body);
	ck_assert_int_eq(admit(r0), 0); /* it runs */
	ck_assert(r0->idem_runner);
	ck_assert_ptr_null(r0->answerer);
	ck_assert_uint_eq(f->gw.stats.idem[0], 1);
	ck_assert_int_eq(admit(r1), 1); /* it follows the first */
	ck_assert(r1->idem_reader);
	ck_assert_ptr_eq(r1->idem, r0->idem);
	ck_assert_ptr_eq(r1->answerer, &ig_watch_idem);
	ck_assert_uint_eq(f->gw.stats.idem[1], 1);
	ck_assert(answer(r1)); /* nothing yet: it waits */
	ck_assert_int_eq(f->c[1].queued, 0);
	ck_assert_int_eq(f->c[1].suspends, 1);
	ck_assert(r1->suspended);

	upstream_answer(r0, 200, "application/json", "{\"id\":\"cmpl-1\"}");
	decided(r0);
	ck_assert(r0->idem->done);
	ck_assert_int_eq(f->c[1].resumes, 1); /* woken */
	ck_assert(!r1->suspended);
	ck_assert(answer(r1));
	ck_assert_int_eq(f->c[1].queued, 1);
	ck_assert_uint_eq(f->c[1].status, 200);
	ck_assert(fake_has_header(&f->c[1], "Content-Type: application/json"));
	ck_assert(fake_has_header(&f->c[1], "Idempotent-Replayed: true"));
	ck_assert(fake_has_header(&f->c[1], "X-Request-Id: r1"));
	ck_assert_uint_eq(r1->idem->bytes.len, strlen("{\"id\":\"cmpl-1\"}"));
	ck_assert_int_eq(memcmp(r1->idem->bytes.data, "{\"id\":\"cmpl-1\"}", r1->idem->bytes.len), 0);
	ck_assert_uint_eq(r1->relay.bytes_out, strlen("{\"id\":\"cmpl-1\"}"));
	ck_assert(r1->counted);

	struct ig_req *r2 = post(f, 2, "k-1", body);
	ck_assert_int_eq(admit(r2), 1);
	ck_assert_uint_eq(f->gw.stats.idem[2], 1); /* replayed */
	ck_assert(answer(r2));
	ck_assert_int_eq(f->c[2].suspends, 0); /* no wait */
	ck_assert_uint_eq(f->c[2].status, 200);
	ck_assert(fake_has_header(&f->c[2], "Idempotent-Replayed: true"));
	done(r0);
	done(r1);
	done(r2);
	fake_free(f);
}
END_TEST

/* A stream: the follower's answer starts once the runner's status is
 * known and reads the runner's bytes as they are teed, waiting (suspended)
 * in between, to the end of the stream. */
START_TEST(a_follower_reads_a_stream_as_it_runs)
{
	struct fake *f = fake_new();
	const char *body = "{\"model\":\"m\",\"stream\":true}";
	struct ig_req *r0 = post(f, 0, "s-1", body), *r1 = post(f, 1, "s-1", body);
	ck_assert_int_eq(admit(r0), 0);
	ck_assert_int_eq(admit(r1), 1);
	r0->relay.stream = true;
	r0->relay.up_status = 200;
	ig_buf_append(&r0->relay.up_headers, "Content-Type\0text/event-stream", 31);
	r0->relay.committed = true;
	ig_watch_idem_committed(r0);
	ck_assert(answer(r1));
	ck_assert_uint_eq(f->c[1].status, 200);
	ck_assert(fake_has_header(&f->c[1], "Content-Type: text/event-stream"));
	ck_assert(fake_has_header(&f->c[1], "Cache-Control: no-cache"));

	char buf[64];
	ck_assert_int_eq(idem_read(r1, 0, buf, sizeof(buf)), 0); /* nothing yet: it waits */
	ck_assert(r1->suspended);
	ig_watch_idem_tee(r0, "data: a\n\n", 9);
	ck_assert(!r1->suspended); /* woken by the bytes */
	ck_assert_int_eq(idem_read(r1, 0, buf, sizeof(buf)), 9);
	ck_assert_int_eq(memcmp(buf, "data: a\n\n", 9), 0);
	ig_watch_idem_tee(r0, "data: [DONE]\n\n", 14);
	ck_assert_int_eq(idem_read(r1, 0, buf, 5), 5); /* as much as MHD takes */
	ck_assert_int_eq(idem_read(r1, 0, buf + 5, sizeof(buf) - 5), 9);
	ck_assert_int_eq(memcmp(buf, "data: [DONE]\n\n", 14), 0);
	ck_assert_int_eq(idem_read(r1, 0, buf, sizeof(buf)), 0); /* the runner is not done */
	r0->relay.upstream_done = true;
	decided(r0);
	ck_assert(r0->idem->done);
	ck_assert(!r0->idem->failed);
	ck_assert_int_eq(idem_read(r1, 0, buf, sizeof(buf)), MHD_CONTENT_READER_END_OF_STREAM);
	ck_assert_uint_eq(r1->relay.bytes_out, 23);
	done(r0);
	done(r1);
	fake_free(f);
}
END_TEST

/* Another body under the same key: 422 idempotency_key_conflict; a
 * malformed key: 400; another API key's same value, another route's or no
 * header: each runs on its own. */
START_TEST(conflicts_and_malformed_keys_are_refused)
{
	struct fake *f = fake_new();
	struct ig_req *r0 = post(f, 0, "c-1", "{\"a\":1}");
	ck_assert_int_eq(admit(r0), 0);
	struct ig_req *r1 = post(f, 1, "c-1", "{\"a\":2}");
	ck_assert_int_eq(admit(r1), -1);
	ck_assert_uint_eq(r1->err_status, 422);
	json_t *j = json_loads(r1->err_body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "code")), "idempotency_key_conflict");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "invalid_request_error");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "param")), "Idempotency-Key");
	json_decref(j);
	ck_assert_uint_eq(f->gw.stats.idem[3], 1);
	ck_assert_ptr_null(r1->idem);
	done(r1);

	r1 = post(f, 1, "bad\x01key", "{\"a\":1}");
	ck_assert_int_eq(admit(r1), -1);
	ck_assert_uint_eq(r1->err_status, 400);
	ck_assert_ptr_nonnull(strstr(r1->err_body, "\"invalid_idempotency_key\""));
	done(r1);

	struct ig_key other = {.digest = "another key's digest"};
	r1 = post(f, 1, "c-1", "{\"a\":1}");
	r1->adm.key = &other; /* its own scope */
	ck_assert_int_eq(admit(r1), 0);
	ck_assert(r1->idem_runner);
	ck_assert_ptr_ne(r1->idem, r0->idem);
	r1->adm.key = NULL;
	done(r1);

	r1 = post(f, 1, NULL, "{\"a\":1}"); /* no header */
	ck_assert_int_eq(admit(r1), 0);
	ck_assert_ptr_null(r1->idem);
	done(r1);
	f->cfg.idem_ttl_s = 0; /* the header is not read */
	r1 = post(f, 1, "c-1", "{\"a\":2}");
	ck_assert_int_eq(admit(r1), 0);
	ck_assert_ptr_null(r1->idem);
	done(r1);
	done(r0);
	fake_free(f);
}
END_TEST

/* A 5xx is the follower's answer (in OpenAI's shape) but not kept: the
 * client's retry runs again. A runner that ends before its answer fails
 * its followers with 502 idempotent_request_failed, and is not kept
 * either. */
START_TEST(a_failed_answer_is_not_kept)
{
	struct fake *f = fake_new();
	const char *body = "{\"p\":1}";
	struct ig_req *r0 = post(f, 0, "f-1", body), *r1 = post(f, 1, "f-1", body);
	ck_assert_int_eq(admit(r0), 0);
	ck_assert_int_eq(admit(r1), 1);
	upstream_answer(r0, 503, "text/plain", "overloaded");
	decided(r0);
	ck_assert(answer(r1));
	ck_assert_uint_eq(f->c[1].status, 503);
	ck_assert(fake_has_header(&f->c[1], "Content-Type: application/json"));
	ck_assert_ptr_nonnull(strstr(r1->idem->bytes.data, "\"error\""));
	ck_assert(r1->idem->failed);
	done(r0);
	done(r1);
	struct ig_req *r2 = post(f, 2, "f-1", body);
	ck_assert_int_eq(admit(r2), 0); /* it runs again */
	ck_assert(r2->idem_runner);

	struct ig_req *r3 = post(f, 3, "f-1", body);
	ck_assert_int_eq(admit(r3), 1);
	ck_assert(answer(r3)); /* waits */
	ck_assert_int_eq(f->c[3].suspends, 1);
	done(r2); /* the runner ends with no answer */
	ck_assert_int_eq(f->c[3].resumes, 1);
	ck_assert(answer(r3));
	ck_assert_uint_eq(f->c[3].status, 502);
	ck_assert_ptr_nonnull(strstr(r3->idem->bytes.data, "\"idempotent_request_failed\""));
	done(r3);
	struct ig_req *r0b = post(f, 0, "f-1", body);
	ck_assert_int_eq(admit(r0b), 0); /* and runs again */
	done(r0b);
	fake_free(f);
}
END_TEST

/* Its client left while it ran: the runner goes on with no connection
 * (nothing suspended or resumed on it again), a paused transfer let go on,
 * and its answer kept for the client's retry, which has it replayed; once
 * its answer is decided, its own reactor ends it. */
START_TEST(a_runner_whose_client_left_is_detached_and_its_answer_kept)
{
	struct fake *f = fake_new();
	const char *body = "{\"p\":2}";
	struct ig_req *r0 = post(f, 0, "d-1", body);
	ck_assert_int_eq(admit(r0), 0);
	r0->suspended = true; /* waiting for its backend */
	r0->xfer.running = true;
	r0->xfer.rx = &f->rx;
	r0->relay.paused = true;
	ck_assert(ig_watch_idem_runs_on(r0));
	ig_watch_idem_detach(r0);
	ck_assert_ptr_null(r0->conn);
	ck_assert(r0->detached);
	ck_assert(!r0->suspended);
	ck_assert(r0->relay.detached);
	ck_assert(!r0->relay.paused);
	ck_assert(ig_list_linked(&r0->xfer.unpause_link)); /* goes on */
	ig_list_del(&r0->xfer.unpause_link);
	r0->xfer.running = false;
	ig_xch_suspend(r0); /* no connection to touch */
	ck_assert_int_eq(f->c[0].suspends, 0);

	upstream_answer(r0, 200, "application/json", "{\"id\":\"kept\"}");
	decided(r0);
	ck_assert(!ig_watch_idem_runs_on(r0));
	ig_xch_resume(r0);
	ck_assert(r0->post_ops & IG_HAND_DETACHED_END); /* ended on its reactor */
	ck_assert_int_eq(f->c[0].resumes, 0);

	struct ig_req *r1 = post(f, 1, "d-1", body); /* the client's retry */
	ck_assert_int_eq(admit(r1), 1);
	ck_assert(answer(r1));
	ck_assert_uint_eq(f->c[1].status, 200);
	ck_assert(fake_has_header(&f->c[1], "Idempotent-Replayed: true"));
	done(r0);
	done(r1);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("watch_idem", a_second_request_waits_for_the_first_ones_answer, a_follower_reads_a_stream_as_it_runs,
	      conflicts_and_malformed_keys_are_refused, a_failed_answer_is_not_kept,
	      a_runner_whose_client_left_is_detached_and_its_answer_kept)
