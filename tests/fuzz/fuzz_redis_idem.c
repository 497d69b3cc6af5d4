/* libFuzzer target: what Redis holds under an Idempotency-Key (the value
 * of a GET or of SET ... GET: idem_share.c's "R DIGEST HOLDER" and "D
 * DIGEST STATUS CONTENT-TYPE\nANSWER"), the raw bytes through
 * ig_idem_share_parse with 1 KiB kept at most: refused, or a digest of 64
 * hex, a holder, or a status from 100 to 599, a Content-Type of printable
 * ASCII (it becomes a header) and an answer within the value and the bound. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "net/redismsg.h"
#include "path/idem_share.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ig_idem_value v;
	struct ig_redismsg_bad bad = {0};
	const char *s = (const char *)data;
	if (ig_idem_share_parse(s, size, 1024, &v, &bad) < 0) {
		if (!bad.kind || strcmp(bad.kind, IG_BAD_IDEM) != 0)
			abort();
		return 0;
	}
	if ((v.kind != 'R' && v.kind != 'D') || !ig_redismsg_digest_ok(v.digest, strlen(v.digest)))
		abort();
	if (v.kind == 'D') {
		if (v.status < 100 || v.status > 599 || v.nbody > 1024 || v.body < s || v.body + v.nbody != s + size)
			abort();
		for (const char *p = v.ctype; *p; p++)
			if (*p < 0x20 || *p > 0x7e)
				abort();
	}
	return 0;
}
