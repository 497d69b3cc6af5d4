/* Backend health as a small state machine per backend (after HAProxy's
 * checks and relayd's hce.c): active probes every interval, `fall`
 * consecutive failures take a backend down, `rise` consecutive successes
 * bring it back. Requests feed the same counters (passive checks), so a dead
 * backend is ejected after its first failed requests rather than at the next
 * probe. Probes are ordinary transfers in the reactor's curl multi: they
 * never block a request. State changes are logged once per change.
 * With the model list, a backend's settings (/server_info): whether it
 * schedules by priority and preempts (take_info).
 * A backend coming up or learning more slots sets gw->drain_pending: the
 * reactor then starts queued requests (proxy.c), which sits above us.
 * Not here: what the routing policies do with the state (policy.c). */
#include "config.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "fleet/capacity.h"
#include "fleet/health.h"
#include "fleet/loadreport.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "net/upstream.h"

#define MODELS_REFRESH_MS 30000

enum probe_what {
	PROBE_HEALTH, /* GET <url><health.path> */
	PROBE_MODELS, /* GET <url>/v1/models, after a successful health probe */
	PROBE_LOAD,   /* GET <url><load_path>, with load_source "backend" */
	PROBE_INFO,   /* GET <url>/server_info (then /get_server_info), with the model list */
};

/* Where SGLang answers its settings: /server_info, and /get_server_info,
 * its older name (a deprecated alias in newer versions) (sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py). vLLM has /server_info only
 * with VLLM_SERVER_DEV_MODE, without these fields: nothing is learned. */
static const char *const info_paths[] = {"/server_info", "/get_server_info"};

/* load_path "auto": where SGLang and vLLM tell their load, tried in turn
 * until one answers with it. Live sources first: SGLang computes /v1/loads
 * when asked (sgl-project/sglang python/sglang/srt/entrypoints/v1_loads.py),
 * while its /metrics gauges are refreshed only when the scheduler logs (each
 * prefill batch, every 40 decode steps, every 30 s when idle) and are served
 * only with --enable-metrics. vLLM has no /v1/loads; its /metrics gauges are
 * set on every engine step (vllm/v1/metrics/loggers.py), so live. /get_load
 * is SGLang's older, deprecated form. */
static const char *const auto_load_paths[] = {"/v1/loads", "/metrics", "/get_load"};
#define N_AUTO_LOAD_PATHS (sizeof(auto_load_paths) / sizeof(auto_load_paths[0]))

struct ig_probe {
	struct ig_xfer xfer;    /* the probe's transfer; its end: probe_done */
	struct ig_gw *gw;
	struct ig_backend *b;
	enum probe_what what;
	struct ig_buf body;
	struct curl_slist *headers; /* the backend key, when there is one */
	uint64_t started_us;
	bool running;
	size_t load_path;       /* index in auto_load_paths, with load_path "auto" */
	size_t load_tries;      /* load paths tried this round without a report */
	size_t info_path;       /* index in info_paths */
	bool no_reports;        /* the last round found none (logged once) */
};

static void probe_done(struct ig_xfer *x, CURLcode result);

int ig_health_add(struct ig_gw *gw, struct ig_backend *b)
{
	if (b->server != b) { /* a rank: its server's rank 0 probes for it */
		ig_capacity_reset(&b->learn, gw->cfg->load_from_backend);
		ig_backend_publish_slots(b);
		gw->models_dirty = true;
		return 0;
	}
	struct ig_probe *p = calloc(1, sizeof(*p));
	if (!p)
		return -1;
	p->xfer.done = probe_done;
	p->gw = gw;
	p->b = b;
	ig_buf_init(&p->body);
	b->probe = p;
	ig_capacity_reset(&b->learn, gw->cfg->load_from_backend);
	ig_backend_publish_slots(b);
	b->next_probe_ms = ig_now_ms(); /* probe at once: serve as soon as one is up */
	gw->models_dirty = true;        /* a new member of its models' pools */
	return 0;
}

