/* The input corpus: reading it line by line, and turning one line (OpenAI
 * Batch request, chat shorthand or prompt shorthand) into the request body
 * that is sent. Not for deciding what to send or sending it (the programs
 * that link this library). */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "infergate/util.h"
#include "infergate/batchfile.h"

static const char *ep_paths[IG_EP_COUNT] = {
	"/v1/chat/completions",
	"/v1/completions",
	"/v1/embeddings",
};
static const char *ep_names[IG_EP_COUNT] = {"chat", "completions", "embeddings"};

const char *ig_corpus_endpoint_path(enum ig_endpoint ep) { return ep_paths[ep]; }
const char *ig_corpus_endpoint_name(enum ig_endpoint ep) { return ep_names[ep]; }

void ig_corpus_line_clear(struct ig_corpus_line *l)
{
	free(l->custom_id);
	json_decref(l->body);
	memset(l, 0, sizeof(*l));
}

static int blank(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
			return 0;
	return 1;
}

/* Fills what the line did not set from the defaults, and forces streaming. */
static int apply_defaults(struct ig_corpus_line *l, const struct ig_corpus_defaults *d, char **err)
{
	json_t *b = l->body;

	if (!json_object_get(b, "model") && d->model)
		json_object_set_new(b, "model", json_string(d->model));
	json_t *m = json_object_get(b, "model");
	if (m && !json_is_string(m)) {
		*err = ig_strdupf("\"model\" must be a string");
		return -1;
	}
	l->model = m ? json_string_value(m) : NULL;
	if (!l->model || !*l->model) {
		*err = d->model_hint ? ig_strdupf("no model: give %s or set \"model\" in the line", d->model_hint)
				     : ig_strdupf("no model: set \"model\" in the line");
		return -1;
	}
	if (l->ep == IG_EP_EMBEDDINGS) {
		if (json_is_true(json_object_get(b, "stream"))) {
			*err = ig_strdupf("embeddings cannot stream");
			return -1;
		}
		return 0;
	}
	if (d->max_tokens >= 0 && !json_object_get(b, "max_tokens") &&
	    !json_object_get(b, "max_completion_tokens"))
		json_object_set_new(b, "max_tokens", json_integer(d->max_tokens));
	if (d->have_temperature && !json_object_get(b, "temperature"))
		json_object_set_new(b, "temperature", json_real(d->temperature));
	if (d->stream)
		json_object_set_new(b, "stream", json_true());
	json_t *s = json_object_get(b, "stream");
	if (s && !json_is_boolean(s)) {
		*err = ig_strdupf("\"stream\" must be true or false");
		return -1;
	}
	l->stream = json_is_true(s);
	if (l->stream) {
		/* usage only arrives in a final chunk when asked for */
		json_t *so = json_object_get(b, "stream_options");
		if (!so) {
			so = json_object();
			json_object_set_new(b, "stream_options", so);
		}
		if (!json_is_object(so)) {
			*err = ig_strdupf("\"stream_options\" must be an object");
			return -1;
		}
		json_object_set_new(so, "include_usage", json_true());
	}
	return 0;
}

static int parse_custom_id(json_t *obj, long lineno, struct ig_corpus_line *out, char **err)
{
	json_t *id = json_object_get(obj, "custom_id");
	if (!id || json_is_null(id)) {
		out->custom_id = ig_strdupf("line-%ld", lineno);
		return 0;
	}
	if (!json_is_string(id)) {
		*err = ig_strdupf("\"custom_id\" must be a string");
		return -1;
	}
	if (json_string_length(id) == 0) {
		*err = ig_strdupf("\"custom_id\" is empty");
		return -1;
	}
	if (strlen(json_string_value(id)) != json_string_length(id)) {
		*err = ig_strdupf("\"custom_id\" contains a NUL character");
		return -1;
	}
	out->custom_id = strdup(json_string_value(id));
	return 0;
}

