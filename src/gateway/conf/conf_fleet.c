/* The fleet's part of the configuration: the backends (--backend,
 * --discover, "backends"), the model aliases and fallbacks, and the per-key
 * settings (api_key_settings): their parsers, their check, what
 * --check-config shows of them. Rows of the table (conf.h), registered by
 * conf_parts.c; moved out of conf.c, which keeps the table's machinery.
 * Not here: acting on them (backend.c, discover.c, admission.c). */
#include "config.h"
#include <curl/curl.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"

/* backends[].priority_field, by value (0: learned) */
static const char *const priority_fields[] = {NULL, "sglang", "vllm", "none"};

static void models_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void ig_conf_backend_clear(struct ig_backend_conf *bc)
{
	free(bc->url);
	free(bc->kv_events);
	free(bc->kv_events_replay);
	models_free(bc->models, bc->n_models);
	*bc = (struct ig_backend_conf){0};
}

int ig_conf_backend_copy(struct ig_backend_conf *dst, const struct ig_backend_conf *src)
{
	*dst = *src;
	dst->url = strdup(src->url);
	dst->kv_events = src->kv_events ? strdup(src->kv_events) : NULL;
	dst->kv_events_replay = src->kv_events_replay ? strdup(src->kv_events_replay) : NULL;
	dst->models = src->n_models ? calloc(src->n_models, sizeof(*dst->models)) : NULL;
	bool ok = dst->url && (!src->n_models || dst->models) && (!src->kv_events || dst->kv_events) &&
		  (!src->kv_events_replay || dst->kv_events_replay);
	for (size_t i = 0; ok && i < src->n_models; i++)
		ok = (dst->models[i] = strdup(src->models[i])) != NULL;
	if (!ok) {
		if (!dst->models)
			dst->n_models = 0; /* else: the strdup'd ones, NULL after them */
		ig_conf_backend_clear(dst);
		return -1;
	}
	return 0;
}

static void backends_clear(struct ig_conf *cfg)
{
	for (size_t i = 0; i < cfg->n_backends; i++)
		ig_conf_backend_clear(&cfg->backends[i]);
	free(cfg->backends);
	cfg->backends = NULL;
	cfg->n_backends = 0;
}

static void pairs_clear(struct ig_model_alias **v, size_t *n)
{
	for (size_t i = 0; i < *n; i++) {
		free((*v)[i].alias);
		free((*v)[i].model);
	}
	free(*v);
	*v = NULL;
	*n = 0;
}

static void aliases_clear(struct ig_conf *cfg)
{
	pairs_clear(&cfg->aliases, &cfg->n_aliases);
}

static void fallbacks_clear(struct ig_conf *cfg)
{
	pairs_clear(&cfg->fallbacks, &cfg->n_fallbacks);
}

static int parse_backend_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
/* An entry's disaggregation settings: half of a pair says whose protocol
 * it speaks (the gateway cannot tell an SGLang decode server from a vLLM
 * one before it sends it a pair); a bootstrap port is an SGLang prefill
 * server's. Returns 1, or 0 with the problems in errs. */
static int pd_entry_ok(const struct ig_backend_conf *bc, const char *ctx, struct ig_buf *errs)
{
	if (bc->role != IG_ROLE_BOTH && bc->engine == IG_ENGINE_UNSET) {
		ig_flags_problem(errs, "%s.role: \"%s\" needs %s.engine: \"sglang\" or \"vllm\" (whose disaggregation "
			 "protocol the pair speaks)", ctx, bc->role == IG_ROLE_PREFILL ? "prefill" : "decode", ctx);
		return 0;
	}
	if (bc->bootstrap_port && (bc->role != IG_ROLE_PREFILL || bc->engine != IG_ENGINE_SGLANG)) {
		ig_flags_problem(errs, "%s.bootstrap_port: %ld is for an SGLang prefill server (role \"prefill\", engine "
			 "\"sglang\")", ctx, bc->bootstrap_port);
		return 0;
	}
	return 1;
}

/* Whether two entries may serve one model (those of a pair must both name it
 * when they name models; an entry that names none serves any). */
static bool share_a_model(const struct ig_backend_conf *a, const struct ig_backend_conf *b)
{
	if (!a->n_models || !b->n_models)
		return true;
	for (size_t i = 0; i < a->n_models; i++)
		for (size_t j = 0; j < b->n_models; j++)
			if (strcmp(a->models[i], b->models[j]) == 0)
				return true;
	return false;
}

/* The pairs' rules across the list: each prefill server has a decode server
 * of the same engine that may serve a model with it, and the reverse; two
 * halves of different engines never share a model (a pair could not be
 * made of them). */
