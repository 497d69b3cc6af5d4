/* Reading a backend's own report of its load: how many requests it runs and
 * how many wait in its queue, from the places SGLang and vLLM tell it.
 * The text is the backend's: any bytes must give a sane answer.
 * Not here: when reports are fetched (health.c) or what is learned from
 * them (capacity.c). */
#include "config.h"
#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "fleet/loadreport.h"

/* A count a backend reported, made sane: the text is the backend's, so
 * negative, NaN or absurdly large values must not reach integer arithmetic. */
static long sane_count(double v)
{
	return v >= 0 ? (v < (double)IG_LOADREPORT_MAX ? (long)v : IG_LOADREPORT_MAX) : 0;
}

/* Reads one label set `{name="value",...}` at p (up to end); returns the
 * position after the closing brace, or NULL when it is malformed. Sets
 * *per_priority when a `priority` label has a non-empty value, and *rank to
 * the value of a data-parallel rank's label (SGLang's dp_rank, vLLM's
 * engine: one engine core per rank) when it is a number, else leaves it. */
static const char *prom_labels(const char *p, const char *end, bool *per_priority, long *rank)
{
	p++; /* '{' */
	for (;;) {
		while (p < end && (*p == ' ' || *p == ','))
			p++;
		if (p < end && *p == '}')
			return p + 1;
		const char *name = p;
		while (p < end && (isalnum((unsigned char)*p) || *p == '_'))
			p++;
		size_t nlen = (size_t)(p - name);
		while (p < end && *p == ' ')
			p++;
		if (nlen == 0 || p + 1 >= end || p[0] != '=' || p[1] != '"')
			return NULL;
		p += 2;
		const char *value = p;
		while (p < end && *p != '"') /* \" and \\ are escapes */
			p += *p == '\\' ? 2 : 1;
		if (p >= end)
			return NULL;
		if (nlen == 8 && memcmp(name, "priority", 8) == 0 && p > value)
			*per_priority = true;
		if ((nlen == 7 && memcmp(name, "dp_rank", 7) == 0) || (nlen == 6 && memcmp(name, "engine", 6) == 0)) {
			long k = 0;
			const char *d = value;
			while (d < p && *d >= '0' && *d <= '9' && k < 1000000)
				k = k * 10 + (*d++ - '0');
			if (d == p && p > value)
				*rank = k;
		}
		p++;
	}
}

/* The sum of a gauge's samples in a Prometheus text; -1 when it has none.
 * SGLang prints one series per data-parallel rank (label dp_rank), vLLM one
 * per engine (label engine): the load is their sum. With priority
 * scheduling SGLang prints the total under priority="" and then one series
 * per priority (python/sglang/srt/observability/metrics_collector.py,
 * _log_gauge_queue_count): those are skipped, or they would count twice. A
 * sample may end with a timestamp, which the text format allows: only the
 * value is read. */
static long prom_sum(const char *text, size_t len, const char *name, long want_rank)
{
	size_t nl = strlen(name);
	const char *p = text, *end = text + len;
	long sum = -1;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		if ((size_t)(eol - p) > nl && memcmp(p, name, nl) == 0 &&
		    (p[nl] == '{' || p[nl] == ' ' || p[nl] == '\t')) {
			const char *q = p + nl;
			bool per_priority = false;
			long rank = 0; /* a server without ranks prints no such label */
			if (*q == '{')
				q = prom_labels(q, eol, &per_priority, &rank);
			while (q && q < eol && (*q == ' ' || *q == '\t'))
				q++;
			char num[64];
			size_t k = 0;
			while (q && q < eol && *q != ' ' && *q != '\t' && *q != '\r' && k < sizeof(num) - 1)
				num[k++] = *q++;
			num[k] = '\0';
			char *num_end;
			double v = strtod(num, &num_end);
			if (q && k > 0 && *num_end == '\0' && !per_priority && (want_rank < 0 || rank == want_rank)) {
				sum = (sum < 0 ? 0 : sum) + sane_count(v);
				if (sum > IG_LOADREPORT_MAX)
					sum = IG_LOADREPORT_MAX;
			}
		}
		p = eol + 1;
	}
	return sum;
}

void ig_loadreport_parse(const char *text, size_t len, long *running, long *waiting, long *capacity)
{
	ig_loadreport_parse_rank(text, len, -1, running, waiting, capacity);
}

