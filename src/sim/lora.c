/* LoRA adapters' bookkeeping (lora.h). The rules come from the engines:
 * - vLLM's scheduler admits a waiting request whose adapter is not among
 *   those of the scheduled requests only while fewer than max_loras are;
 *   else it skips it (it keeps waiting, the requests behind it may go):
 *   vllm-project/vllm vllm/v1/core/sched/scheduler.py schedule(),
 *   "Scheduling would exceed max_loras, skip". The GPU holds max_loras
 *   adapters, swapped least recently used first (vllm/lora/model_manager.py
 *   LRUCacheLoRAModelManager), the CPU cache max_cpu_loras.
 * - SGLang's scheduler checks the set of lora_ids of the running batch, of
 *   the requests taken so far and of the candidate against
 *   max_loras_per_batch, the base model (None) being one of them, and skips
 *   an adapter's request that would exceed it (a base model request is never
 *   held back): sgl-project/sglang python/sglang/srt/managers/scheduler.py
 *   _get_new_batch_prefill_raw, python/sglang/srt/lora/lora_manager.py
 *   validate_lora_batch; its memory pool has max_loras_per_batch buffers
 *   (python/sglang/srt/lora/mem_pool.py), evicting an adapter not in use;
 *   max_loaded_loras bounds the adapters loaded at once (lora_registry.py). */
#include "config.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "lora.h"

int sim_loras_init(struct sim_loras *l, long nranks, long max_batch, bool count_base, long max_loaded)
{
	memset(l, 0, sizeof(*l));
	l->nranks = nranks;
	l->max_batch = max_batch;
	l->count_base = count_base;
	l->max_loaded = max_loaded;
	l->base_running = calloc((size_t)nranks, sizeof(*l->base_running));
	return l->base_running ? 0 : -1;
}

void sim_loras_free(struct sim_loras *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->a[i].name);
		free(l->a[i].path);
		free(l->a[i].running);
		free(l->a[i].resident);
	}
	free(l->a);
	free(l->base_running);
	memset(l, 0, sizeof(*l));
}

int sim_loras_find(const struct sim_loras *l, const char *name)
{
	for (size_t i = 0; name && i < l->n; i++)
		if (!l->a[i].gone && strcmp(l->a[i].name, name) == 0)
			return (int)i;
	return -1;
}

size_t sim_loras_count(const struct sim_loras *l)
{
	size_t k = 0;
	for (size_t i = 0; i < l->n; i++)
		k += !l->a[i].gone;
	return k;
}

enum sim_lora_add sim_loras_add(struct sim_loras *l, const char *name, const char *path, int *idx)
{
	if (sim_loras_find(l, name) >= 0)
		return SIM_LORA_EXISTS;
	if (l->max_loaded > 0 && (long)sim_loras_count(l) >= l->max_loaded)
		return SIM_LORA_FULL;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct sim_lora *a = realloc(l->a, cap * sizeof(*a));
		if (!a)
			return SIM_LORA_NOMEM;
		l->a = a;
		l->cap = cap;
	}
	struct sim_lora *e = &l->a[l->n];
	memset(e, 0, sizeof(*e));
	e->name = strdup(name);
	e->path = strdup(path);
	e->running = calloc((size_t)l->nranks, sizeof(*e->running));
	e->resident = calloc((size_t)l->nranks, sizeof(*e->resident));
	if (!e->name || !e->path || !e->running || !e->resident) {
		free(e->name);
		free(e->path);
		free(e->running);
		free(e->resident);
		return SIM_LORA_NOMEM;
	}
	if (idx)
		*idx = (int)l->n;
	l->n++;
	return SIM_LORA_ADDED;
}

int sim_loras_remove(struct sim_loras *l, const char *name)
{
	int i = sim_loras_find(l, name);
	if (i < 0)
		return -1;
	l->a[i].gone = true;
	/* out of every GPU slot: a later adapter of that name is loaded anew */
	memset(l->a[i].resident, 0, (size_t)l->nranks * sizeof(*l->a[i].resident));
	return 0;
}

/* Distinct adapters in rank's batch, the base model counted when asked. */
static long in_batch(const struct sim_loras *l, long rank)
{
	long k = l->count_base && l->base_running[rank] > 0;
	for (size_t i = 0; i < l->n; i++)
		k += l->a[i].running[rank] > 0;
	return k;
}

bool sim_loras_fits(const struct sim_loras *l, long rank, int want)
{
	if (want < 0 || l->a[want].running[rank] > 0)
		return true;
	return in_batch(l, rank) < l->max_batch;
}