static void pd_fleet_check(const struct ig_conf *cfg, struct ig_buf *errs)
{
	for (size_t i = 0; i < cfg->n_backends; i++) {
		const struct ig_backend_conf *a = &cfg->backends[i];
		if (a->role == IG_ROLE_BOTH)
			continue;
		if (a->dp_ranks > 1) /* which prefill rank a decode rank pairs with is not modelled */
			ig_flags_problem(errs, "backends[%zu].dp_ranks: %ld with role \"%s\": a pair's half with "
				 "data-parallel ranks is not supported (give it dp_ranks 1, its engine balances its ranks)",
				 i, a->dp_ranks, a->role == IG_ROLE_PREFILL ? "prefill" : "decode");
		int want = a->role == IG_ROLE_PREFILL ? IG_ROLE_DECODE : IG_ROLE_PREFILL;
		bool found = false;
		for (size_t j = 0; j < cfg->n_backends; j++) {
			const struct ig_backend_conf *b = &cfg->backends[j];
			if (b->role == IG_ROLE_BOTH || j == i || !share_a_model(a, b))
				continue;
			if (b->engine != a->engine) {
				if (j > i)
					ig_flags_problem(errs, "backends[%zu] (%s, engine %s) and backends[%zu] (%s, engine %s) serve "
						 "a model together: the halves of a pair speak one engine's protocol", i,
						 a->role == IG_ROLE_PREFILL ? "prefill" : "decode",
						 a->engine == IG_ENGINE_SGLANG ? "sglang" : "vllm", j,
						 b->role == IG_ROLE_PREFILL ? "prefill" : "decode",
						 b->engine == IG_ENGINE_SGLANG ? "sglang" : "vllm");
				continue;
			}
			found |= b->role == want;
		}
		if (!found)
			ig_flags_problem(errs, "backends[%zu] (%s): role \"%s\" with no %s server of engine %s for its models "
				 "(a pair needs both halves)", i, a->url, a->role == IG_ROLE_PREFILL ? "prefill" : "decode",
				 want == IG_ROLE_PREFILL ? "prefill" : "decode", a->engine == IG_ENGINE_SGLANG ? "sglang" : "vllm");
	}
}

static void parse_backends_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
				struct ig_buf *errs);
static int parse_alias_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
static void parse_keys_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
			    struct ig_buf *errs);
static void parse_aliases_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
			       struct ig_buf *errs);
static int parse_fallback_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
static void parse_fallbacks_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
				 struct ig_buf *errs);

char *ig_conf_normalise_url(const char *in, const char **why)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *query = NULL, *out = NULL;

	if (curl_url_set(u, CURLUPART_URL, in, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
		*why = "not a URL";
		goto done;
	}
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	if (!scheme || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
		*why = "scheme must be http or https";
		goto done;
	}
	if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host || !*host) {
		*why = "no host";
		goto done;
	}
	/* curl decodes a percent-encoded host ("%ff") into raw bytes: only a
	 * DNS name, an IPv4 or a bracketed IPv6 address is a backend's host. */
	if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_[]:") != strlen(host)) {
		*why = "the host must be a DNS name (letters, digits, '.', '-', '_'; an international name in its "
		       "xn-- form) or an IP address";
		goto done;
	}
	if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK && query) {
		*why = "a backend URL takes no query string";
		goto done;
	}
	curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
	curl_url_get(u, CURLUPART_PATH, &path, 0);
	for (const char *c = path ? path : ""; *c; c++) {
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f) {
			*why = "the path must be ASCII (percent-encode other bytes)";
			goto done;
		}
	}
	size_t plen = path ? strlen(path) : 0;
	while (plen > 0 && path[plen - 1] == '/')
		plen--;
	out = ig_strdupf("%s://%s:%s%.*s", scheme, host, port ? port : "80", (int)plen, path ? path : "");
done:
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_free(query);
	curl_url_cleanup(u);
	return out;
}

const char *ig_conf_kv_endpoint_bad(const char *ep, long ranks)
{
	if (strncmp(ep, "ipc://", 6) == 0) {
		/* a path; rank r > 0 appends "_dpR" (vLLM's offset_endpoint_port) */
		if (!ep[6])
			return "ipc:// needs a path";
		for (const char *c = ep + 6; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				return "the path has a control character";
		return NULL;
	}
	if (strncmp(ep, "tcp://", 6) != 0)
		return "must be tcp://HOST:PORT or ipc://PATH";
	const char *host = ep + 6, *colon = strrchr(host, ':');
	if (!colon)
		return "no port (tcp://HOST:PORT)";
	size_t hl = (size_t)(colon - host);
	if (hl == 0)
		return "no host (tcp://HOST:PORT)";
	if (host[0] == '[') {
		/* an IPv6 address, bracketed */
		if (hl < 3 || host[hl - 1] != ']' || strspn(host + 1, "0123456789abcdefABCDEF:.") != hl - 2)
			return "the host must be a DNS name or an IP address ([v6] bracketed)";
	} else if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") != hl ||
		   host[0] == '-' || host[0] == '.') {
		return "the host must be a DNS name or an IP address ([v6] bracketed)";
	}
	const char *port = colon + 1;
	size_t pl = strlen(port);
	if (pl == 0 || pl > 5 || strspn(port, "0123456789") != pl)
		return "the port must be a number in 1..65535";
	long p = strtol(port, NULL, 10);
	if (p < 1 || p > 65535)
		return "the port must be a number in 1..65535";
	if (p + (ranks > 1 ? ranks - 1 : 0) > 65535)
		return "the port of its last data-parallel rank (port + dp_ranks - 1) is over 65535";
	return NULL;
}