void ig_loadreport_parse_rank(const char *text, size_t len, long rank, long *running, long *waiting,
			      long *capacity)
{
	static const char *const gauges[][2] = {
		{"sglang:num_running_reqs", "sglang:num_queue_reqs"},
		{"vllm:num_requests_running", "vllm:num_requests_waiting"},
	};

	*capacity = -1;
	for (size_t g = 0; g < sizeof(gauges) / sizeof(gauges[0]); g++) {
		*running = prom_sum(text, len, gauges[g][0], rank);
		*waiting = prom_sum(text, len, gauges[g][1], rank);
		if (*running >= 0 || *waiting >= 0) {
			*running = *running < 0 ? 0 : *running;
			*waiting = *waiting < 0 ? 0 : *waiting;
			return;
		}
	}
	json_t *root = json_loadb(text, len, 0, NULL), *item;
	size_t i;
	long capsum = 0;
	bool cap_all = true;
	if (json_is_array(json_object_get(root, "loads"))) { /* SGLang /v1/loads */
		json_t *loads = json_incref(json_object_get(root, "loads"));
		json_decref(root);
		root = loads;
	} else if (json_is_object(root)) {
		json_t *tmp = json_array();
		json_array_append(tmp, root);
		json_decref(root);
		root = tmp;
	}
	json_array_foreach(root, i, item) { /* one object per data-parallel rank */
		/* its "dp_rank" (/v1/loads, /get_load), else its place in the list */
		json_t *dr = json_object_get(item, "dp_rank");
		if (rank >= 0 && (json_is_integer(dr) ? json_integer_value(dr) != rank : (long)i != rank))
			continue;
		json_t *r = json_object_get(item, "num_running_reqs"), *w = json_object_get(item, "num_waiting_reqs");
		json_t *all = json_object_get(item, "num_reqs"); /* older /get_load: running + waiting */
		if (!json_is_integer(r) && !json_is_integer(w))
			continue;
		long nw = sane_count((double)json_integer_value(w));
		long nr = json_is_integer(r) ? sane_count((double)json_integer_value(r))
			  : json_is_integer(all) ? sane_count((double)json_integer_value(all) - (double)nw) : 0;
		*running = (*running < 0 ? 0 : *running) + nr;
		*waiting = (*waiting < 0 ? 0 : *waiting) + nw;
		if (*running > IG_LOADREPORT_MAX)
			*running = IG_LOADREPORT_MAX;
		if (*waiting > IG_LOADREPORT_MAX)
			*waiting = IG_LOADREPORT_MAX;
		/* Every rank states its own; one that does not (an older server)
		 * leaves the whole unknown. */
		json_t *cap = json_object_get(item, "max_running_requests");
		long nc = json_is_integer(cap) ? sane_count((double)json_integer_value(cap)) : 0;
		if (nc > 0 && capsum + nc <= IG_LOADREPORT_MAX)
			capsum += nc;
		else
			cap_all = false;
	}
	if (*running >= 0 && cap_all && capsum > 0)
		*capacity = capsum;
	json_decref(root);
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag loadreport_rows[] = {
	{.name = "--load-source", .key = "load_source", .type = IG_FLAG_CHOICE, .off = IG_CONF_OFF(load_from_backend),
	 .def = "backend", .metavar = "gateway|backend", .bad = "%s: unknown source '%s' (gateway, backend)",
	 .help = "backend = requests in flight here plus the backend's own running + waiting, read every "
		 "health interval; a backend is held to what it states it runs at once, or to what it ran when "
		 "it queued, and until either is known to a cap that grows while it does not queue; the rest "
		 "waits here; gateway = only requests in flight here (no limit but max_inflight)"},
	{.name = "--load-path", .key = "load_path", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(load_path), .def = "auto",
	 .metavar = "PATH",
	 .help = "with load_source backend: auto (/v1/loads, then /metrics, then /get_load, until one tells), "
		 "/metrics (SGLang or vLLM gauges), /v1/loads or /get_load (SGLang JSON; /v1/loads also states "
		 "the server's max_running_requests, the limit from its first report)"},
};
const struct ig_conf_part ig_loadreport_conf = IG_CONF_PART(loadreport_rows);

/* load_path: auto or a path (load_path_auto derived). */
void ig_loadreport_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	cfg->load_path_auto = strcmp(cfg->load_path, "auto") == 0;
	if (cfg->load_path[0] != '/' && !cfg->load_path_auto)
		ig_flags_problem(errs, "load_path: '%s' must be auto or a path starting with '/'", cfg->load_path);
}
