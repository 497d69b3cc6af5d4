/* A prompt as the engine will see it (prompt.h). */
#include "config.h"
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/chattmpl.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/tokenizer.h"
#include "infergate/util.h"
#include "sched/prompt.h"

struct model_tok {
	char *name;
	struct ig_tokenizer *tok;
	struct ig_chattmpl *tmpl;   /* NULL: none, chat requests are not tokenized */
};

struct ig_prompts {
	struct model_tok *m;
	size_t n;
};

static const struct model_tok *find(const struct ig_prompts *p, const char *model)
{
	for (size_t i = 0; p && model && i < p->n; i++)
		if (strcmp(p->m[i].name, model) == 0)
			return &p->m[i];
	return NULL;
}

bool ig_prompt_has_tokenizer(const struct ig_prompts *p, const char *model)
{
	return find(p, model) != NULL;
}

void ig_prompts_free(struct ig_prompts *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		free(p->m[i].name);
		ig_tokenizer_free(p->m[i].tok);
		ig_chattmpl_free(p->m[i].tmpl);
	}
	free(p->m);
	free(p);
}

struct ig_prompts *ig_prompts_load(const struct ig_conf *cfg, struct ig_buf *errs)
{
	if (!cfg->n_models)
		return NULL;
	struct ig_prompts *p = calloc(1, sizeof(*p));
	if (!p || !(p->m = calloc(cfg->n_models, sizeof(*p->m)))) {
		free(p);
		ig_flags_problem(errs, "models: out of memory");
		return NULL;
	}
	size_t before = errs->len;
	for (size_t i = 0; i < cfg->n_models; i++) {
		const struct ig_model_conf *mc = &cfg->models[i];
		struct model_tok *m = &p->m[p->n];
		char err[512] = "";
		if (!mc->tokenizer) /* an entry for its adapters only */
			continue;
		if (!(m->tok = ig_tokenizer_load(mc->tokenizer, err, sizeof(err)))) {
			ig_flags_problem(errs, "models[%zu].tokenizer: '%s': %s", i, mc->tokenizer, err);
			continue;
		}
		char *tp = mc->chat_template ? strdup(mc->chat_template) : ig_chattmpl_beside(mc->tokenizer);
		if (tp && !(m->tmpl = ig_chattmpl_load(tp, err, sizeof(err))))
			ig_flags_problem(errs, "models[%zu].chat_template: '%s': %s", i, tp, err);
		free(tp);
		m->name = strdup(mc->name);
		p->n++;
	}
	if (errs->len != before) {
		ig_prompts_free(p);
		return NULL;
	}
	return p;
}

/* Token ids a client sent as the prompt itself. */
static int given_ids(json_t *prompt, uint32_t **ids, size_t *n)
{
	size_t len = json_array_size(prompt), i;
	json_t *x;
	if (!(*ids = malloc((len ? len : 1) * sizeof(**ids))))
		return -1;
	json_array_foreach(prompt, i, x) {
		json_int_t v = json_integer_value(x);
		if (!json_is_integer(x) || v < 0 || v > UINT32_MAX) {
			free(*ids);
			*ids = NULL;
			return 0;
		}
		(*ids)[i] = (uint32_t)v;
	}
	*n = len;
	return 1;
}