void ig_health_remove(struct ig_gw *gw, struct ig_backend *b)
{
	struct ig_probe *p = b->probe;
	if (!p) { /* a rank its server probed for */
		gw->models_dirty = true;
		return;
	}
	ig_upstream_stop(&p->xfer);
	if (p->xfer.easy)
		curl_easy_cleanup(p->xfer.easy);
	curl_slist_free_all(p->headers);
	ig_buf_free(&p->body);
	free(p);
	b->probe = NULL;
	gw->models_dirty = true;
}

/* Reactor 0's tick: the probes due, then (later in the turn) the removed
 * backends that are drained leave. */
static void health_timer(struct ig_rx *rx, uint64_t now_ms, void *arg IG_UNUSED)
{
	ig_health_tick(rx->gw, now_ms);
}

static void reap_timer(struct ig_rx *rx, uint64_t now_ms IG_UNUSED, void *arg IG_UNUSED)
{
	ig_health_reap(rx->gw);
}

int ig_health_init(struct ig_gw *gw)
{
	for (size_t i = 0; i < gw->fleet.n; i++)
		if (ig_health_add(gw, gw->fleet.v[i]) < 0)
			return -1;
	if (ig_rx_every(gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_HEALTH, health_timer, NULL) < 0 ||
	    ig_rx_every(gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_REAP, reap_timer, NULL) < 0)
		return -1;
	return 0;
}

void ig_health_free(struct ig_gw *gw)
{
	for (size_t i = 0; i < gw->fleet.n; i++)
		ig_health_remove(gw, gw->fleet.v[i]);
}

static size_t on_probe_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct ig_probe *p = userdata;
	size_t n = size * nmemb;
	if (p->body.len + n > 4 * 1024 * 1024 || ig_buf_append(&p->body, ptr, n) < 0)
		return 0;
	return n;
}

