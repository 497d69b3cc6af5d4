/* Unit tests for the Batch API's HTTP side (src/gateway/api/batches_api.c,
 * included to reach its checks): what a client reads when a create request
 * is wrong, in OpenAI's words, in the order OpenAI checks (a missing
 * parameter, the endpoint, the window, the metadata's limits, a file that
 * is not there or not the owner's, a file of another purpose). The whole
 * calls are run by tests/integration/test_batches.py. */
#include "../../../../src/gateway/api/batches_api.c"

#include <check.h>
#include <stdio.h>
#include <unistd.h>

#include "../../check_main.h"

static char dir[64];
static struct ig_gw gw;

static void setup(void)
{
	memset(&gw, 0, sizeof(gw));
	snprintf(dir, sizeof(dir), "/tmp/ig-test-batches-api-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char *err = NULL;
	ig_log_set_level(IG_LOG_ERROR);
	gw.files = ig_files_open(dir, false, &err);
	ck_assert_msg(gw.files != NULL, "%s", err);
	struct ig_file in = {.id = "file-000000000000000000000001", .owner = "alice", .filename = "in.jsonl",
			     .purpose = "batch", .bytes = 10, .created_at = 1};
	struct ig_file ft = {.id = "file-000000000000000000000002", .owner = "alice", .filename = "tune.jsonl",
			     .purpose = "fine-tune", .bytes = 10, .created_at = 1};
	ck_assert_int_eq(ig_files_add(gw.files, &in), 0);
	ck_assert_int_eq(ig_files_add(gw.files, &ft), 0);
}

static void teardown(void)
{
	ig_files_free(gw.files);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

struct verdict {
	unsigned status;
	const char *param, *code;
	char msg[400];
};

static struct verdict verdict_of(const char *owner, const char *body)
{
	struct batch_call bc;
	memset(&bc, 0, sizeof(bc));
	bc.c.gw = &gw;
	snprintf(bc.c.owner, sizeof(bc.c.owner), "%s", owner);
	json_t *req = json_loads(body, 0, NULL);
	ck_assert_ptr_nonnull(req);
	struct verdict v = {0, NULL, NULL, ""};
	const struct ig_file *f;
	int ep;
	v.status = check_create(&bc, req, &f, &ep, &v.param, &v.code, v.msg, sizeof(v.msg));
	json_decref(req);
	return v;
}

#define GOOD_FILE "file-000000000000000000000001"

START_TEST(a_wrong_create_is_told_in_openais_words)
{
	setup();
	struct verdict v = verdict_of("alice", "{\"input_file_id\": \"" GOOD_FILE "\", \"endpoint\": \"/v1/chat/completions\","
					   " \"completion_window\": \"24h\", \"metadata\": {\"team\": \"search\"}}");
	ck_assert_uint_eq(v.status, 0);

	v = verdict_of("alice", "{\"endpoint\": \"/v1/chat/completions\", \"completion_window\": \"24h\"}");
	ck_assert_uint_eq(v.status, 400);
	ck_assert_str_eq(v.param, "input_file_id");
	ck_assert_str_eq(v.code, "missing_required_parameter");
	ck_assert_str_eq(v.msg, "Missing required parameter: 'input_file_id'.");

	v = verdict_of("alice", "{\"input_file_id\": \"" GOOD_FILE "\", \"endpoint\": \"/v1/chat/completions\"}");
	ck_assert_str_eq(v.msg, "Missing required parameter: 'completion_window'.");

	v = verdict_of("alice", "{\"input_file_id\": \"" GOOD_FILE "\", \"endpoint\": \"/v1/responses\","
			    " \"completion_window\": \"24h\"}");
	ck_assert_uint_eq(v.status, 400);
	ck_assert_str_eq(v.param, "endpoint");
	ck_assert_str_eq(v.code, "invalid_value");
	ck_assert_ptr_nonnull(strstr(v.msg, "Invalid value for 'endpoint': '/v1/responses'"));

	v = verdict_of("alice", "{\"input_file_id\": \"" GOOD_FILE "\", \"endpoint\": \"/v1/embeddings\","
			    " \"completion_window\": \"48h\"}");
	ck_assert_str_eq(v.param, "completion_window");
	ck_assert_str_eq(v.msg, "Invalid value for 'completion_window': '48h' (only '24h').");

	/* the file: not there, another owner's (the same to the client), another purpose */
	v = verdict_of("alice", "{\"input_file_id\": \"file-000000000000000000000009\", \"endpoint\": \"/v1/embeddings\","
			    " \"completion_window\": \"24h\"}");
	ck_assert_uint_eq(v.status, 404);
	ck_assert_str_eq(v.param, "input_file_id");
	ck_assert_ptr_null(v.code);
	ck_assert_str_eq(v.msg, "No such File object: file-000000000000000000000009");
	v = verdict_of("bob", "{\"input_file_id\": \"" GOOD_FILE "\", \"endpoint\": \"/v1/embeddings\","
			  " \"completion_window\": \"24h\"}");
	ck_assert_uint_eq(v.status, 404);
	v = verdict_of("alice", "{\"input_file_id\": \"file-000000000000000000000002\", \"endpoint\": \"/v1/embeddings\","
			    " \"completion_window\": \"24h\"}");
	ck_assert_uint_eq(v.status, 400);
	ck_assert_str_eq(v.msg, "The file file-000000000000000000000002 has purpose 'fine-tune'; a batch's input has "
				"purpose 'batch'.");
	teardown();
}
END_TEST

START_TEST(metadata_within_openais_limits)
{
	ck_assert_ptr_null(bad_metadata(NULL));
	ck_assert_ptr_null(bad_metadata(json_null()));
	json_t *m = json_array();
	ck_assert_str_eq(bad_metadata(m), "Invalid type for 'metadata': expected an object.");
	json_decref(m);

	m = json_object();
	for (int i = 0; i < 16; i++) {
		char k[8];
		snprintf(k, sizeof(k), "k%d", i);
		json_object_set_new(m, k, json_string("v"));
	}
	ck_assert_ptr_null(bad_metadata(m)); /* 16 pairs: fine */
	json_object_set_new(m, "k16", json_string("v"));
	ck_assert_str_eq(bad_metadata(m), "Invalid 'metadata': at most 16 keys.");
	json_decref(m);

	char key[66];
	memset(key, 'k', 65);
	key[65] = '\0';
	m = json_pack("{s:s}", key, "v");
	ck_assert_str_eq(bad_metadata(m), "Invalid 'metadata': keys are at most 64 characters.");
	json_decref(m);
	key[64] = '\0';
	m = json_pack("{s:s}", key, "v");
	ck_assert_ptr_null(bad_metadata(m));
	json_decref(m);

	char val[514];
	memset(val, 'v', 513);
	val[513] = '\0';
	m = json_pack("{s:s}", "k", val);
	ck_assert_str_eq(bad_metadata(m), "Invalid 'metadata': values are strings of at most 512 characters.");
	json_decref(m);
	m = json_pack("{s:i}", "k", 3);
	ck_assert_str_eq(bad_metadata(m), "Invalid 'metadata': values are strings of at most 512 characters.");
	json_decref(m);

	/* through a create, the same words */
	setup();
	struct verdict v = verdict_of("alice", "{\"input_file_id\": \"" GOOD_FILE "\", \"endpoint\": \"/v1/embeddings\","
					   " \"completion_window\": \"24h\", \"metadata\": {\"n\": 1}}");
	ck_assert_uint_eq(v.status, 400);
	ck_assert_str_eq(v.param, "metadata");
	teardown();
}
END_TEST

IG_CHECK_MAIN("batches_api", a_wrong_create_is_told_in_openais_words, metadata_within_openais_limits)
