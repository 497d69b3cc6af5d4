/* Unit tests for an exchange's upstream attempt (src/gateway/path/attempt.c,
 * included to reach its static functions): the body a backend that
 * schedules by priority is sent, and an adapter's request to SGLang. The rest of an attempt runs against real
 * processes (tests/integration: test_gateway, test_faults). */
#include "../../../../src/gateway/path/attempt.c"

#include <check.h>

#include "../../check_main.h"

/* The body with "priority" first, the rest byte for byte; SGLang runs
 * larger values first, vLLM smaller; a client's own "priority", later in
 * the object, wins. */
START_TEST(priority_goes_in_front_of_the_body)
{
	struct ig_req *req = calloc(1, sizeof(*req));
	ig_buf_init(&req->body);
	ig_buf_printf(&req->body, " {\"model\":\"m\", \"priority\": 3}");
	req->wait.q.klass = IG_CLASS_HIGH;
	char *s = body_with_fields(req, 1, 10);
	ck_assert_str_eq(s, "{\"priority\":10,\"model\":\"m\", \"priority\": 3}");
	free(s);
	req->wait.q.klass = IG_CLASS_LOW;
	s = body_with_fields(req, 2, 10);
	ck_assert_str_eq(s, "{\"priority\":10,\"model\":\"m\", \"priority\": 3}");
	free(s);
	/* one more than a threshold the server told: 11 apart from normal */
	s = body_with_fields(req, 1, 11);
	ck_assert_str_eq(s, "{\"priority\":-11,\"model\":\"m\", \"priority\": 3}");
	free(s);
	req->wait.q.klass = IG_CLASS_NORMAL;
	ig_buf_reset(&req->body);
	ig_buf_printf(&req->body, "{}");
	s = body_with_fields(req, 1, 10);
	ck_assert_str_eq(s, "{\"priority\":0}");
	free(s);
	ig_buf_reset(&req->body);
	ig_buf_printf(&req->body, "[1]");
	ck_assert_ptr_null(body_with_fields(req, 1, 10));
	ig_buf_free(&req->body);
	free(req);
}
END_TEST

/* An adapter's request to SGLang: its name as "lora_path", after the
 * priority when there is one; a client's own "lora_path" comes later and
 * wins; nothing to add: the body as it is. */
START_TEST(an_adapter_goes_to_sglang_as_lora_path)
{
	struct ig_req *req = calloc(1, sizeof(*req));
	ig_buf_init(&req->body);
	ig_buf_printf(&req->body, "{\"model\":\"sql\"}");
	req->wait.model = "sql";
	ck_assert_ptr_null(body_with_fields(req, 0, 10));
	req->wait.lora_path = true;
	char *s = body_with_fields(req, 0, 10);
	ck_assert_str_eq(s, "{\"lora_path\":\"sql\",\"model\":\"sql\"}");
	free(s);
	req->wait.q.klass = IG_CLASS_HIGH;
	s = body_with_fields(req, 1, 10);
	ck_assert_str_eq(s, "{\"priority\":10,\"lora_path\":\"sql\",\"model\":\"sql\"}");
	free(s);
	req->wait.model = "a\"b";
	ig_buf_reset(&req->body);
	ig_buf_printf(&req->body, "{}");
	s = body_with_fields(req, 0, 10);
	ck_assert_str_eq(s, "{\"lora_path\":\"a\\\"b\"}");
	free(s);
	ig_buf_free(&req->body);
	free(req);
}
END_TEST

IG_CHECK_MAIN("attempt", priority_goes_in_front_of_the_body, an_adapter_goes_to_sglang_as_lora_path)