static void start_probe(struct ig_gw *gw, struct ig_probe *p, enum probe_what what)
{
	char url[2048];
	const struct ig_conf *cfg = gw->cfg;
	const char *load_path = cfg->load_path_auto ? auto_load_paths[p->load_path] : cfg->load_path;

	snprintf(url, sizeof(url), "%s%s", p->b->url,
		 what == PROBE_HEALTH ? cfg->health_path : what == PROBE_MODELS ? "/v1/models"
		 : what == PROBE_INFO ? info_paths[p->info_path] : load_path);
	if (p->xfer.easy)
		curl_easy_reset(p->xfer.easy);
	else
		p->xfer.easy = curl_easy_init();
	ig_buf_reset(&p->body);
	p->what = what;
	curl_easy_setopt(p->xfer.easy, CURLOPT_URL, url);
	curl_easy_setopt(p->xfer.easy, CURLOPT_WRITEFUNCTION, on_probe_body);
	curl_easy_setopt(p->xfer.easy, CURLOPT_WRITEDATA, p);
	curl_easy_setopt(p->xfer.easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(p->xfer.easy, CURLOPT_TIMEOUT_MS, cfg->health_timeout_ms);
	curl_easy_setopt(p->xfer.easy, CURLOPT_CONNECTTIMEOUT_MS,
			 cfg->health_timeout_ms < cfg->connect_ms ? cfg->health_timeout_ms : cfg->connect_ms);
	curl_easy_setopt(p->xfer.easy, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	/* SGLang's API-key middleware exempts only /health*, /ready* and
	 * /metrics (python/sglang/srt/utils/auth.py): /v1/models and the load
	 * paths need the key like any request. */
	curl_slist_free_all(p->headers);
	p->headers = ig_upstream_backend_key(NULL, cfg);
	if (p->headers)
		curl_easy_setopt(p->xfer.easy, CURLOPT_HTTPHEADER, p->headers);
	p->started_us = ig_now_us();
	if (ig_upstream_start(ig_gw_home(gw), &p->xfer) == CURLM_OK)
		p->b->probing = 1;
}

void ig_health_tick(struct ig_gw *gw, uint64_t now_ms)
{
	for (size_t i = 0; i < gw->fleet.n; i++) {
		struct ig_probe *p = gw->fleet.v[i]->probe;
		if (p && !p->xfer.running && now_ms >= p->b->next_probe_ms) {
			p->load_tries = 0; /* a round: health, models, load */
			start_probe(gw, p, PROBE_HEALTH);
		}
	}
}

static void set_state(struct ig_gw *gw, struct ig_backend *b, int state, const char *why)
{
	if (atomic_load(&b->state) == state)
		return;
	atomic_store(&b->state, state);
	gw->models_dirty = true; /* unknown lists count as up or down (scheduler.h) */
	if (state == IG_BACKEND_UP) {
		b->seen_up = 1;
		ig_log_info("backend %s is up (%s); %zu of %zu healthy", b->key, why, ig_backend_fleet_healthy(&gw->fleet),
			    gw->fleet.n);
		gw->drain_pending = true;
	} else {
		ig_log_warn("backend %s is down (%s); %zu of %zu healthy", b->key, why, ig_backend_fleet_healthy(&gw->fleet),
			    gw->fleet.n);
		/* It may come back restarted with another capacity: learn anew;
		 * and with an empty cache: cache-aware forgets what it sent. */
		ig_capacity_reset(&b->learn, gw->cfg->load_from_backend);
		ig_backend_publish_slots(b);
		ig_backend_fleet_gone(&gw->fleet, b);
	}
}

static void probe_result(struct ig_gw *gw, struct ig_backend *b, bool ok, const char *why)
{
	if (ok) {
		b->consec_fail = 0;
		b->consec_ok++;
		/* The very first success counts as `rise`: a gateway that starts
		 * next to healthy backends serves at once. */
		if (b->consec_ok < gw->cfg->health_rise && b->seen_up)
			return;
		if (atomic_load(&b->state) != IG_BACKEND_UP && !b->models_conf && !b->models && !b->models_any) {
			/* Up only with its model list read: a backend counted
			 * healthy (/health) is one a request for its model can
			 * be sent to. probe_done reads the list next. */
			b->coming_up = true;
			gw->models_dirty = true; /* it counts as up for the lists (scheduler.h) */
			snprintf(b->up_why, sizeof(b->up_why), "%s", why);
			return;
		}
		set_state(gw, b, IG_BACKEND_UP, why);
	} else {
		b->consec_ok = 0;
		b->consec_fail++;
		if (b->coming_up)
			gw->models_dirty = true;
		b->coming_up = false;
		if (b->consec_fail >= gw->cfg->health_fall)
			set_state(gw, b, IG_BACKEND_DOWN, why);
		else if (!b->seen_up && b->consec_fail == 1 && b->dp_rank <= 0)
			ig_log_warn("backend %s not reachable yet (%s)", b->url, why);
	}
}

/* The ids of a /v1/models "data" array, in order, joined by ",". */
static char *model_ids(json_t *data)
{
	struct ig_buf ids;
	size_t i;
	json_t *m;
	ig_buf_init(&ids);
	json_array_foreach(data, i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));
		if (id)
			ig_buf_printf(&ids, "%s%s", i ? "," : "", id);
	}
	ig_buf_append(&ids, "", 1);
	char *s = strdup(ig_buf_head(&ids));
	ig_buf_free(&ids);
	return s;
}

/* What /v1/models answered: the list of models a backend serves (unless
 * configured). An error answer (a server without /v1/models) makes it a
 * backend for any model; a failed transfer teaches nothing. */
