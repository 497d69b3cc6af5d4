/* Idempotency-Key's settings (idem.c).
 * Rows of the configuration table (conf.h), registered at boot by
 * conf_parts.c; a file of their own beside the module so that the module's
 * file can change apart (moved out of conf.c). */
#include "config.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"

static const struct ig_flag idem_rows[] = {
	{.name = "--idempotency-ttl-s", .key = "idempotency.ttl_s", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(idem_ttl_s),
	 .min = 0, .max = 2592000, .def = "86400", .metavar = "S",
	 .help = "a POST with an Idempotency-Key runs once: a duplicate joins it or gets its answer for S seconds "
		 "(0 = the header is not read)"},
	{.name = "--idempotency-max-bytes", .key = "idempotency.max_bytes", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(idem_max_bytes), .min = 0, .max = 68719476736.0, .def = "268435456", .metavar = "N",
	 .help = "the answers kept for Idempotency-Key take at most N bytes of memory (the oldest go first)"},
};
const struct ig_conf_part ig_idem_conf = IG_CONF_PART(idem_rows);
