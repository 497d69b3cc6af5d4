/* Unit tests for the Files API's HTTP side (src/gateway/api/files_api.c,
 * included to reach its static functions): an upload's writer jobs (a
 * chunk written, the fsync and rename, a full disk) and its multipart
 * fields, without a socket: with no I/O thread a job and its done run at
 * once. Moved from test_files.c with the code they test. */
#include "../../../../src/gateway/api/files_api.c"

#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>

#include "../../check_main.h"

static char root[] = "/tmp/ig-test-files-XXXXXX";

static int rm_one(const char *p, const struct stat *st IG_UNUSED, int flag IG_UNUSED, struct FTW *f IG_UNUSED)
{
	return remove(p);
}

static void setup(void)
{
	strcpy(root, "/tmp/ig-test-files-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	ig_log_set_level(IG_LOG_ERROR);
}

static void teardown(void)
{
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char *path_in(const char *name)
{
	return ig_strdupf("%s/%s", root, name);
}

static bool exists(const char *name)
{
	char *p = path_in(name);
	bool yes = access(p, F_OK) == 0;
	free(p);
	return yes;
}

/* An upload's call as the handler leaves it, without a connection. */
static struct files_call *upload_call(struct ig_gw *gw)
{
	struct files_call *fc = calloc(1, sizeof(*fc));
	fc->c.gw = gw;
	fc->fd = -1;
	snprintf(fc->c.owner, sizeof(fc->c.owner), "alice");
	return fc;
}

static struct ig_gw *files_gw(struct ig_files *fs)
{
	static struct ig_conf cfg;
	static struct ig_gw gw;
	memset(&gw, 0, sizeof(gw));
	cfg.files_max_bytes = 1 << 20;
	gw.cfg = &cfg;
	gw.files = fs;
	return &gw;
}

static void feed(struct files_call *fc, const char *data)
{
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "up.jsonl", NULL, NULL, data, (uint64_t)fc->bytes,
			       strlen(data)),
			 MHD_YES);
}

static void finish(struct files_call *fc)
{
	fc->f = (struct ig_file){.bytes = fc->bytes, .created_at = 5};
	snprintf(fc->f.id, sizeof(fc->f.id), "file-up");
	snprintf(fc->f.owner, sizeof(fc->f.owner), "%s", fc->c.owner);
	snprintf(fc->f.purpose, sizeof(fc->f.purpose), "batch");
	snprintf(fc->f.filename, sizeof(fc->f.filename), "%s", fc->filename);
	ck_assert_int_eq(upload_flush(fc), 0);
	ck_assert_int_eq(upload_submit(fc, UP_FINISH, NULL, 0), 0);
}

START_TEST(an_uploads_bytes_reach_the_store_through_the_writer)
{
	setup();
	char *dir = path_in("files"), *err = NULL;
	struct ig_files *fs = ig_files_open(dir, false, &err);
	struct files_call *fc = upload_call(files_gw(fs));
	feed(fc, "{\"prompt\":\"a\"}\n");
	ck_assert_int_eq(upload_flush(fc), 0); /* the first bytes: the temporary file exists */
	ck_assert(exists(fc->tmp + strlen(root) + 1));
	feed(fc, "{\"prompt\":\"b\"}\n");
	finish(fc);
	ck_assert(fc->finished && fc->kept);
	ck_assert_int_eq(fc->c.jobs, 0);
	ck_assert_uint_eq(ig_files_queue(fs, 0), 0);
	const struct ig_file *f = ig_files_find(fs, "file-up", "alice");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(f->bytes, 30);
	char buf[64] = "";
	char *p = ig_files_path(fs, "file-up");
	FILE *in = fopen(p, "r");
	ck_assert_uint_eq(fread(buf, 1, sizeof(buf) - 1, in), 30);
	fclose(in);
	ck_assert_str_eq(buf, "{\"prompt\":\"a\"}\n{\"prompt\":\"b\"}\n");
	ck_assert(!exists(fc->tmp + strlen(root) + 1)); /* renamed into place */
	call_free(fc);
	free(p);
	ig_files_free(fs);
	free(dir);
	teardown();
}
END_TEST

START_TEST(a_full_disk_keeps_nothing_and_says_so)
{
	setup();
	char *dir = path_in("files"), *err = NULL;
	struct ig_files *fs = ig_files_open(dir, false, &err);
	struct files_call *fc = upload_call(files_gw(fs));
	feed(fc, "{\"prompt\":\"a\"}\n");
	close(open(fc->tmp, O_WRONLY | O_CREAT, 0600)); /* as if the writer had made it */
	fc->fd = open("/dev/full", O_WRONLY | O_CLOEXEC); /* every write: ENOSPC */
	ck_assert_int_ge(fc->fd, 0);
	ck_assert_int_eq(upload_flush(fc), 0);
	ck_assert_int_eq(fc->io_errno, ENOSPC);
	ck_assert_uint_eq(fc->err_status, 507);
	ck_assert_ptr_nonnull(strstr(fc->err_msg, "full: nothing was kept"));
	ck_assert(!exists(fc->tmp + strlen(root) + 1)); /* the temporary file went */
	/* the rest of the body is not written; the end keeps nothing */
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "up.jsonl", NULL, NULL, "x", 15, 1), MHD_NO);
	finish(fc);
	ck_assert(fc->finished && !fc->kept);
	ck_assert_ptr_null(ig_files_find(fs, "file-up", "alice"));
	ck_assert(!exists("files/file-up"));
	call_free(fc);
	ig_files_free(fs);
	free(dir);
	teardown();
}
END_TEST