static void store_models(struct ig_gw *gw, struct ig_backend *b, CURLcode result, long status, struct ig_buf *body)
{
	if (result != CURLE_OK)
		return;
	json_t *root = status == 200 ? json_loadb(body->data ? body->data : "", body->len, 0, NULL) : NULL;
	json_t *data = json_object_get(root, "data");
	if (!json_is_array(data)) {
		if (!b->models_any && !b->models_conf && b->dp_rank <= 0)
			ig_log_warn("backend %s: GET /v1/models answered HTTP %ld without a list of models; it is sent "
				    "requests for any model (name its models in the configuration: URL#MODEL)",
				    b->url, status);
		if (!b->models_any)
			gw->models_dirty = true;
		b->models_any = true;
		json_decref(root);
		return;
	}
	char *before = b->models ? model_ids(b->models) : NULL, *after = model_ids(data);
	if (!before || strcmp(before, after) != 0 || b->models_any) {
		if (!b->models_conf && b->dp_rank <= 0)
			ig_log_info("backend %s serves: %s", b->url, *after ? after : "(no model)");
		gw->models_dirty = true;
	}
	free(before);
	free(after);
	b->models_any = false;
	json_decref(b->models);
	b->models = json_incref(data);
	json_decref(root);
}

/* The model list's probe ended: the list taken, and a backend coming up
 * is up, whatever the list's transfer did (the probe passed; a list not
 * read stays unknown, and requests for a model no one else names wait
 * for it: scheduler.h). */
static void models_read(struct ig_gw *gw, struct ig_backend *b, CURLcode result, long status, struct ig_buf *body,
			uint64_t now)
{
	store_models(gw, b, result, status, body);
	b->models_at_ms = now;
	if (b->coming_up) {
		b->coming_up = false;
		set_state(gw, b, IG_BACKEND_UP, b->up_why);
	}
}

/* A load report: the backend's load beyond ours, and the slot count it
 * states or shows, unless it is stale (see ig_capacity_report). */
static void take_load(struct ig_gw *gw, struct ig_backend *b, long running, long waiting, long capacity)
{
	long ours = atomic_load(&b->inflight);
	long peak = atomic_exchange(&b->inflight_peak, ours);
	unsigned long done = atomic_load(&b->served) + atomic_load(&b->failures) + atomic_load(&b->aborted);
	long load = running < 0 ? -1 : running + waiting;
	long cur = b->learn.cur, reported = b->learn.reported, ramp = b->learn.ramp;
	bool stale;
	long learned = ig_capacity_report(&b->learn, running, waiting, capacity, ours, peak, done, &stale);

	b->reported_load = load;
	b->reported_waiting = waiting; /* -1 with running: ig_loadreport_parse gives both or neither */
	/* The backend's count includes ours: only the rest is external. The
	 * report was taken at some moment since the previous one, when we may
	 * have had up to `peak` there: the rest beyond that is surely not ours
	 * (weighed against `ours`, a request of ours that ended just after the
	 * report showed as another client's load, and moved session's
	 * sessions on an idle fleet). A stale report's is not believed either. */
	long ext = load - (peak > ours ? peak : ours);
	atomic_store(&b->external_load, load >= 0 && ext > 0 && !stale ? ext : 0);
	if (learned == cur && b->learn.ramp == ramp)
		return;
	ig_backend_publish_slots(b);
	if (b->learn.reported != reported && learned == b->learn.reported)
		ig_log_info("backend %s states it runs %ld requests at once (max_running_requests): at most %ld in "
			    "flight from here", b->key, b->learn.reported, learned);
	else if (learned < cur || (cur == 0 && learned > 0))
		ig_log_info("backend %s queues: it runs %ld requests at once (%ld waiting); "
			    "at most %ld in flight from here", b->key, running, waiting, learned);
	else if (learned > cur)
		ig_log_debug("backend %s: no queue at %ld in flight, now up to %ld", b->key, peak, learned);
	else
		ig_log_debug("backend %s: no queue at %ld in flight, its capacity not known yet: up to %ld", b->key,
			     peak, b->learn.ramp);
	if (learned > cur || b->learn.ramp > ramp)
		gw->drain_pending = true;
}

