/* The backend table: built from the configuration, changed at run time by
 * the admin API and by reloads (on the reactor thread only). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "fleet/backend.h"
#include "infergate/util.h"

struct ig_backend *ig_backend_fleet_add(struct ig_fleet *fleet, const char *url, long weight, long max_inflight)
{
	struct ig_backend **v = ig_grow(fleet->v, &fleet->cap, fleet->n, sizeof(*v), 8);
	if (!v)
		return NULL;
	fleet->v = v;
	struct ig_backend *b = calloc(1, sizeof(*b));
	if (!b || !(b->url = strdup(url)) || !(b->key = strdup(url))) {
		if (b)
			free(b->url);
		free(b);
		return NULL;
	}
	b->id = fleet->next_id++;
	b->dp_rank = -1;
	b->server = b;
	b->nranks = 1;
	b->weight = weight;
	b->max_inflight = max_inflight;
	atomic_init(&b->state, IG_BACKEND_DOWN);
	atomic_init(&b->admin, IG_ADMIN_ENABLED);
	b->reported_load = b->reported_waiting = -1;
	ig_capacity_reset(&b->learn, false); /* health.c sets the ramp */
	fleet->v[fleet->n++] = b;
	return b;
}

static void backend_free(struct ig_backend *b);

/* The server's part of a limit for each of its n ranks: rounded up, so
 * that a rank of a server limited to fewer requests than it has ranks
 * still takes one (0: none). */
static long rank_share(long v, int n)
{
	return v > 0 ? (v + n - 1) / n : v;
}

struct ig_backend *ig_backend_fleet_add_server(struct ig_fleet *fleet, const char *url,
					       const struct ig_backend_conf *bc)
{
	int n = bc->dp_ranks > 1 ? (int)bc->dp_ranks : 1;
	size_t at = fleet->n;
	struct ig_backend *head = ig_backend_fleet_add(fleet, url, bc->weight, rank_share(bc->max_inflight, n));
	if (!head || (n > 1 && !(head->ranks = calloc((size_t)n, sizeof(*head->ranks)))))
		goto undo;
	for (int r = 0; r < n; r++) {
		struct ig_backend *b = r ? ig_backend_fleet_add(fleet, url, bc->weight, rank_share(bc->max_inflight, n))
					 : head;
		if (!b)
			goto undo;
		if (n > 1) {
			char *key = ig_strdupf("%s#dp%d", url, r);
			if (!key)
				goto undo;
			free(b->key);
			b->key = key;
			b->dp_rank = r;
			b->server = head;
			head->ranks[r] = b;
		}
	}
	head->nranks = n;
	if (ig_backend_server_configure(head, bc) < 0)
		goto undo;
	return head;
undo:
	while (fleet->n > at)
		backend_free(fleet->v[--fleet->n]);
	return NULL;
}

int ig_backend_server_configure(struct ig_backend *server, const struct ig_backend_conf *bc)
{
	int changed = 0;
	for (int r = 0; r < server->nranks; r++) {
		struct ig_backend *b = ig_backend_rank(server, r);
		int c = ig_backend_configure(b, bc);
		if (c < 0)
			return -1;
		b->max_inflight = rank_share(bc->max_inflight, server->nranks);
		b->reserve_slots = rank_share(bc->reserve_slots, server->nranks);
		changed |= c;
	}
	return changed;
}

void ig_backend_server_admin(struct ig_backend *server, int admin)
{
	for (int r = 0; r < server->nranks; r++)
		atomic_store(&ig_backend_rank(server, r)->admin, admin);
}

int ig_backend_fleet_init(struct ig_fleet *fleet, const struct ig_conf *cfg)
{
	memset(fleet, 0, sizeof(*fleet));
	for (size_t i = 0; i < cfg->n_backends; i++) {
		const struct ig_backend_conf *bc = &cfg->backends[i];
		if (!bc->discover && !ig_backend_fleet_add_server(fleet, bc->url, bc))
			return -1;
	}
	return 0;
}

static void models_conf_free(struct ig_backend *b)
{
	for (size_t i = 0; i < b->n_models_conf; i++)
		free(b->models_conf[i]);
	free(b->models_conf);
	b->models_conf = NULL;
	b->n_models_conf = 0;
}