const char *ig_conf_bad_model_name(const char *m)
{
	if (!*m)
		return "empty";
	if (strlen(m) > 256)
		return "longer than 256 bytes";
	for (const char *c = m; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return "has a control character";
	return NULL;
}

/* Adds a model name to a backend's list. Returns 0, or -1 with *err. */
static int add_model(struct ig_backend_conf *bc, const char *where, const char *m, char **err)
{
	const char *why = ig_conf_bad_model_name(m);
	if (why) {
		*err = ig_strdupf("%s: model name '%s' is %s", where, m, why);
		return -1;
	}
	for (size_t i = 0; i < bc->n_models; i++) {
		if (strcmp(bc->models[i], m) == 0) {
			*err = ig_strdupf("%s: model '%s' is listed twice", where, m);
			return -1;
		}
	}
	char **v = realloc(bc->models, (bc->n_models + 1) * sizeof(*v));
	if (!v || !(v[bc->n_models] = strdup(m)))
		abort();
	bc->models = v;
	bc->n_models++;
	return 0;
}

/* Adds a backend at url with the other settings of proto, whose models it
 * takes. Returns 0, or -1 with *err naming `where` (the models freed). */
static int add_backend(struct ig_conf *cfg, const char *where, const char *url, struct ig_backend_conf *proto,
		       char **err)
{
	const char *why = NULL;
	char *norm = ig_conf_normalise_url(url, &why);
	if (!norm) {
		*err = ig_strdupf("%s: '%s' is not a valid backend URL (%s)", where, url, why);
		goto fail;
	}
	for (size_t i = 0; i < cfg->n_backends; i++) {
		if (strcmp(cfg->backends[i].url, norm) == 0) {
			*err = ig_strdupf("%s: backend '%s' is listed twice", where, url);
			free(norm);
			goto fail;
		}
	}
	cfg->backends = realloc(cfg->backends, (cfg->n_backends + 1) * sizeof(*cfg->backends));
	if (!cfg->backends)
		abort();
	proto->url = norm;
	cfg->backends[cfg->n_backends++] = *proto;
	return 0;
fail:
	models_free(proto->models, proto->n_models);
	free(proto->kv_events);
	free(proto->kv_events_replay);
	return -1;
}

/* --backend and --discover, URL or URL#MODEL,MODEL: the first of them
 * replaces the file's list. */
static int parse_backend_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	struct ig_conf *cfg = target;
	struct ig_backend_conf proto = {.weight = 1, .max_inflight = -1, .discover = strcmp(f->name, "--discover") == 0};
	if (!cfg->backends_from_flags) {
		backends_clear(cfg);
		cfg->backends_from_flags = true;
	}
	const char *hash = strchr(v, '#');
	char *url = hash ? strndup(v, (size_t)(hash - v)) : strdup(v);
	if (hash && !hash[1]) {
		*err = ig_strdupf("%s: '%s': no model after '#' (URL#MODEL,MODEL...)", what, v);
		free(url);
		return -1;
	}
	if (hash) {
		char *list = strdup(hash + 1), *rest = list, *m;
		while ((m = strsep(&rest, ","))) {
			int rc = *m ? add_model(&proto, what, m, err) : -1;
			if (rc < 0) {
				if (!*m)
					*err = ig_strdupf("%s: '%s': an empty model name in the list after '#'", what, v);
				free(list);
				free(url);
				models_free(proto.models, proto.n_models);
				return -1;
			}
		}
		free(list);
	}
	int rc = add_backend(cfg, what, url, &proto, err);
	free(url);
	return rc;
}

static void backend_or_problem(struct ig_conf *cfg, struct ig_buf *errs, const char *where, const char *url,
			       struct ig_backend_conf *proto)
{
	char *err = NULL;
	if (add_backend(cfg, where, url, proto, &err) < 0) {
		ig_flags_problem(errs, "%s", err);
		free(err);
	}
}

/* An entry's KV events settings: each endpoint well formed for its ranks;
 * a replay endpoint only with an event one; a discovered name's addresses
 * take theirs from kv_events.port (one endpoint cannot be every address's).
 * Returns 1, or 0 with the problems in errs. */
static int kv_entry_ok(const struct ig_backend_conf *bc, const char *ctx, struct ig_buf *errs)
{
	int ok = 1;
	const char *ep[2] = {bc->kv_events, bc->kv_events_replay}, *names[2] = {"kv_events", "kv_events_replay"};
	for (int i = 0; i < 2; i++) {
		const char *why = ep[i] ? ig_conf_kv_endpoint_bad(ep[i], bc->dp_ranks) : NULL;
		if (why) {
			ig_flags_problem(errs, "%s.%s: '%s': %s", ctx, names[i], ep[i], why);
			ok = 0;
		}
	}
	if (bc->kv_events_replay && !bc->kv_events) {
		ig_flags_problem(errs, "%s.kv_events_replay: '%s' without kv_events (the replay fills the gaps of a "
			 "subscription)", ctx, bc->kv_events_replay);
		ok = 0;
	}
	if (bc->discover && (bc->kv_events || bc->kv_events_replay)) {
		ig_flags_problem(errs, "%s: a discover entry takes its addresses' KV events from kv_events.port, not "
			 "kv_events or kv_events_replay", ctx);
		ok = 0;
	}
	return ok;
}

