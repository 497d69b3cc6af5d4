/* LoRA adapters as a resource (adapters.h): where each is, where its
 * requests go, loads and unloads. The engines' endpoints:
 * - vLLM: POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
 *   /v1/unload_lora_adapter {"lora_name"}, plain text on success, 400
 *   "... has already been loaded", 404 when the routes are off (without
 *   VLLM_ALLOW_RUNTIME_LORA_UPDATING) or the adapter is not there
 *   (vllm-project/vllm vllm/entrypoints/openai/serving_models.py
 *   load_lora_adapter, unload_lora_adapter). A request names the adapter by
 *   "model", as it is.
 * - SGLang: POST /load_lora_adapter and /unload_lora_adapter, the same
 *   fields, a LoRAUpdateOutput {"success", "error_message"} with 200 or 400
 *   (sgl-project/sglang python/sglang/srt/entrypoints/http_server.py). A
 *   server whose /v1/load_lora_adapter is a 404 is asked there.
 * A server's GPU holds max_loras adapters and swaps the least recently used
 * (vllm/lora/model_manager.py LRUCacheLoRAModelManager): the gateway keeps
 * no more than that registered on a server, so its adapters are not swapped
 * in and out under its requests. */
#include "config.h"
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/backend.h"
#include "gateway.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "net/upstream.h"
#include "obs/stats.h"
#include "sched/adapters.h"
#include "sched/scheduler.h"

/* A load that failed: that server is not asked for that adapter again
 * before this (its waiting requests would ask at once, and again). */
#define FAILED_PAUSE_MS 5000
/* A transfer's limit: a load reads the adapter's weights from disk. */
#define LOAD_TIMEOUT_MS 120000

/* One adapter on one server, as this gateway knows it. */
struct slot {
	int backend;             /* its id */
	char *url;               /* its URL (the metrics' label, after it left) */
	bool resident;           /* loaded, as our last load or unload left it */
	uint64_t changed_ms;     /* when ours changed it, 0 never: a /v1/models list
				  * read before is stale */
	bool busy;               /* a load or an unload of ours under way */
	uint64_t used_us;        /* its last request sent there (the LRU; microseconds: two
				  * uses a millisecond apart are ordered) */
	long inflight;           /* its requests of ours there now */
	uint64_t failed_until_ms; /* FAILED_PAUSE_MS after a failed load */
	uint64_t loads_ok, loads_failed, unloads_ok, unloads_failed;
	double load_s;           /* the successful loads' seconds, in total */
};

struct adapter {
	char *name;
	char *base;              /* its base model */
	char *path;              /* where a server loads it from, NULL not known */
	bool loading;            /* a load of it (or the unload before) under way */
	struct slot *s;
	size_t ns, caps;
};

/* A load or an unload, on reactor 0. */
struct job {
	struct ig_xfer xfer;
	struct ig_adapters *as;
	size_t a;                /* the adapter (unloaded, or loaded) */
	size_t then;             /* after an unload: the adapter loaded next, or SIZE_MAX */
	int backend;
	bool unload;
	bool sglang;             /* SGLang's paths */
	bool started;
	uint64_t started_us;
	char *payload;
	struct curl_slist *headers;
	struct ig_buf body;
	struct job *next;
};

struct ig_adapters {
	struct ig_gw *gw;
	struct adapter *v;
	size_t n, cap;
	struct job *jobs;        /* pending or running */
	int *sglang;             /* backend ids whose load paths are SGLang's */
	size_t nsglang;
};

long ig_adapters_max(const struct ig_backend *b)
{
	return b->max_loras > 0 ? b->max_loras : atomic_load(&b->max_loras_learned);
}

/* ---- what is known ---- */

static struct adapter *add(struct ig_adapters *as, const char *name, const char *base, const char *path)
{
	struct adapter *v = ig_grow(as->v, &as->cap, as->n, sizeof(*v), 8);
	if (!v)
		return NULL;
	as->v = v;
	struct adapter *a = &v[as->n];
	memset(a, 0, sizeof(*a));
	a->name = strdup(name);
	a->base = strdup(base);
	a->path = path ? strdup(path) : NULL;
	if (!a->name || !a->base || (path && !a->path)) {
		free(a->name);
		free(a->base);
		free(a->path);
		return NULL;
	}
	as->n++;
	return a;
}

