/* Unit tests for what batches_lease.c reads from Redis: infergate:data's
 * messages about batches and files (ids by the same checks as a client's,
 * progress counts in range) and the lease round's reply (fencing tokens,
 * cancels); and ig_batch_load (batch.c), which reads no directory that an
 * id does not name inside data_dir, whoever hands it the id. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "api/batch.h"
#include "infergate/util.h"
#include "net/redismsg.h"
#include "../../check_main.h"

#define BATCH "batch_0123456789abcdef01234567"
#define FILE_ID "file-0123456789abcdef01234567"

static int parse(char kind, const char *rest, struct ig_batch_msg *m, struct ig_redismsg_bad *bad)
{
	bad->kind = NULL;
	return ig_batch_lease_parse(kind, rest, strlen(rest), m, bad);
}

START_TEST(data_messages_name_only_real_ids)
{
	struct ig_batch_msg m;
	struct ig_redismsg_bad bad;
	ck_assert_int_eq(parse('b', BATCH, &m, &bad), 0);
	ck_assert_str_eq(m.id, BATCH);
	ck_assert_int_eq(parse('c', BATCH, &m, &bad), 0);
	ck_assert_int_eq(parse('f', FILE_ID, &m, &bad), 0);
	ck_assert_str_eq(m.id, FILE_ID);
	ck_assert_int_eq(parse('d', FILE_ID, &m, &bad), 0);
	ck_assert_int_eq(parse('p', BATCH " 10 2 5", &m, &bad), 0);
	ck_assert_int_eq(m.completed, 10);
	ck_assert_int_eq(m.failed, 2);
	ck_assert_int_eq(m.inflight, 5);
	ck_assert_int_eq(parse('z', "anything at all", &m, &bad), 0); /* a newer gateway's kind: not read */
	ck_assert_int_eq(m.id[0], '\0');

	const struct {
		char kind;
		const char *rest, *bad_kind, *why;
	} refused[] = {
		{'b', "../../x", IG_BAD_DATA_BATCH, "not a batch id"},
		{'b', "batch_../../../../tmp/x", IG_BAD_DATA_BATCH, "not a batch id"},
		{'b', "batch_0123456789ABCDEF01234567", IG_BAD_DATA_BATCH, "not a batch id"},
		{'b', BATCH "0", IG_BAD_DATA_BATCH, "not a batch id"},
		{'b', BATCH " x", IG_BAD_DATA_BATCH, "is not 'ID'"},
		{'c', "/etc", IG_BAD_DATA_CANCEL, "not a batch id"},
		{'b', FILE_ID, IG_BAD_DATA_BATCH, "not a batch id"},
		{'f', BATCH, IG_BAD_DATA_FILE, "not a file id"},
		{'f', "file-../../../etc/passwd", IG_BAD_DATA_FILE, "not a file id"},
		{'d', "../" FILE_ID, IG_BAD_DATA_FILE, "not a file id"},
		{'p', BATCH, IG_BAD_DATA_PROGRESS, "ID COMPLETED FAILED IN_FLIGHT"},
		{'p', BATCH " 1 2", IG_BAD_DATA_PROGRESS, "ID COMPLETED FAILED IN_FLIGHT"},
		{'p', BATCH " -1 0 0", IG_BAD_DATA_PROGRESS, "count 1 is not from 0"},
		{'p', BATCH " 0 nan 0", IG_BAD_DATA_PROGRESS, "count 2"},
		{'p', BATCH " 0 0 9223372036854775807", IG_BAD_DATA_PROGRESS, "count 3"},
		{'p', BATCH " 0 0 1000000000001", IG_BAD_DATA_PROGRESS, "count 3"},
		{'p', BATCH " 0x10 0 0", IG_BAD_DATA_PROGRESS, "count 1"},
		{'p', "../x 1 1 1", IG_BAD_DATA_PROGRESS, "not a batch id"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++) {
		ck_assert_msg(parse(refused[i].kind, refused[i].rest, &m, &bad) == -1, "%c %s taken", refused[i].kind,
			      refused[i].rest);
		ck_assert_str_eq(bad.kind, refused[i].bad_kind);
		ck_assert_msg(strstr(bad.why, refused[i].why), "%c %s: '%s'", refused[i].kind, refused[i].rest, bad.why);
	}
}
END_TEST