/* What a server's settings say of its scheduling by priority (SGLang's
 * ServerArgs at the top level of /server_info: enable_priority_scheduling,
 * schedule_low_priority_values_first, disable_priority_preemption,
 * priority_scheduling_preemption_threshold; python/sglang/srt/server_args.py).
 * Preemption is on by default with priority scheduling
 * (python/sglang/srt/managers/scheduler.py init_schedule_policy). An answer
 * without them (another server) leaves nothing learned; a failed transfer
 * changes nothing. Logged when it changes. */
static void take_info(struct ig_backend *b, CURLcode result, long status, struct ig_buf *body)
{
	if (result != CURLE_OK)
		return;
	json_t *root = status == 200 ? json_loadb(body->data ? body->data : "", body->len, 0, NULL) : NULL;
	json_t *on = json_object_get(root, "enable_priority_scheduling");
	/* SGLang's ServerArgs: an adapter's request names it in "lora_path"
	 * (sched/adapters.c); vLLM's /server_info (dev mode) has no model_path */
	atomic_store(&b->lora_by_path, json_is_string(json_object_get(root, "model_path")));
	/* and its adapters' GPU pool (max_loras_per_batch buffers,
	 * python/sglang/srt/lora/mem_pool.py): what sched/adapters.c keeps there */
	json_t *per_batch = json_object_get(root, "max_loras_per_batch");
	if (json_is_true(json_object_get(root, "enable_lora")) && json_is_integer(per_batch) &&
	    json_integer_value(per_batch) > 0 && json_integer_value(per_batch) <= 1000000)
		atomic_store(&b->max_loras_learned, (long)json_integer_value(per_batch));
	unsigned sched = 0;
	long threshold = -1;
	if (json_is_true(on)) {
		sched = json_is_true(json_object_get(root, "schedule_low_priority_values_first")) ? IG_PRIO_SMALLER_FIRST
												  : IG_PRIO_LARGER_FIRST;
		if (!json_is_true(json_object_get(root, "disable_priority_preemption")))
			sched |= IG_PRIO_PREEMPTS;
		json_t *t = json_object_get(root, "priority_scheduling_preemption_threshold");
		threshold = json_is_integer(t) && json_integer_value(t) >= 0 ? (long)json_integer_value(t) : 10;
	}
	json_decref(root);
	unsigned before = (unsigned)atomic_exchange(&b->prio_sched, (int)sched);
	long tbefore = atomic_exchange(&b->prio_threshold, threshold);
	if ((before == sched && (tbefore == threshold || !sched)) || b->dp_rank > 0)
		return;
	long step;
	int field = ig_backend_priority_field(b, &step);
	if (!sched)
		ig_log_info("backend %s does not schedule by priority (no enable_priority_scheduling in its settings)%s",
			    b->url, field ? "" : ": no class is sent to it");
	else {
		char pre[120] = ", no preemption";
		if (sched & IG_PRIO_PREEMPTS)
			snprintf(pre, sizeof(pre), ", a waiting request preempting a running one more than %ld below",
				 threshold);
		ig_log_info("backend %s schedules by priority (%s values first%s): %s", b->url,
			    sched & IG_PRIO_SMALLER_FIRST ? "smaller" : "larger", pre,
			    field ? "the class goes to it as \"priority\"" : "priority_field \"none\": no class is sent");
	}
}

