/* libFuzzer target: infergate-bulk's resume scanner (ig_journal_done_load and
 * friends, src/batchfile/journal.c) over an OUTPUT and an errors file. The input
 * is split at the first 0xff byte: before it the output file, after it the
 * errors file. When the scan accepts the files, every complete line's
 * custom_id must be found again (exactly-once rests on that), and the torn
 * tail, if any, is what lies after the last complete line. */
#include "config.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bulk.h"

static int fds[2] = {-1, -1};
static char paths[2][64];

static void put(int f, const uint8_t *p, size_t n)
{
	if (fds[f] < 0) {
		fds[f] = memfd_create(f ? "errors" : "output", 0);
		snprintf(paths[f], sizeof(paths[f]), "/proc/self/fd/%d", fds[f]);
	}
	if (fds[f] < 0 || ftruncate(fds[f], 0) < 0 || (n && pwrite(fds[f], p, n, 0) != (ssize_t)n))
		abort();
}

/* Every complete line with a string custom_id must be found as done. */
static void check_found(struct ig_doneset *d, const uint8_t *p, size_t n, size_t valid)
{
	size_t start = 0;
	for (size_t i = 0; i < n && i < valid; i++) {
		if (p[i] != '\n')
			continue;
		json_t *o = json_loadb((const char *)p + start, i - start, 0, NULL);
		json_t *id = json_object_get(o, "custom_id");
		if (json_is_string(id) && strlen(json_string_value(id)) == json_string_length(id)) {
			const char *s = json_string_value(id);
			if (ig_journal_done_find(d, s, strlen(s)) == 0) {
				fprintf(stderr, "id '%s' not found after a successful load\n", s);
				abort();
			}
		}
		json_decref(o);
		start = i + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *sep = memchr(data, 0xff, size);
	size_t n0 = sep ? (size_t)(sep - data) : size;
	const uint8_t *p1 = sep ? sep + 1 : data + size;
	size_t n1 = sep ? size - n0 - 1 : 0;
	struct ig_doneset d;
	char *err = NULL;

	put(0, data, n0);
	put(1, p1, n1);
	ig_journal_done_init(&d);
	if (ig_journal_done_load(&d, paths[0], paths[1], &err) < 0) {
		if (!err || !*err)
			abort();
		free(err);
		ig_journal_done_free(&d);
		return 0;
	}
	if (d.valid[0] > (off_t)n0 || d.valid[1] > (off_t)n1)
		abort();
	if (d.valid[0] > 0 && data[d.valid[0] - 1] != '\n')
		abort();
	if (d.valid[1] > 0 && p1[d.valid[1] - 1] != '\n')
		abort();
	check_found(&d, data, n0, (size_t)d.valid[0]);
	check_found(&d, p1, n1, (size_t)d.valid[1]);
	if (ig_journal_done_find(&d, "\x01never-an-id", 12) != 0)
		abort();
	ig_journal_done_free(&d);
	return 0;
}