/* An OpenAI Batch request line. */
static int parse_batch(json_t *obj, struct ig_corpus_line *out, char **err)
{
	json_t *method = json_object_get(obj, "method");
	if (method && (!json_is_string(method) || strcmp(json_string_value(method), "POST") != 0)) {
		*err = ig_strdupf("\"method\" must be \"POST\"");
		return -1;
	}
	json_t *url = json_object_get(obj, "url");
	if (!json_is_string(url)) {
		*err = ig_strdupf("\"url\" must be a string such as \"/v1/chat/completions\"");
		return -1;
	}
	const char *u = json_string_value(url);
	int ep = -1;
	for (int i = 0; i < IG_EP_COUNT; i++) {
		/* "/v1/x" or the path without /v1, as some tools write it */
		if (strcmp(u, ep_paths[i]) == 0 || strcmp(u, ep_paths[i] + 3) == 0)
			ep = i;
	}
	if (ep < 0) {
		*err = ig_strdupf("\"url\" '%s' is not /v1/chat/completions, /v1/completions or /v1/embeddings", u);
		return -1;
	}
	json_t *body = json_object_get(obj, "body");
	if (!json_is_object(body)) {
		*err = ig_strdupf("\"body\" must be a JSON object");
		return -1;
	}
	out->ep = (enum ig_endpoint)ep;
	out->body = json_deep_copy(body);
	if (ep == IG_EP_CHAT && !json_is_array(json_object_get(body, "messages"))) {
		*err = ig_strdupf("\"body\" of a chat request needs a \"messages\" array");
		return -1;
	}
	if (ep == IG_EP_COMPLETIONS && !json_object_get(body, "prompt")) {
		*err = ig_strdupf("\"body\" of a completions request needs a \"prompt\"");
		return -1;
	}
	if (ep == IG_EP_EMBEDDINGS && !json_object_get(body, "input")) {
		*err = ig_strdupf("\"body\" of an embeddings request needs an \"input\"");
		return -1;
	}
	return 0;
}

/* A shorthand line: the body itself, with custom_id beside its fields. */
static int parse_shorthand(json_t *obj, const struct ig_corpus_defaults *d, struct ig_corpus_line *out, char **err)
{
	json_t *messages = json_object_get(obj, "messages");
	json_t *prompt = json_object_get(obj, "prompt");

	if (messages && prompt) {
		*err = ig_strdupf("a line has \"messages\" or \"prompt\", not both");
		return -1;
	}
	if (messages) {
		if (!json_is_array(messages) || json_array_size(messages) == 0) {
			*err = ig_strdupf("\"messages\" must be a non-empty array");
			return -1;
		}
		if (d->endpoint == IG_EP_COMPLETIONS) {
			*err = ig_strdupf("a \"messages\" line cannot go to the completions endpoint");
			return -1;
		}
		out->ep = IG_EP_CHAT;
	} else if (prompt) {
		if (!json_is_string(prompt) && !json_is_array(prompt)) {
			*err = ig_strdupf("\"prompt\" must be a string or an array");
			return -1;
		}
		out->ep = d->endpoint == IG_EP_CHAT ? IG_EP_CHAT : IG_EP_COMPLETIONS;
	} else {
		*err = ig_strdupf("the line has none of \"body\" (Batch), \"messages\" or \"prompt\"");
		return -1;
	}
	out->body = json_deep_copy(obj);
	json_object_del(out->body, "custom_id");
	if (prompt && out->ep == IG_EP_CHAT) {
		if (!json_is_string(prompt)) {
			*err = ig_strdupf("a \"prompt\" array cannot go to the chat endpoint");
			return -1;
		}
		json_t *msgs = json_pack("[{s:s, s:O}]", "role", "user", "content", prompt);
		json_object_del(out->body, "prompt");
		json_object_set_new(out->body, "messages", msgs);
	}
	return 0;
}

int ig_corpus_parse(const char *text, size_t len, long lineno, const struct ig_corpus_defaults *d,
		    struct ig_corpus_line *out, char **err)
{
	json_error_t je;
	json_t *obj;
	char *why = NULL;

	memset(out, 0, sizeof(*out));
	obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	if (!obj) {
		*err = ig_strdupf("line %ld: not JSON (%s at column %d)", lineno, je.text, je.column);
		return -1;
	}
	if (!json_is_object(obj)) {
		why = ig_strdupf("not a JSON object");
		goto fail;
	}
	if (parse_custom_id(obj, lineno, out, &why) < 0)
		goto fail;
	if (json_object_get(obj, "body") || json_object_get(obj, "url")) {
		if (parse_batch(obj, out, &why) < 0)
			goto fail;
	} else if (parse_shorthand(obj, d, out, &why) < 0) {
		goto fail;
	}
	if (apply_defaults(out, d, &why) < 0)
		goto fail;
	json_decref(obj);
	return 0;
fail:
	*err = out->custom_id ? ig_strdupf("line %ld (custom_id '%s'): %s", lineno, out->custom_id, why)
			      : ig_strdupf("line %ld: %s", lineno, why);
	free(why);
	json_decref(obj);
	ig_corpus_line_clear(out);
	return -1;
}

