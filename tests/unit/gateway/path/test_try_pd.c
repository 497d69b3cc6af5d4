/* Unit tests for prefill/decode pairs (src/gateway/path/try_pd.c, included
 * to reach its static parts): the bodies of each engine's halves (SGLang's
 * bootstrap fields, one room per request of a batch; vLLM's prefill-only
 * request and the kv_transfer_params handed to the decode), a leg's end
 * left to the pair, and the hand-over's deadline. Fake exchanges: no
 * socket, no curl. */
#include "../../../../src/gateway/path/try_pd.c"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../check_main.h"

START_TEST(the_bootstrap_host_is_the_prefill_urls_host)
{
	char h[64];
	url_host("http://10.0.0.7:30000", h, sizeof(h));
	ck_assert_str_eq(h, "10.0.0.7");
	url_host("https://prefill-3.svc/v1prefix", h, sizeof(h));
	ck_assert_str_eq(h, "prefill-3.svc");
	url_host("http://[fd00::1]:8000", h, sizeof(h));
	ck_assert_str_eq(h, "fd00::1");
	url_host("http://a-very-long-host-name-that-does-not-fit:1", h, 8);
	ck_assert_str_eq(h, "a-very-");
}
END_TEST

/* As SGLang's router counts a batch: n > 1, then a list of prompts, texts
 * or input_ids; one request otherwise. */
START_TEST(a_batch_is_counted_as_the_router_counts_it)
{
	static const struct {
		const char *body;
		size_t n;
	} cases[] = {
		{"{\"messages\": [], \"n\": 3}", 3},   {"{\"messages\": [], \"n\": 1}", 0},
		{"{\"prompt\": [\"a\", \"b\"]}", 2},    {"{\"prompt\": \"a\"}", 0},
		{"{\"text\": [\"a\", \"b\", \"c\"]}", 3}, {"{\"input_ids\": [[1], [2]]}", 2},
		{"{\"n\": \"4\"}", 0},                  {"{\"prompt\": []}", 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *root = json_loads(cases[i].body, 0, NULL);
		ck_assert_msg(batch_size(root) == cases[i].n, "%s", cases[i].body);
		json_decref(root);
	}
}
END_TEST

START_TEST(sglang_halves_get_the_prefill_servers_bootstrap_and_a_room_each)
{
	struct ig_backend pb = {.url = "http://127.0.0.1:30001", .bootstrap_port = 8998};
	json_t *one = json_loads("{\"model\": \"m\", \"messages\": []}", 0, NULL);
	set_bootstrap(one, &pb);
	ck_assert_str_eq(json_string_value(json_object_get(one, "bootstrap_host")), "127.0.0.1");
	ck_assert_int_eq(json_integer_value(json_object_get(one, "bootstrap_port")), 8998);
	ck_assert(json_is_integer(json_object_get(one, "bootstrap_room")));
	ck_assert(json_integer_value(json_object_get(one, "bootstrap_room")) >= 0);
	json_decref(one);
	json_t *batch = json_loads("{\"prompt\": [\"a\", \"b\", \"c\"]}", 0, NULL);
	set_bootstrap(batch, &pb);
	json_t *rooms = json_object_get(batch, "bootstrap_room");
	ck_assert_int_eq(json_array_size(rooms), 3);
	ck_assert_int_eq(json_array_size(json_object_get(batch, "bootstrap_host")), 3);
	ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(batch, "bootstrap_port"), 2)), 8998);
	ck_assert(json_integer_value(json_array_get(rooms, 0)) != json_integer_value(json_array_get(rooms, 1)));
	json_decref(batch);
}
END_TEST

/* The toy proxy's prefill request: kv_transfer_params asking for a remote
 * decode, one token, not streamed, no stream_options nor minimum. */
START_TEST(a_vllm_prefill_asks_one_token_for_a_remote_decode)
{
	json_t *root = json_loads("{\"model\": \"m\", \"stream\": true, \"stream_options\": {\"include_usage\": true}, "
				  "\"max_tokens\": 300, \"max_completion_tokens\": 300, \"min_tokens\": 5}", 0, NULL);
	set_prefill_only(root);
	json_t *p = json_object_get(root, "kv_transfer_params");
	ck_assert(json_is_true(json_object_get(p, "do_remote_decode")));
	ck_assert(json_is_false(json_object_get(p, "do_remote_prefill")));
	ck_assert(json_is_null(json_object_get(p, "remote_block_ids")));
	ck_assert(json_is_false(json_object_get(root, "stream")));
	ck_assert_int_eq(json_integer_value(json_object_get(root, "max_tokens")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(root, "max_completion_tokens")), 1);
	ck_assert_ptr_null(json_object_get(root, "stream_options"));
	ck_assert_ptr_null(json_object_get(root, "min_tokens"));
	json_decref(root);
	/* no max_completion_tokens: none added */
	root = json_loads("{\"model\": \"m\"}", 0, NULL);
	set_prefill_only(root);
	ck_assert_ptr_null(json_object_get(root, "max_completion_tokens"));
	json_decref(root);
}
END_TEST