static void probe_done(struct ig_xfer *x, CURLcode result)
{
	struct ig_probe *p = IG_CONTAINER_OF(x, struct ig_probe, xfer);
	struct ig_gw *gw = p->gw;
	struct ig_backend *b = p->b;
	long status = 0;
	uint64_t now = ig_now_ms();
	char why[200];

	curl_easy_getinfo(p->xfer.easy, CURLINFO_RESPONSE_CODE, &status);
	if (p->what == PROBE_LOAD) {
		long running = -1, waiting = -1, capacity = -1;
		if (result == CURLE_OK && status == 200)
			ig_loadreport_parse(ig_buf_head(&p->body), ig_buf_pending(&p->body), &running, &waiting,
					    &capacity);
		/* vLLM's LoRA limit, a label of its lora_requests_info gauge
		 * (vllm/v1/metrics/loggers.py): what sched/adapters.c keeps there */
		static const char tag[] = "lora_requests_info{max_lora=\"";
		const char *ml = result == CURLE_OK && status == 200
					 ? memmem(ig_buf_head(&p->body), ig_buf_pending(&p->body), tag, sizeof(tag) - 1)
					 : NULL;
		long max_lora = 0; /* the backend's text: digits up to the buffer's end, bounded */
		for (const char *d = ml ? ml + sizeof(tag) - 1 : NULL, *end = ig_buf_head(&p->body) + ig_buf_pending(&p->body);
		     d && d < end && *d >= '0' && *d <= '9' && max_lora <= 1000000; d++)
			max_lora = max_lora * 10 + (*d - '0');
		for (int r = 0; ml && max_lora <= 1000000 && r < b->nranks; r++) /* each rank's engine has as many */
			atomic_store(&ig_backend_rank(b, r)->max_loras_learned, max_lora);
		if (gw->cfg->load_path_auto) {
			if (running >= 0) {
				b->load_path = auto_load_paths[p->load_path];
			} else if (result == CURLE_OK && ++p->load_tries < N_AUTO_LOAD_PATHS) {
				/* the next one at once: a backend's capacity is
				 * known from its first round of probes */
				p->load_path = (p->load_path + 1) % N_AUTO_LOAD_PATHS;
				start_probe(gw, p, PROBE_LOAD);
				return;
			} else {
				p->load_path = (p->load_path + 1) % N_AUTO_LOAD_PATHS;
			}
		} else {
			b->load_path = NULL; /* the configured one (a reload may free its string) */
		}
		/* Answered, without a load on any path: no capacity will be
		 * learned, so no cap meanwhile. A failed transfer tells nothing. */
		bool none = running < 0 && result == CURLE_OK;
		if (none && !p->no_reports)
			ig_log_warn("backend %s answers no load report (%s): its capacity cannot be learned; it gets no "
				    "in-flight limit but its max_inflight", b->url,
				    gw->cfg->load_path_auto ? "/v1/loads, /metrics, /get_load" : gw->cfg->load_path);
		if (running >= 0 || none)
			p->no_reports = none;
		for (int r = 0; r < b->nranks; r++) {
			struct ig_backend *rb = ig_backend_rank(b, r);
			if (none && rb->learn.ramp > 0) {
				ig_capacity_no_reports(&rb->learn);
				ig_backend_publish_slots(rb);
				gw->drain_pending = true;
			}
			/* a rank's own part of the server's report */
			long rr = running, rw = waiting, rc = capacity;
			if (b->nranks > 1 && running >= 0)
				ig_loadreport_parse_rank(ig_buf_head(&p->body), ig_buf_pending(&p->body), r, &rr, &rw, &rc);
			take_load(gw, rb, rr, rw, rc);
		}
	} else if (p->what == PROBE_INFO) {
		if (result == CURLE_OK && status == 404 && p->info_path + 1 < sizeof(info_paths) / sizeof(info_paths[0])) {
			p->info_path++; /* an older SGLang */
			start_probe(gw, p, PROBE_INFO);
			return;
		}
		for (int r = 0; r < b->nranks; r++)
			take_info(ig_backend_rank(b, r), result, status, &p->body);
		start_probe(gw, p, PROBE_MODELS);
		return;
	} else if (p->what == PROBE_MODELS) {
		for (int r = 0; r < b->nranks; r++)
			models_read(gw, ig_backend_rank(b, r), result, status, &p->body, now);
		if (gw->cfg->load_from_backend) {
			start_probe(gw, p, PROBE_LOAD);
			return;
		}
	} else {
		bool ok = result == CURLE_OK && status >= 200 && status < 300;
		/* A probe that timed out while the backend kept answering our
		 * requests is slow, not failed: SGLang's /health runs a generation
		 * and, when busy, waits for any output (http_server.py
		 * health_generate), which a long prefill can delay. It counts
		 * neither way; the requests themselves feed the passive checks. */
		bool slow = false;
		for (int r = 0; r < b->nranks; r++) /* any rank's answers */
			slow |= ig_backend_rank(b, r)->last_io_ms >= p->started_us / 1000;
		slow &= result == CURLE_OPERATION_TIMEDOUT && atomic_load(&b->state) == IG_BACKEND_UP;
		if (b->last_probe_ms == 0)
			gw->models_dirty = true; /* no longer "not probed yet" (scheduler.h) */
		b->last_probe_ms = now;
		b->last_probe_ok = ok;
		b->last_probe_status = status;
		b->last_probe_latency_ms = (double)(ig_now_us() - p->started_us) / 1000.0;
		if (slow)
			snprintf(why, sizeof(why), "probe: no answer in %ld ms, but requests are answered: "
				 "not counted as a failure", gw->cfg->health_timeout_ms);
		else if (result != CURLE_OK)
			snprintf(why, sizeof(why), "probe: %s", curl_easy_strerror(result));
		else
			snprintf(why, sizeof(why), "probe: HTTP %ld in %.1f ms", status, b->last_probe_latency_ms);
		snprintf(b->last_probe_error, sizeof(b->last_probe_error), "%s", ok ? "" : why);
		for (int r = 0; r < b->nranks; r++) { /* the server's probe is each rank's */
			struct ig_backend *rb = ig_backend_rank(b, r);
			if (rb != b) {
				rb->last_probe_ms = b->last_probe_ms;
				rb->last_probe_ok = b->last_probe_ok;
				rb->last_probe_status = b->last_probe_status;
				rb->last_probe_latency_ms = b->last_probe_latency_ms;
				memcpy(rb->last_probe_error, b->last_probe_error, sizeof(rb->last_probe_error));
			}
			if (slow) {
				atomic_fetch_add(&rb->probes_slow, 1);
			} else {
				atomic_fetch_add(ok ? &rb->probes_ok : &rb->probes_failed, 1);
				probe_result(gw, rb, ok, why);
			}
		}
		if (slow)
			ok = true; /* for what follows: the load report is still wanted */
		if (ok && (b->coming_up || (atomic_load(&b->state) == IG_BACKEND_UP &&
					    ((!b->models && !b->models_any) || now - b->models_at_ms >= MODELS_REFRESH_MS)))) {
			/* its settings first, with the list (a restart may change
			 * them): it goes up knowing how it schedules */
			p->info_path = 0;
			start_probe(gw, p, b->priority_field == 3 ? PROBE_MODELS : PROBE_INFO);
			return;
		}
		if (ok && gw->cfg->load_from_backend) {
			start_probe(gw, p, PROBE_LOAD);
			return;
		}
		for (int r = 0; !ok && r < b->nranks; r++)
			atomic_store(&ig_backend_rank(b, r)->external_load, 0);
	}
	b->probing = 0;
	b->next_probe_ms = now + (uint64_t)gw->cfg->health_interval_ms;
}

