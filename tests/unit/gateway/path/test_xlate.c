/* Unit tests for Anthropic's Messages over a chat backend
 * (src/gateway/path/xlate.c): which requests are translated (the Messages
 * route with anthropic.translate, never count_tokens), the request's body
 * and upstream path rewritten with what the answer needs kept, a refused
 * field's 400, and the whole answer: a chat completion as a Message, an
 * error in Anthropic's shape. The translation itself is the library's
 * (tests/unit/common/test_anthropic.c). */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "net/rx.h"
#include "path/exchange.h"
#include "path/xlate.h"
#include "../../check_main.h"

static const struct ig_xch_hooks hooks = {0};

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx; /* the exchange's reactor: a list of its requests only */
	struct ig_req req;
};

static struct fake *fake_new(const char *path, bool translate, const char *body)
{
	struct fake *f = calloc(1, sizeof(*f));
	const char *id;
	size_t idn;
	ig_routes_default(&f->cfg.routes);
	f->cfg.anthropic_translate = translate;
	f->gw.cfg = &f->cfg;
	f->rx.gw = &f->gw;
	ig_list_init(&f->rx.reqs);
	ig_rx_self = &f->rx;
	int route = ig_routes_match(&f->cfg.routes, path, &id, &idn);
	ck_assert_int_ge(route, 0);
	ig_xch_init(&f->req, &f->gw, route, IG_RT_POST, &hooks);
	f->req.adm.model = strdup("qwen");
	f->req.adm.prompt_estimate = 12;
	ig_buf_append(&f->req.body, body, strlen(body));
	return f;
}

static void fake_free(struct fake *f)
{
	ig_relay_free(&f->req.relay);
	ig_buf_free(&f->req.body);
	free(f->req.err_body);
	free(f->req.adm.model);
	free(f->req.adm.up_path);
	ig_routes_clear(&f->cfg.routes);
	ig_rx_self = NULL;
	free(f);
}

static const char MSG[] = "{\"model\": \"qwen\", \"max_tokens\": 9, \"stop_sequences\": [\"END\"], "
			  "\"system\": \"terse\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";

START_TEST(only_the_messages_route_with_the_setting_is_translated)
{
	struct fake *f = fake_new("/v1/messages", true, MSG);
	ck_assert(ig_xlate_wanted(&f->req));
	fake_free(f);
	f = fake_new("/v1/messages", false, MSG);
	ck_assert(!ig_xlate_wanted(&f->req)); /* off by default: the engines serve it */
	fake_free(f);
	f = fake_new("/v1/messages/count_tokens", true, MSG);
	ck_assert(!ig_xlate_wanted(&f->req)); /* no chat route counts tokens */
	fake_free(f);
	f = fake_new("/v1/chat/completions", true, MSG);
	ck_assert(!ig_xlate_wanted(&f->req));
	fake_free(f);
}
END_TEST

START_TEST(the_request_becomes_a_chat_request)
{
	struct fake *f = fake_new("/v1/messages", true, MSG);
	f->req.relay.stream = true;
	ck_assert_int_eq(ig_xlate_request(&f->req), 0);
	ck_assert_str_eq(ig_xch_req_path(&f->req), "/v1/chat/completions");
	json_t *chat = json_loadb(f->req.body.data, f->req.body.len, 0, NULL);
	ck_assert_ptr_nonnull(chat);
	json_t *msgs = json_object_get(chat, "messages");
	ck_assert_uint_eq(json_array_size(msgs), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 0), "role")), "system");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 0), "content")), "terse");
	ck_assert_int_eq(json_integer_value(json_object_get(chat, "max_tokens")), 9);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(chat, "stop"), 0)), "END");
	json_decref(chat);
	/* what the answer needs */
	const struct ig_relay *r = &f->req.relay;
	ck_assert(r->xlate);
	ck_assert_str_eq(r->xlate_model, "qwen");
	ck_assert_int_eq(r->xlate_input, 12);
	ck_assert_str_eq(json_string_value(json_array_get(r->xlate_stop, 0)), "END");
	fake_free(f);
}
END_TEST

START_TEST(a_field_the_translation_refuses_is_a_400)
{
	struct fake *f = fake_new("/v1/messages", true,
				  "{\"model\": \"qwen\", \"max_tokens\": 9, \"messages\": [{\"role\": \"user\", "
				  "\"content\": [{\"type\": \"document\", \"source\": {}}]}]}");
	ck_assert_int_eq(ig_xlate_request(&f->req), -1);
	ck_assert_uint_eq(f->req.err_status, 400);
	ck_assert_ptr_nonnull(strstr(f->req.err_body, "messages.0.content.0"));
	ck_assert(!f->req.relay.xlate);
	ck_assert_str_eq(ig_xch_req_path(&f->req), "/v1/messages"); /* nothing rewritten */
	fake_free(f);
}
END_TEST

START_TEST(the_answer_is_a_message_or_anthropics_error)
{
	struct fake *f = fake_new("/v1/messages", true, MSG);
	ck_assert_int_eq(ig_xlate_request(&f->req), 0);
	static const char done[] = "{\"id\": \"chatcmpl-7\", \"object\": \"chat.completion\", \"model\": \"qwen\", "
				   "\"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": \"Hello\"}, "
				   "\"finish_reason\": \"stop\", \"stop_reason\": \"END\"}], "
				   "\"usage\": {\"prompt_tokens\": 11, \"completion_tokens\": 2}}";
	char *out = ig_xlate_answer(&f->req.relay, 200, done, strlen(done));
	json_t *m = json_loads(out, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(m, "type")), "message");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(m, "content"), 0), "text")),
			 "Hello");
	ck_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "stop_sequence");
	ck_assert_str_eq(json_string_value(json_object_get(m, "stop_sequence")), "END");
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(m, "usage"), "input_tokens")), 11);
	json_decref(m);
	free(out);
	/* the backend's error, in Anthropic's shape */
	static const char bad[] = "{\"object\": \"error\", \"message\": \"too long\", \"type\": \"BadRequestError\", \"code\": 400}";
	out = ig_xlate_answer(&f->req.relay, 400, bad, strlen(bad));
	m = json_loads(out, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(m, "type")), "error");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "error"), "type")), "invalid_request_error");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "error"), "message")), "too long");
	json_decref(m);
	free(out);
	/* a 2xx that is no chat completion: a 502's api_error */
	out = ig_xlate_answer(&f->req.relay, 200, "<html>", 6);
	m = json_loads(out, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(m, "error"), "type")), "api_error");
	json_decref(m);
	free(out);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("xlate", only_the_messages_route_with_the_setting_is_translated, the_request_becomes_a_chat_request,
	      a_field_the_translation_refuses_is_a_400, the_answer_is_a_message_or_anthropics_error)