bool sim_loras_activate(struct sim_loras *l, long rank, int want)
{
	if (want < 0) {
		l->base_running[rank]++;
		return false;
	}
	struct sim_lora *e = &l->a[want];
	bool load = e->resident[rank] == 0;
	if (load) {
		/* a free slot, else the least recently used idle adapter's */
		long held = 0;
		struct sim_lora *lru = NULL;
		for (size_t i = 0; i < l->n; i++) {
			struct sim_lora *o = &l->a[i];
			if (o->resident[rank] == 0)
				continue;
			held++;
			if (o->running[rank] == 0 && (!lru || o->resident[rank] < lru->resident[rank]))
				lru = o;
		}
		if (held >= l->max_batch && lru)
			lru->resident[rank] = 0;
	}
	e->resident[rank] = ++l->clock;
	e->running[rank]++;
	return load;
}

void sim_loras_deactivate(struct sim_loras *l, long rank, int want)
{
	if (want < 0) {
		if (l->base_running[rank] > 0)
			l->base_running[rank]--;
		return;
	}
	if (l->a[want].running[rank] > 0)
		l->a[want].running[rank]--;
}

int sim_lora_split(const char *arg, char **name, char **path)
{
	const char *eq = strchr(arg, '=');
	const char *p = eq ? eq + 1 : arg;
	size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
	if (nlen == 0 || *p == '\0')
		return -1;
	*name = strndup(arg, nlen);
	*path = strdup(p);
	if (!*name || !*path) {
		free(*name);
		free(*path);
		return -1;
	}
	return 0;
}

char **sim_lora_expand_argv(int argc, char **argv, int *argc_out)
{
	/* at worst every argument gets a flag before it */
	char **out = calloc((size_t)argc * 2 + 1, sizeof(*out));
	int n = 0;
	const char *multi = NULL;
	if (!out)
		return NULL;
	for (int i = 0; i < argc; i++) {
		char *a = argv[i];
		if (i > 0 && strcmp(a, "--") == 0) { /* the rest as it is */
			while (i < argc)
				out[n++] = argv[i++];
			break;
		}
		if (strncmp(a, "--", 2) == 0) {
			multi = strcmp(a, "--lora-modules") == 0 || strcmp(a, "--lora-paths") == 0 ? a : NULL;
			out[n++] = a;
			if (multi && i + 1 < argc)
				out[n++] = argv[++i]; /* its first value, whatever it looks like */
			continue;
		}
		if (multi) /* one more value of the last --lora-modules / --lora-paths */
			out[n++] = (char *)multi;
		out[n++] = a;
	}
	out[n] = NULL;
	*argc_out = n;
	return out;
}

/* Appends a label value: the names of the adapters whose count is > 0,
 * comma-joined, escaped as Prometheus wants. */
static void names(const struct sim_loras *l, const long *count, struct ig_buf *out)
{
	struct ig_buf v;
	ig_buf_init(&v);
	for (size_t i = 0; i < l->n; i++) {
		if (count[i] <= 0)
			continue;
		if (v.len)
			ig_buf_append(&v, ",", 1);
		ig_buf_append(&v, l->a[i].name, strlen(l->a[i].name));
	}
	ig_buf_append(&v, "", 1); /* its terminating NUL */
	ig_buf_prom_label(out, v.data);
	ig_buf_free(&v);
}

void sim_loras_metric(const struct sim_loras *l, const long *waiting, double now_s, struct ig_buf *out)
{
	long *running = calloc(l->n + 1, sizeof(*running));
	if (!running)
		return;
	for (size_t i = 0; i < l->n; i++)
		for (long r = 0; r < l->nranks; r++)
			running[i] += l->a[i].running[r];
	/* the label order of the gauge's labelnames; its value is the time it
	 * was set (set_to_current_time) */
	ig_buf_printf(out,
		      "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
		      "# TYPE vllm:lora_requests_info gauge\n"
		      "vllm:lora_requests_info{max_lora=\"%ld\",waiting_lora_adapters=\"",
		      l->max_batch);
	names(l, waiting, out);
	ig_buf_printf(out, "\",running_lora_adapters=\"");
	names(l, running, out);
	ig_buf_printf(out, "\"} %.9e\n", now_s);
	free(running);
}

/* vLLM: plain text on success, an ErrorResponse otherwise (after
 * vllm-project/vllm vllm/entrypoints/openai/serving_models.py
 * load_lora_adapter, unload_lora_adapter and their _check_*_request). */