static void parse_backends_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
				struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	size_t i;
	json_t *b;

	if (!json_is_array(v)) {
		ig_flags_problem(errs, "%s: key 'backends' must be a list", where);
		return;
	}
	backends_clear(cfg);
	json_array_foreach(v, i, b) {
		char ctx[512];
		snprintf(ctx, sizeof(ctx), "%s: backends[%zu]", where, i);
		struct ig_backend_conf proto = {.weight = 1, .max_inflight = -1};
		if (json_is_string(b)) {
			backend_or_problem(cfg, errs, ctx, json_string_value(b), &proto);
			continue;
		}
		if (!json_is_object(b)) {
			ig_flags_problem(errs, "%s must be a URL string or an object with \"url\"", ctx);
			continue;
		}
		const char *bk;
		json_t *bv, *url = json_object_get(b, "url"), *disc = json_object_get(b, "discover");
		int ok = 1;
		json_object_foreach(b, bk, bv) {
			if (strcmp(bk, "url") == 0 || strcmp(bk, "discover") == 0)
				continue;
			if (strcmp(bk, "models") == 0) {
				size_t mi;
				json_t *mv;
				char mctx[600];
				snprintf(mctx, sizeof(mctx), "%s.models", ctx);
				if (!json_is_array(bv) || json_array_size(bv) == 0) {
					ig_flags_problem(errs, "%s must be a non-empty list of model names", mctx);
					ok = 0;
					continue;
				}
				json_array_foreach(bv, mi, mv) {
					char *err = NULL;
					if (!json_is_string(mv)) {
						ig_flags_problem(errs, "%s[%zu] must be a string", mctx, mi);
						ok = 0;
					} else if (add_model(&proto, mctx, json_string_value(mv), &err) < 0) {
						ig_flags_problem(errs, "%s", err);
						free(err);
						ok = 0;
					}
				}
				continue;
			}
			if (strcmp(bk, "priority_field") == 0) {
				const char *pv = json_string_value(bv);
				proto.priority_field = -1;
				for (int p = 1; p < 4 && pv; p++)
					if (strcmp(pv, priority_fields[p]) == 0)
						proto.priority_field = p;
				if (proto.priority_field < 0) {
					ig_flags_problem(errs, "%s.priority_field: must be \"sglang\", \"vllm\" or \"none\"", ctx);
					ok = 0;
				}
				continue;
			}
			if (strcmp(bk, "kv_events") == 0 || strcmp(bk, "kv_events_replay") == 0) {
				char **dst = bk[9] ? &proto.kv_events_replay : &proto.kv_events;
				if (!json_is_string(bv)) {
					ig_flags_problem(errs, "%s.%s: must be a string \"tcp://HOST:PORT\"", ctx, bk);
					ok = 0;
				} else {
					free(*dst);
					*dst = strdup(json_string_value(bv));
				}
				continue;
			}
			if (strcmp(bk, "kv_events_format") == 0) {
				const char *fv = json_string_value(bv);
				proto.kv_format = fv && strcmp(fv, "vllm") == 0 ? 1 : fv && strcmp(fv, "sglang") == 0 ? 2 : -1;
				if (proto.kv_format < 0) {
					char *txt = json_dumps(bv, JSON_ENCODE_ANY);
					ig_flags_problem(errs, "%s.kv_events_format: %s is not \"vllm\" or \"sglang\"", ctx,
							 txt ? txt : "?");
					free(txt);
					ok = 0;
				}
				continue;
			}
			if (strcmp(bk, "dp_ranks") == 0) {
				if (!json_is_integer(bv) || json_integer_value(bv) < 1 || json_integer_value(bv) > 64) {
					char *txt = json_dumps(bv, JSON_ENCODE_ANY);
					ig_flags_problem(errs, "%s.dp_ranks: %s is not an integer in 1..64", ctx, txt ? txt : "?");
					free(txt);
					ok = 0;
				} else {
					proto.dp_ranks = (long)json_integer_value(bv);
				}
				continue;
			}
			if (strcmp(bk, "role") == 0 || strcmp(bk, "engine") == 0) {
				static const char *const roles[] = {"both", "prefill", "decode"};
				static const char *const engines[] = {"", "sglang", "vllm"};
				const char *const *words = bk[0] == 'r' ? roles : engines;
				const char *sv = json_string_value(bv);
				int got = -1;
				for (int w = bk[0] == 'r' ? 0 : 1; w < 3 && sv; w++)
					if (strcmp(sv, words[w]) == 0)
						got = w;
				if (got < 0) {
					char *txt = json_dumps(bv, JSON_ENCODE_ANY);
					ig_flags_problem(errs, "%s.%s: %s is not %s", ctx, bk, txt ? txt : "?",
							 bk[0] == 'r' ? "\"both\", \"prefill\" or \"decode\""
								      : "\"sglang\" or \"vllm\"");
					free(txt);
					ok = 0;
				} else if (bk[0] == 'r') {
					proto.role = got;
				} else {
					proto.engine = got;
				}
				continue;
			}
			if (strcmp(bk, "bootstrap_port") == 0) {
				if (!json_is_integer(bv) || json_integer_value(bv) < 1 || json_integer_value(bv) > 65535) {
					char *txt = json_dumps(bv, JSON_ENCODE_ANY);
					ig_flags_problem(errs, "%s.bootstrap_port: %s is not a port in 1..65535", ctx, txt ? txt : "?");
					free(txt);
					ok = 0;
				} else {
					proto.bootstrap_port = (long)json_integer_value(bv);
				}
				continue;
			}
			if (strcmp(bk, "reserve_slots") == 0 || strcmp(bk, "max_loras") == 0) {
				if (!json_is_integer(bv) || json_integer_value(bv) < 0 || json_integer_value(bv) > 1000000) {
					ig_flags_problem(errs, "%s.%s: must be an integer in 0..1000000", ctx, bk);
					ok = 0;
				} else {
					*(bk[0] == 'r' ? &proto.reserve_slots : &proto.max_loras) = (long)json_integer_value(bv);
				}
				continue;
			}
			if (strcmp(bk, "weight") == 0 || strcmp(bk, "max_inflight") == 0) {
				long lo = bk[0] == 'w' ? 1 : 0, hi = bk[0] == 'w' ? 1000 : 1000000;
				if (!json_is_integer(bv) || json_integer_value(bv) < lo || json_integer_value(bv) > hi) {
					char *txt = json_dumps(bv, JSON_ENCODE_ANY);
					ig_flags_problem(errs, "%s.%s: %s is not an integer in %ld..%ld", ctx, bk, txt ? txt : "?", lo, hi);
					free(txt);
					ok = 0;
				} else if (bk[0] == 'w') {
					proto.weight = (long)json_integer_value(bv);
				} else {
					proto.max_inflight = (long)json_integer_value(bv);
				}
				continue;
			}
			ig_flags_problem(errs,
					 "%s: unknown key '%s' (expected url or discover, weight, max_inflight, models, "
					 "reserve_slots, priority_field, kv_events, kv_events_replay, kv_events_format, "
					 "dp_ranks, role, engine, bootstrap_port, max_loras)",
					 ctx, bk);
			ok = 0;
		}
		if (!!url == !!disc || !json_is_string(url ? url : disc)) {
			ig_flags_problem(errs, "%s: give one of \"url\" or \"discover\", as a string", ctx);
			ok = 0;
		}
		proto.discover = disc != NULL;
		ok &= kv_entry_ok(&proto, ctx, errs);
		ok &= pd_entry_ok(&proto, ctx, errs);
		if (ok) {
			backend_or_problem(cfg, errs, ctx, json_string_value(url ? url : disc), &proto);
		} else {
			models_free(proto.models, proto.n_models);
			free(proto.kv_events);
			free(proto.kv_events_replay);
		}
	}
}