/* The adapter named `name`: known, else configured, else listed by a
 * server with a parent (vLLM: "root" is its path). make: add it then. */
static struct adapter *find(struct ig_adapters *as, const char *name, bool make)
{
	for (size_t i = 0; name && i < as->n; i++)
		if (strcmp(as->v[i].name, name) == 0)
			return &as->v[i];
	if (!make || !name)
		return NULL;
	const struct ig_conf *cfg = as->gw->cfg;
	for (size_t i = 0; i < cfg->n_models; i++)
		for (size_t j = 0; j < cfg->models[i].n_adapters; j++)
			if (strcmp(cfg->models[i].adapter_names[j], name) == 0)
				return add(as, name, cfg->models[i].name, cfg->models[i].adapter_paths[j]);
	const struct ig_fleet *fleet = &as->gw->fleet;
	for (size_t i = 0; i < fleet->n; i++) {
		size_t k;
		json_t *m;
		json_array_foreach(fleet->v[i]->models, k, m) {
			const char *id = json_string_value(json_object_get(m, "id"));
			const char *parent = json_string_value(json_object_get(m, "parent"));
			if (id && parent && strcmp(id, name) == 0)
				return add(as, name, parent, json_string_value(json_object_get(m, "root")));
		}
	}
	return NULL;
}

static struct slot *slot_of(struct adapter *a, const struct ig_backend *b, bool make)
{
	for (size_t i = 0; i < a->ns; i++)
		if (a->s[i].backend == b->id)
			return &a->s[i];
	if (!make)
		return NULL;
	struct slot *v = ig_grow(a->s, &a->caps, a->ns, sizeof(*v), 4);
	if (!v)
		return NULL;
	a->s = v;
	struct slot *s = &v[a->ns];
	memset(s, 0, sizeof(*s));
	s->backend = b->id;
	if (!(s->url = strdup(b->url)))
		return NULL;
	a->ns++;
	return s;
}

/* Whether b holds a: its list when read after our last change to it
 * (a restart empties a server), else what our last load or unload left. */
static bool resident(const struct ig_conf *cfg, struct adapter *a, const struct ig_backend *b)
{
	struct slot *s = slot_of(a, b, false);
	if (s && s->busy)
		return false;
	bool listed = ig_backend_names_model(b, a->name);
	if (!s || !s->changed_ms)
		return listed;
	/* a list read meanwhile may have been asked for before the change */
	if (!b->models_conf && b->models && b->models_at_ms > s->changed_ms + (uint64_t)cfg->health_timeout_ms)
		return listed;
	return s->resident;
}

/* Every adapter a server lists is known (so that it counts in held()). */
static void learn_listed(struct ig_adapters *as)
{
	const struct ig_fleet *fleet = &as->gw->fleet;
	for (size_t i = 0; i < fleet->n; i++) {
		size_t k;
		json_t *m;
		json_array_foreach(fleet->v[i]->models, k, m) {
			const char *id = json_string_value(json_object_get(m, "id"));
			if (id && json_is_string(json_object_get(m, "parent")))
				find(as, id, true);
		}
	}
}

/* The adapters b holds or is being given (learn_listed before). */
static long held(struct ig_adapters *as, const struct ig_backend *b)
{
	long n = 0;
	for (size_t i = 0; i < as->n; i++) {
		struct slot *s = slot_of(&as->v[i], b, false);
		n += resident(as->gw->cfg, &as->v[i], b) || (s && s->busy);
	}
	return n;
}

/* b's least recently used adapter with no request of ours there nor any
 * waiting in its queue (one just loaded for its waiting requests would go
 * before they ran, and come back: a swap each way), to make room; NULL:
 * none. */
static struct adapter *victim(struct ig_adapters *as, const struct ig_backend *b)
{
	struct adapter *lru = NULL;
	uint64_t lru_us = 0;
	for (size_t i = 0; i < as->n; i++) {
		struct adapter *a = &as->v[i];
		struct slot *s = slot_of(a, b, false);
		const struct ig_model *m = ig_sched_find(&as->gw->sched, a->name);
		if (a->loading || !resident(as->gw->cfg, a, b) || (s && s->inflight > 0) || (m && m->qlen > 0))
			continue;
		uint64_t used = s ? s->used_us : 0;
		if (!lru || used < lru_us) {
			lru = a;
			lru_us = used;
		}
	}
	return lru;
}