static void answer_is(struct ig_req *h, const char *text)
{
	ig_buf_init(&h->relay.resp);
	ig_buf_append(&h->relay.resp, text, strlen(text));
}

/* The prefill's kv_transfer_params go into the decode's body as they came;
 * an answer without them (or not JSON) leaves the body as it was. */
START_TEST(the_prefills_kv_transfer_params_go_to_the_decode)
{
	struct ig_req p = {0}, h = {0};
	const char *client = "{\"model\":\"m\",\"stream\":true}";
	ig_buf_append(&p.body, client, strlen(client));
	answer_is(&h, "{\"choices\": [], \"kv_transfer_params\": {\"do_remote_prefill\": true, "
		      "\"remote_block_ids\": [1, 2], \"remote_engine_id\": \"e\", \"remote_port\": 5600}}");
	ck_assert(hand_over(&p, &h));
	json_t *got = json_loadb(p.body.data, p.body.len, 0, NULL);
	ck_assert(json_is_true(json_object_get(got, "stream")));
	json_t *params = json_object_get(got, "kv_transfer_params");
	ck_assert_int_eq(json_array_size(json_object_get(params, "remote_block_ids")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(params, "remote_port")), 5600);
	json_decref(got);
	ig_buf_free(&h.relay.resp);
	for (int i = 0; i < 2; i++) {
		answer_is(&h, i ? "not json" : "{\"choices\": [], \"kv_transfer_params\": null}");
		ig_buf_free(&p.body);
		ig_buf_init(&p.body);
		ig_buf_append(&p.body, client, strlen(client));
		ck_assert(!hand_over(&p, &h));
		ck_assert_int_eq(p.body.len, strlen(client));
		ck_assert(memcmp(p.body.data, client, p.body.len) == 0);
		ig_buf_free(&h.relay.resp);
	}
	ig_buf_free(&p.body);
}
END_TEST

/* A prefill half's failure is the pair's to handle: no other strategy
 * retries or continues it; an exchange's own is not its case. */
START_TEST(a_legs_end_is_left_to_the_pair)
{
	struct ig_req leg = {.is_pd_leg = true}, p = {0};
	struct ig_attempt_end ae = {IG_UPERR_RESET, "reset", NULL};
	ck_assert_int_eq(pd_attempt_end(&leg, &ae), IG_TRY_END);
	ck_assert_int_eq(pd_attempt_end(&p, &ae), IG_TRY_PASS);
}
END_TEST

/* The deadline is not due before pd.transfer_timeout_ms, nor once the
 * decode sent a byte, nor with no leg. */
START_TEST(the_hand_over_deadline_waits_its_time)
{
	struct ig_conf cfg = {.pd_transfer_timeout_ms = 1000};
	struct ig_gw gw = {.cfg = &cfg};
	struct ig_req p = {.gw = &gw}, leg = {.gw = &gw};
	p.pd_leg = &leg;
	p.pd_start_ms = 5000;
	pd_tick(&p, 5999); /* not due: nothing touched */
	ck_assert_ptr_eq(p.pd_leg, &leg);
	p.relay.first_seen = true;
	pd_tick(&p, 9000); /* the decode answers: the hand-over was done */
	ck_assert_ptr_eq(p.pd_leg, &leg);
	ck_assert_int_eq(gw.stats.pd[2], 0);
}
END_TEST

IG_CHECK_MAIN("try_pd", the_bootstrap_host_is_the_prefill_urls_host, a_batch_is_counted_as_the_router_counts_it,
	      sglang_halves_get_the_prefill_servers_bootstrap_and_a_room_each, a_vllm_prefill_asks_one_token_for_a_remote_decode,
	      the_prefills_kv_transfer_params_go_to_the_decode, a_legs_end_is_left_to_the_pair,
	      the_hand_over_deadline_waits_its_time)