static void update_vllm(struct sim_loras *l, bool load, const char *name, const char *path,
			struct sim_lora_answer *a)
{
	if (load && (!name || !*name || !path || !*path)) {
		a->status = 400, a->type = "InvalidUserInput";
		a->msg = strdup("Both 'lora_name' and 'lora_path' must be provided.");
	} else if (!load && (!name || !*name)) {
		a->status = 400, a->type = "InvalidUserInput";
		a->msg = strdup("either 'lora_name' and 'lora_int_id' needs to be provided.");
	} else if (load && sim_loras_find(l, name) >= 0) {
		a->status = 400, a->type = "InvalidUserInput";
		a->msg = ig_strdupf("The lora adapter '%s' has already been loaded.", name);
	} else if (!load && sim_loras_remove(l, name) < 0) {
		a->status = 404, a->type = "NotFoundError";
		a->msg = ig_strdupf("The lora adapter '%s' cannot be found.", name);
	} else if (load && sim_loras_add(l, name, path, NULL) != SIM_LORA_ADDED) {
		a->status = 500, a->type = "InternalServerError";
		a->msg = strdup("out of memory");
	} else {
		a->status = 200, a->ctype = "text/plain; charset=utf-8";
		a->body = ig_strdupf("Success: LoRA adapter '%s' %s successfully.", name, load ? "added" : "removed");
	}
}

/* SGLang: a LoRAUpdateOutput {"success", "error_message", "loaded_adapters"}
 * either way, 200 or 400 (after sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py load_lora_adapter,
 * python/sglang/srt/managers/io_struct.py LoRAUpdateOutput,
 * python/sglang/srt/lora/lora_registry.py; the messages are near theirs). */
static void update_sglang(struct sim_loras *l, bool enabled, bool load, const char *name, const char *path,
			  struct sim_lora_answer *a)
{
	char *err = NULL;
	if (!enabled)
		err = strdup("LoRA is not enabled. Please set `--enable-lora` to enable LoRA.");
	else if (!name || !*name || (load && (!path || !*path)))
		err = strdup(load ? "lora_name and lora_path are required" : "lora_name is required");
	else if (load) {
		switch (sim_loras_add(l, name, path, NULL)) {
		case SIM_LORA_ADDED:
			break;
		case SIM_LORA_EXISTS:
			err = ig_strdupf("Failed to load LoRA adapter %s: a LoRA adapter with the same name already exists.",
					 name);
			break;
		case SIM_LORA_FULL:
			err = ig_strdupf("Failed to load LoRA adapter %s: the number of loaded adapters would exceed "
					 "max_loaded_loras (%ld).", name, l->max_loaded);
			break;
		default:
			err = strdup("out of memory");
		}
	} else if (sim_loras_remove(l, name) < 0) {
		err = ig_strdupf("LoRA with name %s does not exist.", name);
	}
	json_t *loaded = json_object();
	for (size_t i = 0; enabled && i < l->n; i++)
		if (!l->a[i].gone)
			json_object_set_new(loaded, l->a[i].name, json_string(l->a[i].path));
	json_t *j = json_pack("{s:b, s:o, s:o}", "success", err == NULL, "error_message",
			      err ? json_string(err) : json_null(), "loaded_adapters", loaded);
	a->status = err ? 400 : 200;
	a->ctype = "application/json";
	a->body = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	free(err);
	if (!a->body)
		abort();
}

void sim_lora_update(struct sim_loras *l, bool enabled, bool vllm, bool load, const char *body, size_t len,
		     struct sim_lora_answer *a)
{
	memset(a, 0, sizeof(*a));
	json_t *root = json_loadb(body ? body : "", len, 0, NULL);
	if (!json_is_object(root)) {
		a->status = 400, a->type = "Bad Request";
		a->msg = strdup("the request body must be a JSON object");
		json_decref(root);
		return;
	}
	const char *name = json_string_value(json_object_get(root, "lora_name"));
	const char *path = json_string_value(json_object_get(root, "lora_path"));
	/* a name lands in a metric label joined by commas: none in it */
	if (name && (strchr(name, ',') || strlen(name) > 256)) {
		a->status = 400, a->type = "Bad Request";
		a->msg = ig_strdupf("'lora_name': at most 256 bytes and no comma (infergate-sim)");
	} else if (vllm) {
		update_vllm(l, load, name, path, a);
	} else {
		update_sglang(l, enabled, load, name, path, a);
	}
	json_decref(root);
}