/* ---- loads and unloads ---- */

static bool is_sglang(const struct ig_adapters *as, int id)
{
	for (size_t i = 0; i < as->nsglang; i++)
		if (as->sglang[i] == id)
			return true;
	return false;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct job *j = userdata;
	size_t n = size * nmemb;
	if (j->body.len + n > 64 * 1024 || ig_buf_append(&j->body, ptr, n) < 0)
		return 0;
	return n;
}

static void job_done(struct ig_xfer *x, CURLcode result);

static void job_free(struct job *j)
{
	if (j->xfer.easy)
		curl_easy_cleanup(j->xfer.easy);
	curl_slist_free_all(j->headers);
	free(j->payload);
	ig_buf_free(&j->body);
	free(j);
}

/* A new job, pending until the timer starts it. Returns 0 or -1. */
static int job_add(struct ig_adapters *as, size_t a, const struct ig_backend *b, bool unload, size_t then)
{
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return -1;
	j->as = as;
	j->a = a;
	j->then = then;
	j->backend = b->id;
	j->unload = unload;
	j->sglang = is_sglang(as, b->id);
	j->xfer.done = job_done;
	ig_buf_init(&j->body);
	j->next = as->jobs;
	as->jobs = j;
	return 0;
}

/* Starts j on reactor 0 (the caller is). Returns 0 or -1. */
static int job_start(struct job *j)
{
	struct ig_adapters *as = j->as;
	const struct ig_conf *cfg = as->gw->cfg;
	const struct ig_backend *b = ig_backend_fleet_find_id(&as->gw->fleet, j->backend);
	const struct adapter *a = &as->v[j->a];
	if (!b)
		return -1;
	char url[2048];
	snprintf(url, sizeof(url), "%s%s%s_lora_adapter", b->url, j->sglang ? "/" : "/v1/", j->unload ? "unload" : "load");
	json_t *o = j->unload ? json_pack("{s:s}", "lora_name", a->name)
			      : json_pack("{s:s, s:s}", "lora_name", a->name, "lora_path", a->path ? a->path : "");
	free(j->payload);
	j->payload = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	if (!j->payload)
		return -1;
	if (j->xfer.easy)
		curl_easy_reset(j->xfer.easy);
	else if (!(j->xfer.easy = curl_easy_init()))
		return -1;
	ig_buf_reset(&j->body);
	curl_slist_free_all(j->headers);
	j->headers = ig_upstream_backend_key(curl_slist_append(NULL, "Content-Type: application/json"), cfg);
	CURL *e = j->xfer.easy;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, j->payload);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->headers);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)LOAD_TIMEOUT_MS);
	curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	j->started = true;
	j->started_us = ig_now_us();
	return ig_upstream_start(ig_gw_home(as->gw), &j->xfer) == CURLM_OK ? 0 : -1;
}

static void unlink_job(struct ig_adapters *as, struct job *j)
{
	for (struct job **p = &as->jobs; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			return;
		}
}

/* What the answer says: 1 done (or already so), 0 refused, -1 the route
 * is not there (vLLM's 404 {"detail": "Not Found"}: try SGLang's). */
static int outcome(struct job *j, CURLcode result, long status)
{
	ig_buf_printf(&j->body, "%s", ""); /* a NUL after the text, not counted in it */
	const char *body = ig_buf_head(&j->body);
	if (result != CURLE_OK)
		return 0;
	if (!j->sglang && status == 404 && strstr(body, "\"detail\""))
		return -1;
	if (status == 200) {
		json_t *o = json_loadb(body, ig_buf_pending(&j->body), 0, NULL);
		json_t *ok = json_object_get(o, "success");
		int r = !ok || json_is_true(ok);
		json_decref(o);
		return r;
	}
	/* loaded already (vLLM 400, SGLang's "already exists"); unloaded
	 * already (vLLM's 404 naming the adapter, SGLang's "does not exist") */
	if (!j->unload && (strstr(body, "already been loaded") || strstr(body, "already exists")))
		return 1;
	if (j->unload && (status == 404 || strstr(body, "does not exist")))
		return 1;
	return 0;
}

/* j ended with `status` (on reactor 0, the lock held): the slot learns, a
 * load follows an unload, the requests waiting are looked at again. */