int ig_prompt_tokens(const struct ig_prompts *p, const char *model, json_t *root, uint32_t **ids, size_t *n,
		     char *err, size_t errlen)
{
	const struct model_tok *m = find(p, model);
	*ids = NULL;
	*n = 0;
	if (!m)
		return 0;
	json_t *msgs = json_object_get(root, "messages");
	if (json_is_array(msgs)) {
		if (!m->tmpl)
			return 0;
		char *text = NULL;
		size_t len = 0;
		if (ig_chattmpl_render_request(m->tmpl, root, &text, &len, err, errlen) < 0)
			return -1;
		int rc = ig_tokenizer_encode(m->tok, text, len, true, ids, n);
		free(text);
		if (rc < 0) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		return 1;
	}
	json_t *prompt = json_object_get(root, "prompt");
	if (json_is_array(prompt) && json_is_integer(json_array_get(prompt, 0)))
		return given_ids(prompt, ids, n);
	if (json_is_array(prompt))
		prompt = json_array_get(prompt, 0);
	if (json_is_array(prompt) && json_is_integer(json_array_get(prompt, 0)))
		return given_ids(prompt, ids, n);
	if (!json_is_string(prompt))
		return 0;
	if (ig_tokenizer_encode(m->tok, json_string_value(prompt), json_string_length(prompt), true, ids, n) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return 1;
}

/* ---- Settings: models[] and --tokenizer (conf.h), registered at boot by
 * conf_parts.c ---- */
static void models_clear(struct ig_conf *cfg)
{
	for (size_t i = 0; i < cfg->n_models; i++) {
		free(cfg->models[i].name);
		free(cfg->models[i].tokenizer);
		free(cfg->models[i].chat_template);
		for (size_t j = 0; j < cfg->models[i].n_adapters; j++) {
			free(cfg->models[i].adapter_names[j]);
			free(cfg->models[i].adapter_paths[j]);
		}
		free(cfg->models[i].adapter_names);
		free(cfg->models[i].adapter_paths);
	}
	free(cfg->models);
	cfg->models = NULL;
	cfg->n_models = 0;
}

static struct ig_model_conf *model_add(struct ig_conf *cfg, const char *name)
{
	struct ig_model_conf *grown = realloc(cfg->models, (cfg->n_models + 1) * sizeof(*grown));
	if (!grown)
		abort();
	cfg->models = grown;
	grown[cfg->n_models] = (struct ig_model_conf){.name = strdup(name)};
	return &grown[cfg->n_models++];
}

static int parse_tokenizer_flag(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
				char **err)
{
	struct ig_conf *cfg = target;
	if (!cfg->models_from_flags) {
		models_clear(cfg);
		cfg->models_from_flags = true;
	}
	const char *eq = strchr(v, '=');
	if (!eq || eq == v || !eq[1]) {
		*err = ig_strdupf("%s: '%s' is not MODEL=PATH", what, v);
		return -1;
	}
	char *name = strndup(v, (size_t)(eq - v));
	model_add(cfg, name)->tokenizer = strdup(eq + 1);
	free(name);
	return 0;
}

/* models[].adapters: {"NAME": "PATH", ...}, the LoRA adapters a server of
 * this model may be asked to load (sched/adapters.c). */
static void parse_adapters(struct ig_model_conf *mc, json_t *v, const char *where, size_t i, struct ig_buf *errs)
{
	const char *name;
	json_t *path;
	if (!json_is_object(v)) {
		ig_flags_problem(errs, "%s: models[%zu].adapters must be an object {\"NAME\": \"PATH\", ...}", where, i);
		return;
	}
	size_t n = json_object_size(v);
	mc->adapter_names = calloc(n ? n : 1, sizeof(char *));
	mc->adapter_paths = calloc(n ? n : 1, sizeof(char *));
	if (!mc->adapter_names || !mc->adapter_paths)
		abort();
	json_object_foreach(v, name, path) {
		/* vLLM's metric joins the names with commas: none in a name */
		if (!*name || strchr(name, ',')) {
			ig_flags_problem(errs, "%s: models[%zu].adapters: '%s' is not an adapter's name (not empty, no comma)",
					 where, i, name);
			continue;
		}
		if (!json_is_string(path) || !json_string_length(path)) {
			ig_flags_problem(errs, "%s: models[%zu].adapters.%s must be the adapter's path (a string)", where, i,
					 name);
			continue;
		}
		mc->adapter_names[mc->n_adapters] = strdup(name);
		mc->adapter_paths[mc->n_adapters++] = strdup(json_string_value(path));
	}
}

static void parse_models_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
			      struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	size_t i;
	json_t *o;
	if (!json_is_array(v)) {
		ig_flags_problem(errs, "%s: key 'models' must be a list of {\"name\", \"tokenizer\", \"chat_template\", "
				 "\"adapters\"}", where);
		return;
	}
	models_clear(cfg);
	json_array_foreach(v, i, o) {
		const char *k;
		json_t *x, *name = json_object_get(o, "name");
		if (!json_is_object(o) || !json_is_string(name) || !json_string_length(name)) {
			ig_flags_problem(errs, "%s: models[%zu] needs a \"name\" (the model's name, a string)", where, i);
			continue;
		}
		struct ig_model_conf *mc = model_add(cfg, json_string_value(name));
		json_object_foreach(o, k, x) {
			char **dst = strcmp(k, "tokenizer") == 0 ? &mc->tokenizer
				     : strcmp(k, "chat_template") == 0 ? &mc->chat_template
									: NULL;
			if (strcmp(k, "name") == 0)
				continue;
			if (strcmp(k, "adapters") == 0)
				parse_adapters(mc, x, where, i, errs);
			else if (!dst)
				ig_flags_problem(errs, "%s: models[%zu]: unknown key '%s' (name, tokenizer, chat_template, "
						 "adapters)", where, i, k);
			else if (!json_is_string(x) || !json_string_length(x))
				ig_flags_problem(errs, "%s: models[%zu].%s must be a file's path", where, i, k);
			else
				*dst = strdup(json_string_value(x));
		}
	}
}

