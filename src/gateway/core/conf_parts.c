/* The gateway's configuration table as the modules give it: each module
 * declares its rows (and its check) in its own file; this is the one list
 * of them, in the order of --help, of docs/reference/infergate.md and of
 * --check-config, and the order the checks run in (their problems are
 * printed in it). A new setting is a row in its module; a new module with
 * settings is one line here. Above every module that has rows (it names
 * them all), called by main.c before the configuration is read.
 * Not here: the table's machinery (conf.c). */
#include "config.h"
#include <stddef.h>

#include "conf/conf.h"
#include "core/conf_parts.h"
#include "infergate/buf.h"

/* Defined by the module named, in a block at the end of its file (or in
 * <module>_conf.c beside it). */
extern const struct ig_conf_part ig_conf_core_head; /* conf.c */
extern const struct ig_conf_part ig_servertls_conf; /* servertls.c */
extern const struct ig_conf_part ig_conf_fleet_backends; /* conf_fleet.c */
extern const struct ig_conf_part ig_discover_conf; /* discover.c */
extern const struct ig_conf_part ig_policy_conf; /* policy.c */
extern const struct ig_conf_part ig_cache_aware_conf; /* lb_cache_aware.c */
extern const struct ig_conf_part ig_prompt_conf; /* prompt.c */
extern const struct ig_conf_part ig_kvevents_conf; /* kvevents.c */
extern const struct ig_conf_part ig_health_conf; /* health.c */
extern const struct ig_conf_part ig_retry_conf; /* proxy_conf.c */
extern const struct ig_conf_part ig_dispatch_conf; /* dispatch.c (the retry budget) */
extern const struct ig_conf_part ig_conf_core_inflight; /* conf.c */
extern const struct ig_conf_part ig_scheduler_conf; /* scheduler.c */
extern const struct ig_conf_part ig_conf_core_routes; /* conf.c */
extern const struct ig_conf_part ig_files_conf; /* files_conf.c */
extern const struct ig_conf_part ig_batches_conf; /* batches.c */
extern const struct ig_conf_part ig_conf_fleet_keys; /* conf_fleet.c */
extern const struct ig_conf_part ig_conf_core_body; /* conf.c */
extern const struct ig_conf_part ig_upstream_conf_timeouts; /* upstream.c */
extern const struct ig_conf_part ig_timeouts_conf; /* proxy_conf.c */
extern const struct ig_conf_part ig_breaker_conf; /* backend.c */
extern const struct ig_conf_part ig_idem_conf; /* idem_conf.c */
extern const struct ig_conf_part ig_hedge_conf; /* proxy_conf.c */
extern const struct ig_conf_part ig_headroom_conf; /* headroom.c */
extern const struct ig_conf_part ig_trace_conf; /* trace_conf.c */
extern const struct ig_conf_part ig_headroom_conf_overshoot; /* headroom.c */
extern const struct ig_conf_part ig_hedge_conf_low; /* proxy_conf.c */
extern const struct ig_conf_part ig_cont_conf; /* cont_conf.c */
extern const struct ig_conf_part ig_xlate_conf; /* path/xlate.c */
extern const struct ig_conf_part ig_pd_conf; /* pd_conf.c */
extern const struct ig_conf_part ig_conf_core_server; /* conf.c */
extern const struct ig_conf_part ig_accesslog_conf; /* accesslog.c */
extern const struct ig_conf_part ig_keyset_conf; /* keyset.c */
extern const struct ig_conf_part ig_conf_core_tokens; /* conf.c */
extern const struct ig_conf_part ig_admin_conf; /* admin.c */
extern const struct ig_conf_part ig_loadreport_conf; /* loadreport.c */
extern const struct ig_conf_part ig_upstream_conf; /* upstream.c */
extern const struct ig_conf_part ig_cluster_conf; /* cluster_conf.c */

void ig_health_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* health.c: health.path */
void ig_cluster_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* cluster_conf.c: Redis, this gateway's name */
void ig_loadreport_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* loadreport.c: load_path */
void ig_conf_fleet_check(struct ig_conf *cfg, struct ig_buf *errs); /* conf_fleet.c: backends, aliases */
void ig_upstream_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* upstream.c: tls.* */
void ig_servertls_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* servertls.c: server_tls.* */
void ig_files_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* files_conf.c: data_dir */
void ig_trace_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* trace_conf.c: tracing.*, OTEL_* */
void ig_prompt_conf_check(struct ig_conf *cfg, struct ig_buf *errs); /* prompt.c: models[] */

static const struct ig_conf_part *const parts[] = {
	&ig_conf_core_head,
	&ig_servertls_conf,
	&ig_conf_fleet_backends,
	&ig_discover_conf,
	&ig_policy_conf,
	&ig_cache_aware_conf,
	&ig_prompt_conf,
	&ig_kvevents_conf,
	&ig_health_conf,
	&ig_retry_conf,
	&ig_dispatch_conf,
	&ig_conf_core_inflight,
	&ig_scheduler_conf,
	&ig_conf_core_routes,
	&ig_files_conf,
	&ig_batches_conf,
	&ig_conf_fleet_keys,
	&ig_conf_core_body,
	&ig_upstream_conf_timeouts,
	&ig_timeouts_conf,
	&ig_breaker_conf,
	&ig_idem_conf,
	&ig_hedge_conf,
	&ig_headroom_conf,
	&ig_trace_conf,
	&ig_headroom_conf_overshoot,
	&ig_hedge_conf_low,
	&ig_cont_conf,
	&ig_xlate_conf,
	&ig_pd_conf,
	&ig_conf_core_server,
	&ig_accesslog_conf,
	&ig_keyset_conf,
	&ig_conf_core_tokens,
	&ig_admin_conf,
	&ig_loadreport_conf,
	&ig_upstream_conf,
	&ig_cluster_conf,
};

static const ig_conf_check_fn checks[] = {
	ig_health_conf_check,
	ig_cluster_conf_check,
	ig_loadreport_conf_check,
	ig_conf_fleet_check,
	ig_prompt_conf_check,
	ig_upstream_conf_check,
	ig_servertls_conf_check,
	ig_files_conf_check,
	ig_trace_conf_check,
	ig_conf_check_trusted,
};

int ig_conf_parts_register(void)
{
	return ig_conf_register(parts, sizeof(parts) / sizeof(parts[0]), checks, sizeof(checks) / sizeof(checks[0]));
}