static void job_end(struct job *j, CURLcode result, long status)
{
	struct ig_adapters *as = j->as;
	struct ig_gw *gw = as->gw;
	int r = outcome(j, result, status);
	const struct ig_backend *b = ig_backend_fleet_find_id(&gw->fleet, j->backend);
	struct adapter *a = &as->v[j->a];
	if (r < 0 && b) {
		int *v = realloc(as->sglang, (as->nsglang + 1) * sizeof(*v));
		if (v) {
			as->sglang = v;
			v[as->nsglang++] = b->id;
			j->sglang = true;
			if (job_start(j) == 0)
				return;
		}
	}
	struct slot *s = b ? slot_of(a, b, true) : NULL;
	uint64_t now = ig_now_ms();
	double secs = (double)(ig_now_us() - j->started_us) / 1e6;
	unlink_job(as, j);
	if (s) {
		s->busy = false;
		s->changed_ms = now;
		if (r > 0)
			s->resident = !j->unload;
		if (j->unload)
			*(r > 0 ? &s->unloads_ok : &s->unloads_failed) += 1;
		else if (r > 0) /* as if just used: not the next one out before its requests ran */
			s->loads_ok++, s->load_s += secs, s->used_us = ig_now_us();
		else
			s->loads_failed++, s->failed_until_ms = now + FAILED_PAUSE_MS;
	}
	const char *what = result != CURLE_OK ? curl_easy_strerror(result) : ig_buf_head(&j->body);
	if (r > 0)
		ig_log_info("adapters: %s '%s' on %s in %.3f s", j->unload ? "unloaded" : "loaded", a->name,
			    b ? b->url : "?", secs);
	else
		ig_log_warn("adapters: %s of '%s' on %s failed (HTTP %ld): %.200s", j->unload ? "unload" : "load", a->name,
			    b ? b->url : "?", status, what);
	if (j->unload && j->then != SIZE_MAX) {
		/* the load it made room for: next (the timer starts it), or not */
		struct adapter *next = &as->v[j->then];
		struct slot *ns = b ? slot_of(next, b, false) : NULL;
		if (!(r > 0 && ns && job_add(as, j->then, b, false, SIZE_MAX) == 0)) {
			if (ns) {
				ns->busy = false;
				ns->loads_failed++;
				ns->failed_until_ms = now + FAILED_PAUSE_MS;
			}
			next->loading = false;
		}
	} else if (!j->unload) {
		a->loading = false;
	}
	job_free(j);
	gw->drain_pending = true;
}

static void job_done(struct ig_xfer *x, CURLcode result)
{
	struct job *j = IG_CONTAINER_OF(x, struct job, xfer);
	long status = 0;
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	job_end(j, result, status);
}

/* Reactor 0's tick: the jobs asked for since start. */
static void jobs_timer(struct ig_rx *rx IG_UNUSED, uint64_t now_ms IG_UNUSED, void *arg)
{
	struct ig_adapters *as = arg;
	for (struct job *j = as->jobs, *next; j; j = next) {
		next = j->next;
		if (j->started)
			continue;
		if (job_start(j) == 0)
			continue;
		/* not started (the server left, or no memory): as a failure */
		j->started_us = ig_now_us();
		job_end(j, CURLE_FAILED_INIT, 0);
	}
}

/* Starts making room for a on b, then loading it there. Returns 0 or -1. */
static int begin_load(struct ig_adapters *as, struct adapter *a, const struct ig_backend *b, struct adapter *out)
{
	size_t ai = (size_t)(a - as->v);
	struct slot *s = slot_of(a, b, true), *os = out ? slot_of(out, b, true) : NULL;
	if (!s || (out && !os))
		return -1;
	if (job_add(as, out ? (size_t)(out - as->v) : ai, b, out != NULL, out ? ai : SIZE_MAX) < 0)
		return -1;
	s->busy = true;
	if (os)
		os->busy = true;
	a->loading = true;
	ig_log_info("adapters: loading '%s' on %s%s%s", a->name, b->url, out ? ", unloading " : "",
		    out ? out->name : "");
	return 0;
}

/* ---- the dispatcher's calls ---- */

static bool tried(const struct ig_pick_req *rq, const struct ig_backend *b)
{
	for (int i = 0; i < rq->ntried; i++)
		if (rq->tried[i] == b)
			return true;
	return false;
}