void ig_health_passive_ok(struct ig_gw *gw IG_UNUSED, struct ig_backend *b)
{
	b->consec_fail = 0;
	b->breaker_fails = 0;
	if (atomic_load(&b->breaker_until_ms)) {
		atomic_store(&b->breaker_until_ms, 0);
		b->breaker_trips = 0;
		ig_log_info("backend %s: circuit breaker closed (a trial request succeeded)", b->key);
	}
}

/* A request to b failed: breaker.failures in a row open its breaker; a
 * failed trial (half-open) opens it again for twice as long, up to 8x. A
 * failure of a request sent before it opened changes nothing. */
static void breaker_fail(struct ig_gw *gw, struct ig_backend *b, const char *why)
{
	uint64_t until = atomic_load(&b->breaker_until_ms), now = ig_now_ms();
	if (gw->cfg->breaker_failures <= 0 || (until && now < until))
		return;
	if (!until && ++b->breaker_fails < gw->cfg->breaker_failures)
		return;
	int shift = b->breaker_trips < 3 ? b->breaker_trips : 3;
	uint64_t ms = (uint64_t)gw->cfg->breaker_open_ms << shift;
	b->breaker_trips++;
	atomic_fetch_add(&b->breaker_opened, 1);
	atomic_store(&b->breaker_until_ms, now + ms);
	ig_log_warn("backend %s: circuit breaker open for %llu ms (%s after %d request failures in a row; last: %s)",
		    b->key, (unsigned long long)ms, until ? "a trial request failed" : "opened", b->breaker_fails, why);
}