/* The error for a pair of model names (an alias or a fallback) when
 * either is not a model name, else NULL. */
static char *bad_pair(const char *where, const char *a, const char *b)
{
	const char *why = ig_conf_bad_model_name(a);
	if (why || (why = ig_conf_bad_model_name(b)))
		return ig_strdupf("%s: '%s' -> '%s': a model name is %s", where, a, b, why);
	return NULL;
}

/* Appends {a, b} to a list of pairs (aliases, fallbacks). */
static void pair_append(struct ig_model_alias **v, size_t *n, const char *a, const char *b)
{
	struct ig_model_alias *grown = realloc(*v, (*n + 1) * sizeof(*grown));
	if (!grown)
		abort();
	*v = grown;
	grown[(*n)++] = (struct ig_model_alias){strdup(a), strdup(b)};
}

/* Adds alias -> model. Returns 0, or -1 with *err. */
static int add_alias(struct ig_conf *cfg, const char *where, const char *alias, const char *model, char **err)
{
	if ((*err = bad_pair(where, alias, model)))
		return -1;
	if (strcmp(alias, model) == 0) {
		*err = ig_strdupf("%s: '%s' is an alias of itself", where, alias);
		return -1;
	}
	for (size_t i = 0; i < cfg->n_aliases; i++) {
		if (strcmp(cfg->aliases[i].alias, alias) == 0) {
			*err = ig_strdupf("%s: alias '%s' is given twice", where, alias);
			return -1;
		}
	}
	pair_append(&cfg->aliases, &cfg->n_aliases, alias, model);
	return 0;
}

static int parse_alias_flag(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
			    char **err)
{
	struct ig_conf *cfg = target;
	if (!cfg->aliases_from_flags) {
		aliases_clear(cfg);
		cfg->aliases_from_flags = true;
	}
	const char *eq = strchr(v, '=');
	if (!eq) {
		*err = ig_strdupf("%s: '%s' is not ALIAS=MODEL", what, v);
		return -1;
	}
	char *alias = strndup(v, (size_t)(eq - v));
	int rc = add_alias(cfg, what, alias, eq + 1, err);
	free(alias);
	return rc;
}

static void parse_aliases_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
			       struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	const char *alias;
	json_t *m;

	if (!json_is_object(v)) {
		ig_flags_problem(errs, "%s: key 'model_aliases' must be an object {\"ALIAS\": \"MODEL\"}", where);
		return;
	}
	aliases_clear(cfg);
	json_object_foreach(v, alias, m) {
		char *err = NULL, ctx[600];
		snprintf(ctx, sizeof(ctx), "%s: model_aliases", where);
		if (!json_is_string(m))
			ig_flags_problem(errs, "%s.%s must be a model name (a string)", ctx, alias);
		else if (add_alias(cfg, ctx, alias, json_string_value(m), &err) < 0) {
			ig_flags_problem(errs, "%s", err);
			free(err);
		}
	}
}