bool ig_adapters_pick(struct ig_gw *gw, const char *model, const struct ig_policy *p, void *state, unsigned *rotor,
		      struct ig_pick_req *rq, struct ig_backend **out, enum ig_pick *got)
{
	struct ig_adapters *as = gw->adapters;
	struct adapter *a = as ? find(as, model, true) : NULL;
	if (!a)
		return false;
	learn_listed(as); /* may grow as->v: a found again after */
	a = find(as, model, false);
	const struct ig_fleet *fleet = &gw->fleet;
	const struct ig_cluster_view *view = rq->view;
	struct ig_backend *stack[64], **v = fleet->n > 64 ? malloc(fleet->n * sizeof(*v)) : stack;
	size_t k = 0;
	if (!v) {
		*got = IG_PICK_BUSY;
		return true;
	}
	for (size_t i = 0; i < fleet->n; i++)
		if (resident(gw->cfg, a, fleet->v[i]))
			v[k++] = fleet->v[i];
	*got = ig_policy_pick(p, state, v, k, rotor, rq, out);
	if (v != stack)
		free(v);
	if (*got == IG_PICK_OK)
		return true;
	if (a->loading) { /* one load at a time: its end wakes the queue */
		*got = IG_PICK_BUSY;
		return true;
	}
	/* Another server of its base model, with room (or an idle adapter to
	 * let go of): the one with a free slot and the fewest in flight. */
	struct ig_backend *target = NULL;
	struct adapter *target_out = NULL;
	long best = 0;
	size_t loadable = 0; /* up, of its base model, with a limit known */
	uint64_t now = ig_now_ms();
	for (size_t i = 0; i < fleet->n; i++) {
		struct ig_backend *b = fleet->v[i];
		if (!ig_backend_usable(b) || b->role == IG_ROLE_PREFILL || tried(rq, b) ||
		    (rq->pinned && b->server->id + 1 != rq->pinned) || ig_backend_serves(b, a->base) != IG_SERVES_YES)
			continue;
		struct slot *s = slot_of(a, b, false);
		long max = ig_adapters_max(b);
		loadable += a->path && max > 0;
		if (!a->path || max <= 0 || resident(gw->cfg, a, b) || (s && (s->busy || s->failed_until_ms > now)))
			continue;
		bool full = held(as, b) >= max;
		struct adapter *o = full ? victim(as, b) : NULL;
		if (full && !o)
			continue;
		long limit = ig_policy_limit(view, b, rq->low), used = atomic_load(&b->inflight);
		/* free slots first, then no unload, then the least in flight */
		long score = (limit > 0 && used >= limit ? 1000000000L : 0) + (o ? 100000000L : 0) + used;
		if (!target || score < best) {
			target = b;
			target_out = o;
			best = score;
		}
	}
	if (target && begin_load(as, a, target, target_out) == 0)
		*got = IG_PICK_BUSY;
	else if (*got == IG_PICK_NONE && loadable > 0)
		*got = IG_PICK_BUSY; /* room may come: an adapter there goes idle */
	/* else NONE: no server up holds it, and none may be given it */
	return true;
}

bool ig_adapters_started(struct ig_gw *gw, const char *model, const struct ig_backend *b)
{
	struct adapter *a = gw->adapters ? find(gw->adapters, model, false) : NULL;
	struct slot *s = a ? slot_of(a, b, true) : NULL;
	if (s) {
		s->inflight++;
		s->used_us = ig_now_us();
	}
	return a && (atomic_load(&b->lora_by_path) || is_sglang(gw->adapters, b->id));
}

void ig_adapters_ended(struct ig_gw *gw, const char *model, const struct ig_backend *b)
{
	struct adapter *a = gw->adapters ? find(gw->adapters, model, false) : NULL;
	struct slot *s = a ? slot_of(a, b, false) : NULL;
	if (s && s->inflight > 0)
		s->inflight--;
}

/* ---- what is shown ---- */

