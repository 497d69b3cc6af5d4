/* Tracing's settings (trace.c) and their check: the OpenTelemetry
 * variables where the configuration leaves a setting at its default.
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

static const struct ig_flag trace_rows[] = {
	{.name = "--tracing-endpoint", .key = "tracing.endpoint", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(trace_endpoint),
	 .def = "", .metavar = "URL",
	 .help = "send OpenTelemetry spans (OTLP/HTTP, JSON) of every sampled request to URL, e.g. "
		 "http://collector:4318/v1/traces; empty = no tracing unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
		 "OTEL_EXPORTER_OTLP_ENDPOINT is set (then its /v1/traces)"},
	{.name = "--tracing-headers", .key = "tracing.headers", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(trace_headers),
	 .def = "", .metavar = "K=V,...",
	 .help = "headers of the export requests, URL-encoded values (default: OTEL_EXPORTER_OTLP_TRACES_HEADERS or "
		 "OTEL_EXPORTER_OTLP_HEADERS)"},
	{.name = "--tracing-sample-ratio", .key = "tracing.sample_ratio", .type = IG_FLAG_DOUBLE,
	 .off = IG_CONF_OFF(trace_ratio), .min = 0, .max = 1, .def = "1", .metavar = "R",
	 .help = "share of new traces recorded; a client's traceparent decides for its own (parent-based; "
		 "default: OTEL_TRACES_SAMPLER_ARG, else 1)"},
	{.name = "--tracing-service-name", .key = "tracing.service_name", .type = IG_FLAG_STRING,
	 .off = IG_CONF_OFF(trace_service), .def = "infergate", .metavar = "NAME",
	 .help = "the spans' service.name (default: OTEL_SERVICE_NAME, else infergate)"},
	{.name = "--tracing-schedule-delay-ms", .key = "tracing.schedule_delay_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(trace_delay_ms), .min = 1, .max = 600000, .def = "5000", .metavar = "N",
	 .help = "spans are sent at least every N ms, or when 512 are waiting (default: OTEL_BSP_SCHEDULE_DELAY, "
		 "else 5000)"},
};
const struct ig_conf_part ig_trace_conf = IG_CONF_PART(trace_rows);

/* The OpenTelemetry variables, as the SDKs read them, where the
 * configuration leaves a tracing setting at its default; then the
 * settings checked (trace.h). */
void ig_trace_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	const char *v;
	if (!*cfg->trace_endpoint) {
		if ((v = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) && *v) {
			free(cfg->trace_endpoint);
			cfg->trace_endpoint = strdup(v);
		} else if ((v = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) && *v) {
			free(cfg->trace_endpoint);
			size_t n = strlen(v);
			cfg->trace_endpoint = ig_strdupf("%.*s/v1/traces", (int)(n && v[n - 1] == '/' ? n - 1 : n), v);
		}
	}
	if (!*cfg->trace_endpoint)
		return;
	if (strncmp(cfg->trace_endpoint, "http://", 7) != 0 && strncmp(cfg->trace_endpoint, "https://", 8) != 0)
		ig_flags_problem(errs, "tracing.endpoint: '%s' must be an http:// or https:// URL", cfg->trace_endpoint);
	if ((v = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")) || (v = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")))
		if (*v && strcmp(v, "http/json") != 0)
			ig_flags_problem(errs, "%s: '%s': infergate exports OTLP over HTTP as JSON only (set it to http/json)",
					 getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ? "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
					 : "OTEL_EXPORTER_OTLP_PROTOCOL", v);
	if (!*cfg->trace_headers && (((v = getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS")) && *v) ||
				     ((v = getenv("OTEL_EXPORTER_OTLP_HEADERS")) && *v))) {
		free(cfg->trace_headers);
		cfg->trace_headers = strdup(v);
	}
	if (strcmp(cfg->trace_service, "infergate") == 0 && (v = getenv("OTEL_SERVICE_NAME")) && *v) {
		free(cfg->trace_service);
		cfg->trace_service = strdup(v);
	}
	char *end;
	if (cfg->trace_ratio == 1 && (v = getenv("OTEL_TRACES_SAMPLER_ARG")) && *v) {
		double r = strtod(v, &end);
		if (*end || !(r >= 0 && r <= 1))
			ig_flags_problem(errs, "OTEL_TRACES_SAMPLER_ARG: '%s' is not a ratio from 0 to 1", v);
		else
			cfg->trace_ratio = r;
	}
	if (cfg->trace_delay_ms == 5000 && (v = getenv("OTEL_BSP_SCHEDULE_DELAY")) && *v) {
		long d = strtol(v, &end, 10);
		if (*end || d < 1 || d > 600000)
			ig_flags_problem(errs, "OTEL_BSP_SCHEDULE_DELAY: '%s' is not a delay of 1 to 600000 ms", v);
		else
			cfg->trace_delay_ms = d;
	}
	for (const char *h = cfg->trace_headers, *p; h && *h; h = p ? p + 1 : NULL) {
		p = strchr(h, ',');
		size_t n = p ? (size_t)(p - h) : strlen(h);
		const char *eq = memchr(h, '=', n);
		if (!eq || eq == h)
			ig_flags_problem(errs, "tracing.headers: '%.*s' is not key=value", (int)n, h);
	}
}
