/* Leveled logging to stderr, shared by every program.
 * Not an access log: that one is per request and lives with the gateway. */
#ifndef IG_LOG_H
#define IG_LOG_H

#define IG_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define IG_UNUSED __attribute__((unused))

enum ig_log_level {
	IG_LOG_DEBUG, /* per-request detail, off by default */
	IG_LOG_INFO,  /* start, stop, state changes */
	IG_LOG_WARN,  /* something failed but we go on */
	IG_LOG_ERROR, /* something failed and a user will notice */
};

void ig_log_set_level(enum ig_log_level level);
enum ig_log_level ig_log_get_level(void);
/* Parses "debug|info|warn|error"; returns -1 on an unknown name. */
int ig_log_level_parse(const char *name, enum ig_log_level *out);
/* Prefix for every line, usually the program name. */
void ig_log_set_ident(const char *ident);

void ig_log(enum ig_log_level level, const char *fmt, ...) IG_PRINTF(2, 3);
#define ig_log_debug(...) do { if (ig_log_get_level() <= IG_LOG_DEBUG) ig_log(IG_LOG_DEBUG, __VA_ARGS__); } while (0)
#define ig_log_info(...) ig_log(IG_LOG_INFO, __VA_ARGS__)
#define ig_log_warn(...) ig_log(IG_LOG_WARN, __VA_ARGS__)
#define ig_log_error(...) ig_log(IG_LOG_ERROR, __VA_ARGS__)

#endif