/* Adds model -> fallback (tried in the order added). Returns 0, or -1 with *err. */
static int add_fallback(struct ig_conf *cfg, const char *where, const char *model, const char *fallback, char **err)
{
	if ((*err = bad_pair(where, model, fallback)))
		return -1;
	if (strcmp(model, fallback) == 0) {
		*err = ig_strdupf("%s: '%s' falls back to itself", where, model);
		return -1;
	}
	for (size_t i = 0; i < cfg->n_fallbacks; i++)
		if (strcmp(cfg->fallbacks[i].alias, model) == 0 && strcmp(cfg->fallbacks[i].model, fallback) == 0) {
			*err = ig_strdupf("%s: '%s' -> '%s' is given twice", where, model, fallback);
			return -1;
		}
	pair_append(&cfg->fallbacks, &cfg->n_fallbacks, model, fallback);
	return 0;
}

static int parse_fallback_flag(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
			       char **err)
{
	struct ig_conf *cfg = target;
	if (!cfg->fallbacks_from_flags) {
		fallbacks_clear(cfg);
		cfg->fallbacks_from_flags = true;
	}
	const char *eq = strchr(v, '=');
	if (!eq || eq == v || !eq[1]) {
		*err = ig_strdupf("%s: '%s' is not MODEL=FALLBACK[,FALLBACK...]", what, v);
		return -1;
	}
	char *model = strndup(v, (size_t)(eq - v)), *list = strdup(eq + 1), *save = NULL;
	int rc = 0;
	for (char *fb = strtok_r(list, ",", &save); fb && rc == 0; fb = strtok_r(NULL, ",", &save))
		rc = add_fallback(cfg, what, model, fb, err);
	free(model);
	free(list);
	return rc;
}

/* model_fallbacks: {"MODEL": ["FALLBACK", ...]} (or one name as a string). */
static void parse_fallbacks_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
				 struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	const char *model;
	json_t *list;

	if (!json_is_object(v)) {
		ig_flags_problem(errs, "%s: key 'model_fallbacks' must be an object {\"MODEL\": [\"FALLBACK\", ...]}",
				 where);
		return;
	}
	fallbacks_clear(cfg);
	json_object_foreach(v, model, list) {
		char ctx[600];
		snprintf(ctx, sizeof(ctx), "%s: model_fallbacks", where);
		json_t *one = json_is_string(list) ? json_pack("[O]", list) : json_incref(list);
		size_t i;
		json_t *fb;
		if (!json_is_array(one) || json_array_size(one) == 0)
			ig_flags_problem(errs, "%s.%s must be a list of model names", ctx, model);
		json_array_foreach(one, i, fb) {
			char *err = NULL;
			if (!json_is_string(fb)) {
				ig_flags_problem(errs, "%s.%s[%zu] must be a model name (a string)", ctx, model, i);
			} else if (add_fallback(cfg, ctx, model, json_string_value(fb), &err) < 0) {
				ig_flags_problem(errs, "%s", err);
				free(err);
			}
		}
		json_decref(one);
	}
}

const char *ig_conf_fallback(const struct ig_conf *cfg, const char *name, size_t i)
{
	for (size_t k = 0; k < cfg->n_fallbacks; k++)
		if (strcmp(cfg->fallbacks[k].alias, name) == 0 && i-- == 0)
			return cfg->fallbacks[k].model;
	return NULL;
}

/* api_key_settings: {"<sha256 hex>": {"priority"?, "weight"?, "max_inflight"?}}. */
static void parse_keys_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
			    struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	const char *digest;
	json_t *o;

	if (!json_is_object(v)) {
		ig_flags_problem(errs, "%s: key 'api_key_settings' must be an object {\"SHA256 HEX\": {...}}", where);
		return;
	}
	free(cfg->keys);
	cfg->keys = calloc(json_object_size(v) + 1, sizeof(*cfg->keys));
	cfg->n_keys = 0;
	if (!cfg->keys)
		abort();
	json_object_foreach(v, digest, o) {
		struct ig_key_conf k = {.priority = -1, .weight = 1, .max_inflight = 0};
		size_t n = strlen(digest);
		bool hex = n == 64 && strspn(digest, "0123456789abcdef") == 64;
		if (!hex) {
			ig_flags_problem(errs, "%s: api_key_settings: '%.80s' is not a SHA-256 digest in lower-case hex "
				 "(infergate --hash-key < key prints it)", where, digest);
			continue;
		}
		if (!json_is_object(o)) {
			ig_flags_problem(errs, "%s: api_key_settings.%.12s...: must be an object", where, digest);
			continue;
		}
		const char *name;
		json_t *x;
		json_object_foreach(o, name, x) {
			if (strcmp(name, "priority") == 0) {
				k.priority = json_is_string(x) ? ig_conf_class_parse(json_string_value(x)) : -1;
				if (k.priority < 0)
					ig_flags_problem(errs, "%s: api_key_settings.%.12s....priority: must be \"high\", "
						 "\"normal\" or \"low\"", where, digest);
			} else if (strcmp(name, "weight") == 0 || strcmp(name, "max_inflight") == 0) {
				long lo = name[0] == 'w' ? 1 : 0, hi = name[0] == 'w' ? 1000 : 1000000;
				if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
					ig_flags_problem(errs, "%s: api_key_settings.%.12s....%s: must be an integer in %ld..%ld",
							 where, digest, name, lo, hi);
				else if (name[0] == 'w')
					k.weight = (long)json_integer_value(x);
				else
					k.max_inflight = (long)json_integer_value(x);
			} else {
				ig_flags_problem(errs, "%s: api_key_settings.%.12s...: unknown key '%s' (priority, weight, "
					 "max_inflight)", where, digest, name);
			}
		}
		snprintf(k.digest, sizeof(k.digest), "%s", digest);
		cfg->keys[cfg->n_keys++] = k;
	}
}