int ig_corpus_line_id(const char *text, size_t len, long lineno, char **id, int *derived, char **err)
{
	struct ig_corpus_line l;
	char *why = NULL;
	json_t *obj = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);

	memset(&l, 0, sizeof(l));
	*id = NULL;
	if (!json_is_object(obj)) {
		*err = ig_strdupf("line %ld: not a JSON object", lineno);
		json_decref(obj);
		return -1;
	}
	json_t *given = json_object_get(obj, "custom_id");
	*derived = !given || json_is_null(given);
	if (parse_custom_id(obj, lineno, &l, &why) < 0) {
		*err = ig_strdupf("line %ld: %s", lineno, why);
		free(why);
		json_decref(obj);
		return -1;
	}
	json_decref(obj);
	*id = l.custom_id;
	return 0;
}

int ig_corpus_open(struct ig_corpus_reader *r, const char *path, char **err)
{
	struct stat st;

	memset(r, 0, sizeof(*r));
	r->index = -1;
	r->f = fopen(path, "re");
	if (!r->f) {
		*err = ig_strdupf("%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(r->f), &st) < 0 || !S_ISREG(st.st_mode)) {
		*err = ig_strdupf("%s: not a regular file (it is read twice)", path);
		fclose(r->f);
		r->f = NULL;
		return -1;
	}
	posix_fadvise(fileno(r->f), 0, 0, POSIX_FADV_SEQUENTIAL);
	return 0;
}

int ig_corpus_next(struct ig_corpus_reader *r)
{
	for (;;) {
		errno = 0;
		ssize_t n = getline(&r->line, &r->cap, r->f);
		if (n < 0)
			return ferror(r->f) ? -1 : 0;
		r->lineno++;
		r->offset = r->next_offset;
		r->next_offset += n;
		if (n > 0 && r->line[n - 1] == '\n')
			r->line[--n] = '\0';
		if (blank(r->line, (size_t)n))
			continue;
		r->len = (size_t)n;
		r->index++;
		return 1;
	}
}

int ig_corpus_unread(struct ig_corpus_reader *r)
{
	if (fseeko(r->f, r->offset, SEEK_SET) < 0)
		return -1;
	r->next_offset = r->offset;
	r->lineno--;
	r->index--;
	return 0;
}

void ig_corpus_close(struct ig_corpus_reader *r)
{
	if (r->f)
		fclose(r->f);
	free(r->line);
	memset(r, 0, sizeof(*r));
}

struct dup_cand {
	uint64_t h;
	char *id;
	long lineno;
};

static int cmp_cand(const void *a, const void *b)
{
	const struct dup_cand *x = a, *y = b;
	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	int c = strcmp(x->id, y->id);
	if (c)
		return c;
	return x->lineno < y->lineno ? -1 : x->lineno > y->lineno;
}

/* Second look at the ids whose hash was seen twice: compares the strings,
 * so a hash collision is never called a duplicate, and names both lines. */
int ig_corpus_duplicates(const char *path, const struct ig_corpus_defaults *d, const struct ig_idset *ambiguous,
			 void (*found)(void *ud, long lineno, const char *id, long first), void *ud, char **err)
{
	struct ig_corpus_reader r;
	struct dup_cand *c = NULL;
	int rc = 0;
	size_t n = 0, cap = 0;
	char *perr = NULL;

	if (ig_corpus_open(&r, path, err) < 0)
		return -1;
	int got;
	while ((got = ig_corpus_next(&r)) > 0) {
		struct ig_corpus_line l;
		if (ig_corpus_parse(r.line, r.len, r.lineno, d, &l, &perr) < 0) {
			free(perr);
			perr = NULL;
			continue;
		}
		uint64_t h = ig_idset_hash(l.custom_id, strlen(l.custom_id));
		if (ig_idset_get(ambiguous, h, NULL)) {
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				struct dup_cand *nc = realloc(c, cap * sizeof(*c));
				if (!nc) {
					ig_corpus_line_clear(&l);
					rc = -1;
					break;
				}
				c = nc;
			}
			c[n++] = (struct dup_cand){h, l.custom_id, r.lineno};
			l.custom_id = NULL;
		}
		ig_corpus_line_clear(&l);
	}
	ig_corpus_close(&r);
	if (rc < 0 || got < 0) {
		*err = ig_strdupf("%s: %s", path, rc < 0 ? "out of memory" : strerror(errno));
		rc = -1;
	}
	if (n > 1)
		qsort(c, n, sizeof(*c), cmp_cand);
	for (size_t i = 1; rc == 0 && i < n; i++) {
		size_t first = i - 1;
		while (first > 0 && c[first - 1].h == c[i].h && strcmp(c[first - 1].id, c[i].id) == 0)
			first--;
		if (c[i].h == c[i - 1].h && strcmp(c[i].id, c[i - 1].id) == 0)
			found(ud, c[i].lineno, c[i].id, c[first].lineno);
	}
	for (size_t i = 0; i < n; i++)
		free(c[i].id);
	free(c);
	return rc;
}