void ig_health_passive_fail(struct ig_gw *gw, struct ig_backend *b, enum ig_upstream_error e,
			    const char *detail)
{
	char why[256];
	snprintf(why, sizeof(why), "request: %s", detail);
	b->consec_ok = 0;
	b->consec_fail++;
	breaker_fail(gw, b, why);
	/* A refused connection is not a fluke: eject at once, and every rank
	 * of the server with it (they share its port). */
	if (e == IG_UPERR_CONNECT)
		for (int r = 0; r < b->server->nranks; r++)
			set_state(gw, ig_backend_rank(b->server, r), IG_BACKEND_DOWN, why);
	else if (b->consec_fail >= gw->cfg->health_fall)
		set_state(gw, b, IG_BACKEND_DOWN, why);
}

void ig_health_reap(struct ig_gw *gw)
{
	for (size_t i = gw->fleet.n; i-- > 0;) {
		struct ig_backend *b = gw->fleet.v[i];
		if (atomic_load(&b->admin) != IG_ADMIN_REMOVING || atomic_load(&b->inflight) > 0)
			continue;
		ig_log_info("backend %s (id %d) removed", b->key, b->id);
		ig_backend_fleet_gone(&gw->fleet, b);
		ig_health_remove(gw, b);
		ig_backend_fleet_remove(&gw->fleet, b);
	}
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag health_rows[] = {
	{.name = "--health-path", .key = "health.path", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(health_path),
	 .def = "/health", .metavar = "PATH", .help = "path probed on each backend"},
	{.name = "--health-interval-ms", .key = "health.interval_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(health_interval_ms), .min = 50, .max = 3600000, .def = "2000", .metavar = "N",
	 .help = "time between probes of one backend"},
	{.name = "--health-timeout-ms", .key = "health.timeout_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(health_timeout_ms), .min = 10, .max = 600000, .def = "5000", .metavar = "N",
	 .help = "a probe slower than this fails, unless the backend is answering requests meanwhile "
		 "(SGLang's /health runs a generation and takes over 1 s)"},
	{.name = "--health-rise", .key = "health.rise", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(health_rise), .min = 1,
	 .max = 100, .def = "2", .metavar = "N", .help = "consecutive successes that bring a backend up"},
	{.name = "--health-fall", .key = "health.fall", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(health_fall), .min = 1,
	 .max = 100, .def = "3", .metavar = "N", .help = "consecutive failures that take a backend down"},
};
const struct ig_conf_part ig_health_conf = IG_CONF_PART(health_rows);

/* health.path: a path. */
void ig_health_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	if (cfg->health_path[0] != '/')
		ig_flags_problem(errs, "health.path: '%s' must start with '/'", cfg->health_path);
}