static redisReply *reply_of(const char *resp)
{
	redisReader *rd = redisReaderCreate();
	void *out = NULL;
	ck_assert_int_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
	ck_assert_int_eq(redisReaderGetReply(rd, &out), REDIS_OK);
	ck_assert_ptr_nonnull(out);
	redisReaderFree(rd);
	return out;
}

START_TEST(the_lease_rounds_reply)
{
	uint64_t tok[2];
	bool cancel[2];
	struct ig_redismsg_bad bad;
	redisReply *r = reply_of("*4\r\n:17\r\n:0\r\n:0\r\n:1\r\n");
	ck_assert_int_eq(ig_batch_lease_reply(r, 2, tok, cancel, &bad), 0);
	ck_assert_uint_eq(tok[0], 17);
	ck_assert(!cancel[0]);
	ck_assert_uint_eq(tok[1], 0);
	ck_assert(cancel[1]);
	ck_assert_int_eq(ig_batch_lease_reply(r, 1, tok, cancel, &bad), -1); /* 4 elements for 1 batch */
	ck_assert_str_eq(bad.kind, IG_BAD_BATCH_LEASE);
	freeReplyObject(r);
	const char *refused[][2] = {
		{"*2\r\n:-1\r\n:0\r\n", "fencing token"},
		{"*2\r\n:9007199254740992\r\n:0\r\n", "fencing token"},    /* 2^53 */
		{"*2\r\n:-9223372036854775808\r\n:0\r\n", "fencing token"},
		{"*2\r\n$2\r\n17\r\n:0\r\n", "fencing token"},
		{"*2\r\n:1\r\n:2\r\n", "cancel is not 0 or 1"},
		{"*2\r\n:1\r\n$1\r\n1\r\n", "cancel is not 0 or 1"},
		{"*2\r\n*0\r\n:0\r\n", "fencing token"},
		{":3\r\n", "not an array"},
		{"$-1\r\n", "not an array"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++) {
		r = reply_of(refused[i][0]);
		bad.kind = NULL;
		ck_assert_int_eq(ig_batch_lease_reply(r, 1, tok, cancel, &bad), -1);
		ck_assert_str_eq(bad.kind, IG_BAD_BATCH_LEASE);
		ck_assert_msg(strstr(bad.why, refused[i][1]), "%zu: '%s'", i, bad.why);
		freeReplyObject(r);
	}
}
END_TEST

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(a_batch_is_loaded_only_by_an_id)
{
	char tmpl[] = "/tmp/ig-lease-XXXXXX";
	char *top = mkdtemp(tmpl);
	ck_assert_ptr_nonnull(top);
	const char *json = "{\"status\": \"completed\", \"endpoint\": \"/v1/chat/completions\", \"completed_at\": 1}";
	char *data = ig_strdupf("%s/data", top), *mine = ig_strdupf("%s/" BATCH, data), *outside = ig_strdupf("%s/x", top);
	ck_assert_int_eq(mkdir(data, 0700), 0);
	ck_assert_int_eq(mkdir(mine, 0700), 0);
	ck_assert_int_eq(mkdir(outside, 0700), 0);
	char *p1 = ig_strdupf("%s/batch.json", mine), *p2 = ig_strdupf("%s/batch.json", outside);
	write_file(p1, json);
	write_file(p2, json); /* what a traversal would find */
	struct ig_batches bs = {.dir = data, .clustered = true};
	ig_list_init(&bs.all);
	struct ig_batch *b = ig_batch_load(&bs, BATCH);
	ck_assert_ptr_nonnull(b); /* one inside, by its id: read */
	ck_assert_int_eq(b->status, IG_BATCH_COMPLETED);
	ig_batch_drop(b);
	ck_assert_ptr_null(ig_batch_load(&bs, "../x"));
	ck_assert_ptr_null(ig_batch_load(&bs, "batch_/../../x"));
	ck_assert_ptr_null(ig_batch_load(&bs, ""));
	unlink(p1);
	unlink(p2);
	rmdir(mine);
	rmdir(outside);
	rmdir(data);
	rmdir(top);
	free(p1);
	free(p2);
	free(data);
	free(mine);
	free(outside);
}
END_TEST

IG_CHECK_MAIN("batches_lease", data_messages_name_only_real_ids, the_lease_rounds_reply, a_batch_is_loaded_only_by_an_id)
