/* Leveled logging to stderr: one line per call, written with one write(2) so
 * lines from several threads never interleave. */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "infergate/log.h"
#include "infergate/util.h"

static enum ig_log_level current_level = IG_LOG_INFO;
static const char *ident = "infergate";

void ig_log_set_level(enum ig_log_level level) { current_level = level; }
enum ig_log_level ig_log_get_level(void) { return current_level; }
void ig_log_set_ident(const char *name) { ident = name; }

int ig_log_level_parse(const char *name, enum ig_log_level *out)
{
	static const char *names[] = {"debug", "info", "warn", "error"};
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcasecmp(name, names[i]) == 0) {
			*out = (enum ig_log_level)i;
			return 0;
		}
	}
	return -1;
}

void ig_log(enum ig_log_level level, const char *fmt, ...)
{
	static const char *tags[] = {"debug", "info", "warn", "error"};
	char line[2048];
	size_t n;
	va_list ap;

	if (level < current_level)
		return;
	ig_iso_time(line, sizeof(line));
	n = strlen(line);
	n += (size_t)snprintf(line + n, sizeof(line) - n, " %s %s: ", ident, tags[level]);
	va_start(ap, fmt);
	int m = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += (size_t)m;
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	ssize_t IG_UNUSED w = write(STDERR_FILENO, line, n);
}
