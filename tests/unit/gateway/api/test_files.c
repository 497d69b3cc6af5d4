/* Unit tests for the Files API's store (src/gateway/api/files.c, included to
 * reach its static functions): opening a data_dir (what a crash left),
 * taking a file in (adopt, as a batch's results), finding by owner,
 * removing, the list pager. The uploads are test_files_api.c's. */
#include "../../../../src/gateway/api/files.c"

#include <check.h>
#include <ftw.h>
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

static void put(const char *name, const char *text)
{
	char *p = path_in(name);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	free(p);
}

static bool exists(const char *name)
{
	char *p = path_in(name);
	bool yes = access(p, F_OK) == 0;
	free(p);
	return yes;
}

/* A file taken into the store as a batch's result is. */
static void adopt(struct ig_files *fs, const char *src, const char *id, const char *owner, int64_t created)
{
	struct ig_file f = {.created_at = created};
	snprintf(f.id, sizeof(f.id), "%s", id);
	snprintf(f.owner, sizeof(f.owner), "%s", owner);
	snprintf(f.filename, sizeof(f.filename), "%s.jsonl", id);
	snprintf(f.purpose, sizeof(f.purpose), "batch_output");
	char *p = path_in(src);
	ck_assert_int_eq(ig_files_adopt_disk(fs, p, &f), 0);
	free(p);
	ck_assert_int_eq(ig_files_add(fs, &f), 0);
}

START_TEST(a_stored_file_survives_a_restart_and_a_crashs_leftovers_go)
{
	setup();
	char *dir = path_in("files");
	char *err = NULL;
	struct ig_files *fs = ig_files_open(dir, false, &err);
	ck_assert_ptr_nonnull(fs);
	put("out.jsonl", "{\"a\":1}\n{\"a\":2}\n");
	adopt(fs, "out.jsonl", "file-aaa", "alice", 100);
	ck_assert(!exists("out.jsonl")); /* renamed, not copied */
	ck_assert(exists("files/file-aaa") && exists("files/file-aaa.json"));
	const struct ig_file *f = ig_files_find(fs, "file-aaa", "alice");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(f->bytes, 16);
	ck_assert_ptr_null(ig_files_find(fs, "file-aaa", "bob")); /* another key's: not found */
	/* adopting again after a crash that came after the rename: a no-op */
	adopt(fs, "out.jsonl", "file-aaa", "alice", 100);
	uint64_t n, bytes;
	ig_files_count(fs, &n, &bytes);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(bytes, 16);
	ig_files_free(fs);
	/* a crash's half upload, and metadata whose bytes are not all there */
	put("files/.upload-0123", "half");
	put("files/file-bbb.json", "{\"id\":\"file-bbb\",\"owner\":\"\",\"filename\":\"x\",\"purpose\":\"batch\","
				   "\"bytes\":99,\"created_at\":1}");
	put("files/file-bbb", "short");
	fs = ig_files_open(dir, false, &err);
	ck_assert_ptr_nonnull(fs);
	ck_assert(!exists("files/.upload-0123"));
	ck_assert_ptr_nonnull(ig_files_find(fs, "file-aaa", "alice"));
	ck_assert_ptr_null(ig_files_find(fs, "file-bbb", ""));
	ig_files_free(fs);
	free(dir);
	teardown();
}
END_TEST

static void heard_errno(void *arg, int err)
{
	*(int *)arg = err;
}

START_TEST(remove_takes_the_file_from_the_list_and_the_disk)
{
	setup();
	char *dir = path_in("files"), *err = NULL;
	struct ig_files *fs = ig_files_open(dir, false, &err);
	put("o1", "1\n");
	put("o2", "22\n");
	adopt(fs, "o1", "file-1", "", 1);
	adopt(fs, "o2", "file-2", "", 2);
	ck_assert_int_eq(ig_files_remove(fs, NULL, "file-1", NULL, NULL), 0); /* no thread: the unlinks happen here */
	ck_assert_ptr_null(ig_files_find(fs, "file-1", ""));
	ck_assert_ptr_nonnull(ig_files_find(fs, "file-2", ""));
	ck_assert(!exists("files/file-1") && !exists("files/file-1.json"));
	ck_assert_int_eq(ig_files_remove(fs, NULL, "file-1", NULL, NULL), -1);
	ck_assert_int_eq(errno, ENOENT);
	/* done hears how the unlinks went: file-2's metadata replaced by a
	 * directory, which unlink(2) refuses (EISDIR), as it would as root */
	char *meta = path_in("files/file-2.json");
	ck_assert_int_eq(unlink(meta), 0);
	ck_assert_int_eq(mkdir(meta, 0700), 0);
	int heard = -1;
	ck_assert_int_eq(ig_files_remove(fs, NULL, "file-2", heard_errno, &heard), 0);
	ck_assert_int_eq(heard, EISDIR);
	ck_assert(exists("files/file-2")); /* the metadata first: the bytes stay */
	rmdir(meta);
	free(meta);
	ig_files_free(fs);
	fs = ig_files_open(dir, false, &err); /* gone for good */
	ck_assert_ptr_null(ig_files_find(fs, "file-1", ""));
	ig_files_free(fs);
	free(dir);
	teardown();
}
END_TEST

/* The ids a page shows. */
static void page(const char *after, long limit, const char *want, bool more)
{
	static const char *ids[] = {"f1", "f2", "f3", "f4", "f5"};
	struct ig_files_pager p = {.after = after, .limit = limit, .data = json_array()};
	for (size_t i = 0; i < 5; i++) {
		int take = ig_files_pager_take(&p, ids[i]);
		if (take < 0)
			break;
		if (take)
			json_array_append_new(p.data, json_pack("{s:s}", "id", ids[i]));
	}
	json_t *list = ig_files_list_page(&p);
	char got[64] = "";
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(list, "data"), i, e) {
		strcat(got, json_string_value(json_object_get(e, "id")));
		strcat(got, " ");
	}
	ck_assert_str_eq(got, want);
	ck_assert_int_eq(json_is_true(json_object_get(list, "has_more")), more);
	ck_assert_str_eq(json_string_value(json_object_get(list, "object")), "list");
	if (*want) {
		char first[8];
		snprintf(first, sizeof(first), "%.2s", want);
		ck_assert_str_eq(json_string_value(json_object_get(list, "first_id")), first);
	} else {
		ck_assert(json_is_null(json_object_get(list, "first_id")));
	}
	json_decref(list);
}

START_TEST(the_pager_gives_openai_pages)
{
	page(NULL, 2, "f1 f2 ", true);
	page("f2", 2, "f3 f4 ", true);
	page("f4", 2, "f5 ", false);
	page("f5", 2, "", false);
	page(NULL, 10, "f1 f2 f3 f4 f5 ", false);
	page("nope", 10, "", false); /* an unknown id: nothing after it */
}
END_TEST

IG_CHECK_MAIN("files", a_stored_file_survives_a_restart_and_a_crashs_leftovers_go,
	      remove_takes_the_file_from_the_list_and_the_disk, the_pager_gives_openai_pages)