int ig_backend_set_models(struct ig_backend *b, char *const *models, size_t n)
{
	char **v = n ? calloc(n, sizeof(*v)) : NULL;
	if (n && !v)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (!(v[i] = strdup(models[i]))) {
			while (i-- > 0)
				free(v[i]);
			free(v);
			return -1;
		}
	}
	models_conf_free(b);
	b->models_conf = v;
	b->n_models_conf = n;
	return 0;
}

int ig_backend_configure(struct ig_backend *b, const struct ig_backend_conf *bc)
{
	b->weight = bc->weight;
	b->max_inflight = bc->max_inflight;
	b->reserve_slots = bc->reserve_slots;
	b->max_loras = bc->max_loras;
	b->priority_field = bc->priority_field;
	bool role_changed = b->role != bc->role;
	b->role = bc->role;
	b->engine = bc->engine;
	b->bootstrap_port = bc->bootstrap_port ? bc->bootstrap_port : IG_PD_SGLANG_BOOTSTRAP_PORT;
	bool same = b->n_models_conf == bc->n_models && !role_changed;
	for (size_t i = 0; same && i < bc->n_models; i++)
		same = strcmp(b->models_conf[i], bc->models[i]) == 0;
	if (same)
		return 0;
	return ig_backend_set_models(b, bc->models, bc->n_models) < 0 ? -1 : 1;
}

bool ig_backend_names_model(const struct ig_backend *b, const char *model)
{
	if (b->models_conf) {
		for (size_t i = 0; i < b->n_models_conf; i++)
			if (strcmp(b->models_conf[i], model) == 0)
				return true;
		return false;
	}
	size_t i;
	json_t *m;
	json_array_foreach(b->models, i, m) {
		const char *id = json_string_value(json_object_get(m, "id"));
		if (id && strcmp(id, model) == 0)
			return true;
	}
	return false;
}

enum ig_serves ig_backend_serves(const struct ig_backend *b, const char *model)
{
	if (ig_backend_names_model(b, model))
		return IG_SERVES_YES;
	if (b->models_conf)
		return IG_SERVES_NO;
	if (b->models_any)
		return IG_SERVES_YES;
	return b->models ? IG_SERVES_NO : IG_SERVES_UNKNOWN;
}

json_t *ig_backend_model_names(const struct ig_backend *b)
{
	json_t *names = json_array();
	if (b->models_conf) {
		for (size_t i = 0; i < b->n_models_conf; i++)
			json_array_append_new(names, json_string(b->models_conf[i]));
		return names;
	}
	size_t i;
	json_t *m;
	json_array_foreach(b->models, i, m) {
		json_t *id = json_object_get(m, "id");
		if (json_is_string(id))
			json_array_append(names, id);
	}
	return names;
}

void ig_backend_fleet_remove(struct ig_fleet *fleet, struct ig_backend *b)
{
	for (size_t i = 0; i < fleet->n; i++) {
		if (fleet->v[i] != b)
			continue;
		memmove(&fleet->v[i], &fleet->v[i + 1], (fleet->n - i - 1) * sizeof(*fleet->v));
		fleet->n--;
		struct ig_backend **g = realloc(fleet->gone, (fleet->ngone + 1) * sizeof(*g));
		if (g) {
			fleet->gone = g;
			fleet->gone[fleet->ngone++] = b;
		}
		json_decref(b->models);
		b->models = NULL;
		return;
	}
}

static void backend_free(struct ig_backend *b)
{
	models_conf_free(b);
	json_decref(b->models);
	free(b->discover);
	free(b->ranks);
	free(b->key);
	free(b->url);
	free(b);
}

void ig_backend_fleet_free(struct ig_fleet *fleet)
{
	for (size_t i = 0; i < fleet->n; i++)
		backend_free(fleet->v[i]);
	for (size_t i = 0; i < fleet->ngone; i++)
		backend_free(fleet->gone[i]);
	free(fleet->v);
	free(fleet->gone);
	memset(fleet, 0, sizeof(*fleet));
}

struct ig_backend *ig_backend_fleet_find_url(const struct ig_fleet *fleet, const char *url)
{
	for (size_t i = 0; i < fleet->n; i++)
		if (fleet->v[i]->server == fleet->v[i] && strcmp(fleet->v[i]->url, url) == 0)
			return fleet->v[i];
	return NULL;
}