const char *ig_conf_alias_target(const struct ig_conf *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_aliases; i++)
		if (strcmp(cfg->aliases[i].alias, name) == 0)
			return cfg->aliases[i].model;
	return NULL;
}

/* The list's rules once everything is read: a backend at least, the
 * default limit where none was given; an alias names a served model, never
 * another alias, and a configured model name cannot be an alias (which
 * would it be?). */
void ig_conf_fleet_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	if (cfg->n_backends == 0)
		ig_flags_problem(errs, "backends: no backend given (use --backend URL or \"backends\" in the config file)");
	for (size_t i = 0; i < cfg->n_backends; i++)
		if (cfg->backends[i].max_inflight < 0)
			cfg->backends[i].max_inflight = cfg->max_inflight;
	/* kv_events.port's endpoints: every rank's port in range */
	if (cfg->kv_replay_port && !cfg->kv_port)
		ig_flags_problem(errs, "kv_events.replay_port: %ld without kv_events.port (the replay fills the gaps of a "
			 "subscription)", cfg->kv_replay_port);
	for (size_t i = 0; cfg->kv_port && i < cfg->n_backends; i++) {
		const struct ig_backend_conf *bc = &cfg->backends[i];
		long last = (bc->dp_ranks > 1 ? bc->dp_ranks : 1) - 1;
		long port = cfg->kv_replay_port > cfg->kv_port ? cfg->kv_replay_port : cfg->kv_port;
		if (!bc->kv_events && port + last > 65535)
			ig_flags_problem(errs, "backends[%zu].dp_ranks: %ld ranks from kv_events port %ld go past port 65535",
					 i, last + 1, port);
	}
	pd_fleet_check(cfg, errs);
	cfg->pd_pairs = false;
	for (size_t i = 0; i < cfg->n_backends; i++)
		cfg->pd_pairs |= cfg->backends[i].role == IG_ROLE_PREFILL;
	for (size_t i = 0; i < cfg->n_aliases; i++) {
		const struct ig_model_alias *a = &cfg->aliases[i];
		if (ig_conf_alias_target(cfg, a->model))
			ig_flags_problem(errs, "model_aliases: '%s' -> '%s', which is itself an alias (name the served model)",
					 a->alias, a->model);
		for (size_t b = 0; b < cfg->n_backends; b++)
			for (size_t m = 0; m < cfg->backends[b].n_models; m++)
				if (strcmp(cfg->backends[b].models[m], a->alias) == 0)
					ig_flags_problem(errs, "model_aliases: '%s' is also a model that backend %s serves",
							 a->alias, cfg->backends[b].url);
	}
}

static json_t *backends_json(const struct ig_conf *cfg)
{
	json_t *v = json_array();
	for (size_t b = 0; b < cfg->n_backends; b++) {
		const struct ig_backend_conf *bc = &cfg->backends[b];
		json_t *o = json_pack("{s:s, s:I, s:I}", bc->discover ? "discover" : "url", bc->url, "weight",
				      (json_int_t)bc->weight, "max_inflight", (json_int_t)bc->max_inflight);
		if (bc->reserve_slots)
			json_object_set_new(o, "reserve_slots", json_integer(bc->reserve_slots));
		if (bc->max_loras)
			json_object_set_new(o, "max_loras", json_integer(bc->max_loras));
		if (bc->priority_field)
			json_object_set_new(o, "priority_field", json_string(priority_fields[bc->priority_field]));
		if (bc->kv_events)
			json_object_set_new(o, "kv_events", json_string(bc->kv_events));
		if (bc->kv_events_replay)
			json_object_set_new(o, "kv_events_replay", json_string(bc->kv_events_replay));
		if (bc->kv_format)
			json_object_set_new(o, "kv_events_format", json_string(bc->kv_format == 2 ? "sglang" : "vllm"));
		if (bc->dp_ranks > 1)
			json_object_set_new(o, "dp_ranks", json_integer(bc->dp_ranks));
		if (bc->role)
			json_object_set_new(o, "role", json_string(bc->role == IG_ROLE_PREFILL ? "prefill" : "decode"));
		if (bc->engine)
			json_object_set_new(o, "engine", json_string(bc->engine == IG_ENGINE_SGLANG ? "sglang" : "vllm"));
		if (bc->bootstrap_port)
			json_object_set_new(o, "bootstrap_port", json_integer(bc->bootstrap_port));
		if (bc->n_models) {
			json_t *ms = json_array();
			for (size_t m = 0; m < bc->n_models; m++)
				json_array_append_new(ms, json_string(bc->models[m]));
			json_object_set_new(o, "models", ms);
		}
		json_array_append_new(v, o);
	}
	return v;
}