void ig_prompt_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	for (size_t i = 0; i < cfg->n_models; i++) {
		const struct ig_model_conf *mc = &cfg->models[i];
		for (size_t j = 0; j < i; j++)
			if (strcmp(cfg->models[j].name, mc->name) == 0)
				ig_flags_problem(errs, "models[%zu]: model '%s' is given twice", i, mc->name);
		for (size_t a = 0; a < mc->n_adapters; a++)
			for (size_t j = 0; j <= i; j++) {
				const struct ig_model_conf *o = &cfg->models[j];
				bool twice = strcmp(o->name, mc->adapter_names[a]) == 0;
				for (size_t b = 0; !twice && b < (j == i ? a : o->n_adapters); b++)
					twice = strcmp(o->adapter_names[b], mc->adapter_names[a]) == 0;
				if (twice)
					ig_flags_problem(errs, "models[%zu].adapters: '%s' is given twice (an adapter's name "
							 "is a model name)", i, mc->adapter_names[a]);
			}
		if (!mc->tokenizer && !mc->n_adapters)
			ig_flags_problem(errs, "models[%zu]: model '%s' has no \"tokenizer\" (a tokenizer.json) nor "
					 "\"adapters\"", i, mc->name);
		if (mc->tokenizer && access(mc->tokenizer, R_OK) < 0)
			ig_flags_problem(errs, "models[%zu].tokenizer: '%s': %s", i, mc->tokenizer, strerror(errno));
		if (mc->chat_template && access(mc->chat_template, R_OK) < 0)
			ig_flags_problem(errs, "models[%zu].chat_template: '%s': %s", i, mc->chat_template,
					 strerror(errno));
	}
}

static json_t *models_json(const struct ig_flag *k IG_UNUSED, const struct ig_conf *cfg)
{
	json_t *v = json_array();
	for (size_t i = 0; i < cfg->n_models; i++) {
		const struct ig_model_conf *mc = &cfg->models[i];
		json_t *o = json_pack("{s:s}", "name", mc->name);
		if (mc->tokenizer)
			json_object_set_new(o, "tokenizer", json_string(mc->tokenizer));
		if (mc->chat_template)
			json_object_set_new(o, "chat_template", json_string(mc->chat_template));
		if (mc->n_adapters) {
			json_t *ad = json_object();
			for (size_t j = 0; j < mc->n_adapters; j++)
				json_object_set_new(ad, mc->adapter_names[j], json_string(mc->adapter_paths[j]));
			json_object_set_new(o, "adapters", ad);
		}
		json_array_append_new(v, o);
	}
	return v;
}

static const struct ig_flag prompt_rows[] = {
	{.name = "--tokenizer", .key = "models", .type = IG_FLAG_CUSTOM, .metavar = "MODEL=PATH",
	 .parse = parse_tokenizer_flag, .parse_json = parse_models_json,
	 .help = "MODEL's tokenizer.json (Hugging Face's format; its chat template from the tokenizer_config.json "
		 "beside it): the gateway counts and routes MODEL's prompts in its own tokens (the exact prefix "
		 "index of kv_events, tpm, /tokenize); repeatable, replaces the file's list; in the file "
		 "[{\"name\", \"tokenizer\", \"chat_template\", \"adapters\": {\"NAME\": \"PATH\"}}] (adapters: "
		 "the model's LoRA adapters, loaded where needed, docs/routing.md). Without one a model's prompt is counted at 4 bytes "
		 "a token, as infergate-sim counts it"},
};
const struct ig_conf_part ig_prompt_conf = IG_CONF_PART(prompt_rows, .to_json = models_json, .clear = models_clear);