struct ig_backend *ig_backend_fleet_find_key(const struct ig_fleet *fleet, const char *key)
{
	for (size_t i = 0; i < fleet->n; i++)
		if (strcmp(fleet->v[i]->key, key) == 0)
			return fleet->v[i];
	return NULL;
}

struct ig_backend *ig_backend_fleet_find_id(const struct ig_fleet *fleet, int id)
{
	for (size_t i = 0; i < fleet->n; i++)
		if (fleet->v[i]->id == id)
			return fleet->v[i];
	return NULL;
}

long ig_backend_limit(const struct ig_backend *b)
{
	if (b->max_inflight > 0)
		return b->max_inflight;
	long slots = atomic_load(&b->slots);
	return slots > 0 ? slots : atomic_load(&b->ramp);
}

long ig_backend_capacity(const struct ig_backend *b)
{
	return b->max_inflight > 0 ? b->max_inflight : atomic_load(&b->slots);
}

const char *ig_backend_limit_from(const struct ig_backend *b)
{
	return b->max_inflight > 0 ? "max_inflight" : ig_capacity_from_name(ig_capacity_from(&b->learn));
}

void ig_backend_publish_slots(struct ig_backend *b)
{
	atomic_store(&b->slots, b->learn.cur);
	atomic_store(&b->ramp, b->learn.cur > 0 ? 0 : b->learn.ramp);
}

void ig_backend_finished(struct ig_backend *b, bool ok)
{
	if (ok && ig_capacity_done(&b->learn, atomic_load(&b->inflight)))
		ig_backend_publish_slots(b);
}

int ig_backend_usable(const struct ig_backend *b)
{
	uint64_t until = atomic_load(&b->breaker_until_ms);
	return atomic_load(&b->state) == IG_BACKEND_UP && atomic_load(&b->admin) == IG_ADMIN_ENABLED &&
	       (!until || ig_now_ms() >= until);
}

int ig_backend_priority_field(const struct ig_backend *b, long *step)
{
	unsigned learned = (unsigned)atomic_load(&b->prio_sched);
	long t = atomic_load(&b->prio_threshold);
	*step = learned && t >= 0 && t < 1000000 ? t + 1 : 10;
	if (b->priority_field == 1 || b->priority_field == 2)
		return b->priority_field;
	if (b->priority_field != 0)
		return 0; /* "none" */
	return learned & IG_PRIO_LARGER_FIRST ? 1 : learned & IG_PRIO_SMALLER_FIRST ? 2 : 0;
}

bool ig_backend_preempts(const struct ig_backend *b)
{
	long step;
	unsigned learned = (unsigned)atomic_load(&b->prio_sched);
	int field = ig_backend_priority_field(b, &step);
	/* (a configured field that runs against the server's order does not) */
	return (learned & IG_PRIO_PREEMPTS) && ((field == 1 && (learned & IG_PRIO_LARGER_FIRST)) ||
						(field == 2 && (learned & IG_PRIO_SMALLER_FIRST)));
}

const char *ig_backend_breaker_state(const struct ig_backend *b)
{
	uint64_t until = atomic_load(&b->breaker_until_ms);
	return !until ? "closed" : ig_now_ms() < until ? "open" : "half_open";
}

size_t ig_backend_fleet_healthy(const struct ig_fleet *fleet)
{
	size_t k = 0;
	for (size_t i = 0; i < fleet->n; i++)
		k += (size_t)ig_backend_usable(fleet->v[i]);
	return k;
}

const char *ig_backend_state_name(int state)
{
	return state == IG_BACKEND_UP ? "up" : "down";
}

const char *ig_backend_admin_name(int admin)
{
	static const char *names[] = {"enabled", "draining", "removing"};
	return names[admin];
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag breaker_rows[] = {
	{.name = "--breaker-failures", .key = "breaker.failures", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(breaker_failures),
	 .min = 0, .max = 1000, .def = "5", .metavar = "N",
	 .help = "N request failures in a row open a backend's circuit breaker: no request for breaker.open_ms, "
		 "then one trial at a time (0 = no breaker)"},
	{.name = "--breaker-open-ms", .key = "breaker.open_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(breaker_open_ms),
	 .min = 100, .max = 3600000, .def = "5000", .metavar = "N",
	 .help = "how long an open breaker takes no request; it doubles each time a trial fails, up to 8x"},
};
const struct ig_conf_part ig_breaker_conf = IG_CONF_PART(breaker_rows);