/* What --check-config shows of the fleet's rows. */
static json_t *fleet_json(const struct ig_flag *k, const struct ig_conf *cfg)
{
	json_t *v = NULL;
	if (k->parse_json == parse_backends_json) {
		v = backends_json(cfg);
	} else if (k->parse_json == parse_keys_json) {
		v = json_object();
		for (size_t ki = 0; ki < cfg->n_keys; ki++) {
			const struct ig_key_conf *kc = &cfg->keys[ki];
			json_t *o = json_pack("{s:I, s:I}", "weight", (json_int_t)kc->weight, "max_inflight",
					      (json_int_t)kc->max_inflight);
			if (kc->priority >= 0)
				json_object_set_new(o, "priority", json_string(ig_conf_class_name(kc->priority)));
			json_object_set_new(v, kc->digest, o);
		}
	} else if (k->parse_json == parse_aliases_json) {
		v = json_object();
		for (size_t a = 0; a < cfg->n_aliases; a++)
			json_object_set_new(v, cfg->aliases[a].alias, json_string(cfg->aliases[a].model));
	} else if (k->parse_json == parse_fallbacks_json) {
		v = json_object();
		for (size_t a = 0; a < cfg->n_fallbacks; a++) {
			json_t *l = json_object_get(v, cfg->fallbacks[a].alias);
			if (!l)
				json_object_set_new(v, cfg->fallbacks[a].alias, l = json_array());
			json_array_append_new(l, json_string(cfg->fallbacks[a].model));
		}
	}
	return v;
}

static void fleet_clear(struct ig_conf *cfg)
{
	backends_clear(cfg);
	aliases_clear(cfg);
	fallbacks_clear(cfg);
}

static void keys_clear(struct ig_conf *cfg)
{
	free(cfg->keys);
	cfg->keys = NULL;
	cfg->n_keys = 0;
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag backend_rows[] = {
	{.name = "--backend", .key = "backends", .type = IG_FLAG_CUSTOM, .metavar = "URL",
	 .parse = parse_backend_flag, .parse_json = parse_backends_json,
	 .help = "backend base URL, URL#MODEL,MODEL... to name the models it serves (else they are learned "
		 "from its /v1/models); repeatable, replaces the file's list; in the file a list of URL strings "
		 "or {\"url\", \"weight\", \"max_inflight\", \"models\": [...], \"kv_events\": \"tcp://HOST:PORT\", "
		 "\"kv_events_replay\", \"kv_events_format\", \"dp_ranks\", \"role\": \"both\"|\"prefill\"|\"decode\", "
		 "\"engine\": \"sglang\"|\"vllm\", \"bootstrap_port\"} (kv_events: the engine's KV event "
		 "publisher, see --kv-events-port; dp_ranks: its data-parallel ranks, each routed to as a backend "
		 "of its own, the request naming its rank in X-Data-Parallel-Rank, max_inflight and reserve_slots "
		 "split over them; role: half of a prefill/decode pair, see --pd-decode-policy)"},
	{.name = "--model-alias", .key = "model_aliases", .type = IG_FLAG_CUSTOM, .metavar = "ALIAS=MODEL",
	 .parse = parse_alias_flag, .parse_json = parse_aliases_json,
	 .help = "a client's model name that is served as MODEL (the forwarded body names MODEL); repeatable, "
		 "replaces the file's map; in the file {\"ALIAS\": \"MODEL\", ...}"},
	{.name = "--model-fallback", .key = "model_fallbacks", .type = IG_FLAG_CUSTOM,
	 .metavar = "MODEL=FALLBACK[,FALLBACK...]", .parse = parse_fallback_flag, .parse_json = parse_fallbacks_json,
	 .help = "when no backend of MODEL is up, or its queue is full, a request for it runs on FALLBACK "
		 "(tried in order; the answer says so in X-Infergate-Fallback); repeatable, replaces the file's "
		 "map; in the file {\"MODEL\": [\"FALLBACK\", ...]}"},
	{.name = "--discover", .type = IG_FLAG_CUSTOM, .metavar = "URL", .parse = parse_backend_flag,
	 .help = "backend URL whose host is a DNS name: every address it resolves to becomes a backend "
		 "(URL#MODEL,... as for --backend; repeatable; in the file {\"discover\": URL} in backends)"},
};
static const struct ig_flag key_rows[] = {
	{.key = "api_key_settings", .type = IG_FLAG_CUSTOM, .parse_json = parse_keys_json,
	 .help = "per API key: {\"SHA256 HEX\": {\"priority\", \"weight\", \"max_inflight\"}}"},
};
const struct ig_conf_part ig_conf_fleet_backends = IG_CONF_PART(backend_rows, .to_json = fleet_json,
							   .clear = fleet_clear);
const struct ig_conf_part ig_conf_fleet_keys = IG_CONF_PART(key_rows, .to_json = fleet_json, .clear = keys_clear);
