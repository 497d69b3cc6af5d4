/* Stream continuation's setting (cont.c).
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

static const struct ig_flag cont_rows[] = {
	{.name = "--continue-max", .key = "continue.max", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(continue_max), .min = 0,
	 .max = IG_CONT_MAX, .def = "2", .metavar = "N",
	 .help = "a stream whose backend fails after its first event goes on on another backend, at most N times (0 = "
		 "it ends with an error event)"},
};
const struct ig_conf_part ig_cont_conf = IG_CONF_PART(cont_rows);
