/* The Files API's settings (files.c) and their check: data_dir usable.
 * Rows of the configuration table (conf.h), registered at boot by
 * conf_parts.c; a file of their own beside the module so that the module's
 * file can change apart (moved out of conf.c). */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"

static const struct ig_flag files_rows[] = {
	{.name = "--data-dir", .key = "data_dir", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(data_dir), .def = "",
	 .metavar = "DIR",
	 .help = "where the Files and Batch APIs keep uploads and batches (DIR/files, DIR/batches; made if "
		 "missing, must be writable: checked at start); empty = both are off"},
	{.name = "--files-max-bytes", .key = "files.max_bytes", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(files_max_bytes),
	 .min = 1024, .max = 1099511627776.0, .def = "4294967296", .metavar = "N",
	 .help = "largest file uploaded to /v1/files (then 413; 4 GiB holds the 902,087-line corpus many times)"},
};
const struct ig_conf_part ig_files_conf = IG_CONF_PART(files_rows);

/* data_dir exists (or is made) and takes a new file: checked before
 * anything starts, as a full or read-only disk found hours later loses
 * uploads. */
void ig_files_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	const char *d = cfg->data_dir;
	struct stat st;
	if (!*d)
		return;
	if (cfg->check_only && stat(d, &st) < 0 && errno == ENOENT) {
		/* --check-config changes nothing: the directory it would make */
		char *copy = strdup(d);
		const char *parent = copy ? dirname(copy) : ".";
		if (access(parent, W_OK | X_OK) < 0)
			ig_flags_problem(errs, "data_dir: cannot make '%s': %s: %s", d, parent, strerror(errno));
		free(copy);
		return;
	}
	if (mkdir(d, 0700) < 0 && errno != EEXIST) {
		ig_flags_problem(errs, "data_dir: cannot make '%s': %s", d, strerror(errno));
		return;
	}
	if (stat(d, &st) < 0 || !S_ISDIR(st.st_mode)) {
		ig_flags_problem(errs, "data_dir: '%s' is not a directory", d);
		return;
	}
	char *probe = ig_strdupf("%s/.write-test-%ld", d, (long)getpid());
	int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "x", 1) != 1)
		ig_flags_problem(errs, "data_dir: '%s' is not writable: %s", d, strerror(errno));
	if (fd >= 0)
		close(fd);
	unlink(probe);
	free(probe);
}