void ig_adapters_report_backend(const struct ig_gw *gw, const struct ig_backend *b, json_t *entry)
{
	struct ig_adapters *as = gw->adapters;
	if (!as || (!as->n && ig_adapters_max(b) <= 0))
		return;
	json_t *res = json_array(), *loading = json_array();
	for (size_t i = 0; i < as->n; i++) {
		struct adapter *a = &as->v[i];
		struct slot *s = slot_of(a, b, false);
		if (resident(gw->cfg, a, b))
			json_array_append_new(res, json_string(a->name));
		else if (s && s->busy && a->loading)
			json_array_append_new(loading, json_string(a->name));
	}
	const char *from = b->max_loras > 0 ? "config" : atomic_load(&b->max_loras_learned) > 0 ? "learned" : "none";
	json_object_set_new(entry, "lora", json_pack("{s:I, s:s, s:o, s:o}", "max_loras", (json_int_t)ig_adapters_max(b),
						     "max_loras_from", from, "resident", res, "loading", loading));
}

static void label_pair(struct ig_buf *out, const struct slot *s, const struct adapter *a)
{
	ig_buf_printf(out, "backend=\"");
	ig_buf_prom_label(out, s->url);
	ig_buf_printf(out, "\",adapter=\"");
	ig_buf_prom_label(out, a->name);
	ig_buf_printf(out, "\"");
}

static void adapters_prom(void *arg, struct ig_buf *out)
{
	const struct ig_adapters *as = arg;
	static const char *const fam[2] = {"loads", "unloads"};
	for (int f = 0; f < 2; f++) {
		ig_buf_printf(out, "# HELP infergate_lora_%s_total LoRA adapter %s the gateway asked a backend for, by "
			      "outcome.\n# TYPE infergate_lora_%s_total counter\n", fam[f], fam[f], fam[f]);
		for (size_t i = 0; i < as->n; i++)
			for (size_t j = 0; j < as->v[i].ns; j++) {
				const struct slot *s = &as->v[i].s[j];
				uint64_t ok = f ? s->unloads_ok : s->loads_ok, bad = f ? s->unloads_failed : s->loads_failed;
				if (!ok && !bad)
					continue;
				for (int o = 0; o < 2; o++) {
					ig_buf_printf(out, "infergate_lora_%s_total{", fam[f]);
					label_pair(out, s, &as->v[i]);
					ig_buf_printf(out, ",outcome=\"%s\"} %llu\n", o ? "failed" : "ok",
						      (unsigned long long)(o ? bad : ok));
				}
			}
	}
	ig_buf_printf(out, "# HELP infergate_lora_load_seconds Time the successful LoRA adapter loads took.\n"
		      "# TYPE infergate_lora_load_seconds summary\n");
	for (size_t i = 0; i < as->n; i++)
		for (size_t j = 0; j < as->v[i].ns; j++) {
			const struct slot *s = &as->v[i].s[j];
			if (!s->loads_ok)
				continue;
			ig_buf_printf(out, "infergate_lora_load_seconds_sum{");
			label_pair(out, s, &as->v[i]);
			ig_buf_printf(out, "} %.6f\ninfergate_lora_load_seconds_count{", s->load_s);
			label_pair(out, s, &as->v[i]);
			ig_buf_printf(out, "} %llu\n", (unsigned long long)s->loads_ok);
		}
}

/* ---- life ---- */

int ig_adapters_init(struct ig_gw *gw)
{
	struct ig_adapters *as = calloc(1, sizeof(*as));
	if (!as)
		return -1;
	as->gw = gw;
	gw->adapters = as;
	if (ig_rx_every(gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_ADAPTERS, jobs_timer, as) < 0 ||
	    ig_stats_register_at(gw, &(struct ig_metrics_source){.name = "lora", .prom = adapters_prom, .arg = as},
				   IG_METRICS_ORDER_PROBES) < 0)
		return -1;
	return 0;
}

void ig_adapters_free(struct ig_gw *gw)
{
	struct ig_adapters *as = gw->adapters;
	if (!as)
		return;
	ig_stats_unregister(gw, as);
	while (as->jobs) {
		struct job *j = as->jobs;
		as->jobs = j->next;
		ig_upstream_stop(&j->xfer);
		job_free(j);
	}
	for (size_t i = 0; i < as->n; i++) {
		free(as->v[i].name);
		free(as->v[i].base);
		free(as->v[i].path);
		for (size_t j = 0; j < as->v[i].ns; j++)
			free(as->v[i].s[j].url);
		free(as->v[i].s);
	}
	free(as->v);
	free(as->sglang);
	free(as);
	gw->adapters = NULL;
}