START_TEST(too_large_an_upload_is_refused_and_dropped)
{
	setup();
	char *dir = path_in("files"), *err = NULL;
	struct ig_files *fs = ig_files_open(dir, false, &err);
	struct ig_gw *gw = files_gw(fs);
	gw->cfg->files_max_bytes = 20;
	struct files_call *fc = upload_call(gw);
	feed(fc, "{\"prompt\":\"a\"}\n");
	ck_assert_int_eq(upload_flush(fc), 0);
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "up.jsonl", NULL, NULL, "0123456789", 15, 10), MHD_NO);
	ck_assert_uint_eq(fc->err_status, 413);
	ck_assert_str_eq(fc->err_code, "file_too_large");
	ck_assert(!exists(fc->tmp + strlen(root) + 1));
	call_free(fc);
	ig_files_free(fs);
	free(dir);
	teardown();
}
END_TEST

/* One file part per upload: a second one (after the first's bytes, or
 * after another field) is a 400 naming 'file', and what was written goes;
 * MHD's empty first call of a part is not a second part. A second
 * 'purpose' is refused too (it would be appended to the first). */
START_TEST(a_second_file_part_or_purpose_is_refused_and_nothing_kept)
{
	setup();
	char *dir = path_in("files"), *err = NULL;
	struct ig_files *fs = ig_files_open(dir, false, &err);
	struct files_call *fc = upload_call(files_gw(fs));
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "a.jsonl", NULL, NULL, "", 0, 0), MHD_YES);
	feed(fc, "{\"prompt\":\"a\"}\n"); /* the same part: its bytes come at offset 0 after an empty call */
	ck_assert_uint_eq(fc->err_status, 0);
	ck_assert_int_eq(upload_flush(fc), 0);
	ck_assert(exists(fc->tmp + strlen(root) + 1));
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "b.jsonl", NULL, NULL, "x", 0, 1), MHD_NO);
	ck_assert_uint_eq(fc->err_status, 400);
	ck_assert_str_eq(fc->err_param, "file");
	ck_assert_ptr_nonnull(strstr(fc->err_msg, "more than one file part"));
	ck_assert(!exists(fc->tmp + strlen(root) + 1)); /* dropped */
	call_free(fc);

	fc = upload_call(files_gw(fs)); /* a file, a field, a file */
	feed(fc, "");
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "purpose", NULL, NULL, NULL, "batch", 0, 5), MHD_YES);
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "b.jsonl", NULL, NULL, "x", 0, 1), MHD_NO);
	ck_assert_str_eq(fc->err_param, "file");
	call_free(fc);

	fc = upload_call(files_gw(fs));
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "purpose", NULL, NULL, NULL, "bat", 0, 3), MHD_YES);
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "purpose", NULL, NULL, NULL, "ch", 0, 2), MHD_NO);
	ck_assert_str_eq(fc->err_param, "purpose");
	call_free(fc);
	uint64_t n, bytes;
	ig_files_count(fs, &n, &bytes);
	ck_assert_uint_eq(n, 0);
	ig_files_free(fs);
	free(dir);
	teardown();
}
END_TEST

/* A filename that JSON cannot hold (not UTF-8) or that would be cut is
 * refused before a byte is written: never a file kept without its
 * metadata. A metadata write that fails anyway fails the upload. */
START_TEST(a_filename_that_cannot_be_kept_is_refused_before_anything_is_written)
{
	setup();
	char *dir = path_in("files"), *err = NULL;
	struct ig_files *fs = ig_files_open(dir, false, &err);
	struct files_call *fc = upload_call(files_gw(fs));
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "caf\xe9.jsonl", NULL, NULL, "x", 0, 1), MHD_NO);
	ck_assert_uint_eq(fc->err_status, 400);
	ck_assert_str_eq(fc->err_code, "invalid_filename");
	ck_assert_ptr_nonnull(strstr(fc->err_msg, "not UTF-8"));
	ck_assert(!fc->started && !fc->tmp);
	call_free(fc);
	char longname[300];
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	fc = upload_call(files_gw(fs));
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", longname, NULL, NULL, "x", 0, 1), MHD_NO);
	ck_assert_ptr_nonnull(strstr(fc->err_msg, "longer than 255 bytes"));
	call_free(fc);
	/* UTF-8 beyond ASCII is kept as sent */
	fc = upload_call(files_gw(fs));
	ck_assert_int_eq(field(fc, MHD_POSTDATA_KIND, "file", "donn\xc3\xa9" "es.jsonl", NULL, NULL, "x", 0, 1), MHD_YES);
	ck_assert_str_eq(fc->filename, "donn\xc3\xa9" "es.jsonl");
	/* metadata that cannot be written: the upload fails, the bytes go */
	snprintf(fc->filename, sizeof(fc->filename), "caf\xe9"); /* as if it had got past the check */
	finish(fc);
	ck_assert(fc->finished && !fc->kept);
	ck_assert_int_eq(fc->io_errno, EINVAL);
	ck_assert(!exists("files/file-up") && !exists("files/file-up.json"));
	call_free(fc);
	ig_files_free(fs);
	free(dir);
	teardown();
}
END_TEST

IG_CHECK_MAIN("files_api", an_uploads_bytes_reach_the_store_through_the_writer, a_full_disk_keeps_nothing_and_says_so,
	      too_large_an_upload_is_refused_and_dropped, a_second_file_part_or_purpose_is_refused_and_nothing_kept,
	      a_filename_that_cannot_be_kept_is_refused_before_anything_is_written)
