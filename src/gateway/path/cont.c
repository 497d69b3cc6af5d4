/* A broken stream continued on another backend (cont.h). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "path/cont.h"
#include "path/structured.h"

void ig_cont_init(struct ig_cont *c, int max)
{
	memset(c, 0, sizeof(*c));
	c->max = max;
	ig_buf_init(&c->text);
}

void ig_cont_free(struct ig_cont *c)
{
	json_decref(c->head);
	c->head = NULL;
	ig_buf_free(&c->text);
}

bool ig_cont_possible(const struct ig_cont *c)
{
	return c->max > 0 && !c->dead && c->count < c->max;
}

void ig_cont_begin(struct ig_cont *c)
{
	c->count++;
	c->tokens_before = c->tokens;
	c->cont_attempt = true;
	c->broken = false;
}

static void kill_cont(struct ig_cont *c, const char *why)
{
	if (!c->dead) {
		c->dead = true;
		c->dead_why = why;
		ig_buf_free(&c->text); /* never sent again */
	}
}

static bool nonempty_string(json_t *v)
{
	return json_is_string(v) && json_string_length(v) > 0;
}

/* The text of one parsed event's choice, counted; what makes the stream
 * one that cannot be continued, noted. */
static void take_parsed(struct ig_cont *c, json_t *o)
{
	json_t *choices = json_object_get(o, "choices");
	if (!json_is_array(choices) || json_array_size(choices) == 0)
		return;
	if (json_array_size(choices) > 1) {
		kill_cont(c, "the stream has several choices");
		return;
	}
	json_t *ch = json_array_get(choices, 0), *idx = json_object_get(ch, "index");
	if (json_is_integer(idx) && json_integer_value(idx) != 0) {
		kill_cont(c, "the stream has several choices");
		return;
	}
	json_t *delta = json_object_get(ch, "delta"), *text;
	if (json_is_object(delta)) {
		json_t *tc = json_object_get(delta, "tool_calls");
		if (json_is_array(tc) && json_array_size(tc) > 0)
			kill_cont(c, "the stream carried tool calls");
		if (nonempty_string(json_object_get(delta, "reasoning_content")) ||
		    nonempty_string(json_object_get(delta, "reasoning")))
			kill_cont(c, "the stream carried reasoning text");
		text = json_object_get(delta, "content");
	} else {
		text = json_object_get(ch, "text");
	}
	if (nonempty_string(text) && !c->dead) {
		ig_buf_append(&c->text, json_string_value(text), json_string_length(text));
		c->tokens++;
	}
}

/* The string value after the first `key` (quoted, with its colon) in d,
 * or NULL: a key followed by ':' cannot occur inside a JSON string, where
 * quotes are escaped (relay.c's usage_from_json reads "usage" so). */
static json_t *string_after(const char *d, size_t dn, const char *key)
{
	size_t kn = strlen(key);
	const char *end = d + dn, *p = memmem(d, dn, key, kn);
	if (!p)
		return NULL;
	p += kn;
	json_t *v = json_loadb(p, (size_t)(end - p), JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, NULL);
	if (!json_is_string(v)) {
		json_decref(v);
		return NULL;
	}
	return v;
}

/* An event of a continuation in the first attempt's name: its id, created
 * and model; its usage the whole stream's (the prompt as the client sent
 * it, the completion tokens of every attempt). */
static void rename_event(struct ig_cont *c, json_t *o)
{
	const char *k;
	json_t *v;
	json_object_foreach(c->head, k, v)
		if (json_object_get(o, k))
			json_object_set(o, k, v);
	json_t *u = json_object_get(o, "usage");
	if (!json_is_object(u))
		return;
	json_t *p = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
	if (!json_is_integer(p) || !json_is_integer(ct))
		return;
	long pt = (long)json_integer_value(p), done = c->tokens_before;
	c->reprefilled += pt;
	/* the continuation's prompt holds the text relayed before it */
	long prompt = pt > done ? pt - done : 0, completion = (long)json_integer_value(ct) + done;
	json_object_set_new(u, "prompt_tokens", json_integer(prompt));
	json_object_set_new(u, "completion_tokens", json_integer(completion));
	if (json_object_get(u, "total_tokens"))
		json_object_set_new(u, "total_tokens", json_integer(prompt + completion));
}

/* A continuation's opening chunk: the role, no text, no end. */
static bool role_only(json_t *o)
{
	json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
	json_t *delta = json_object_get(ch, "delta"), *fr = json_object_get(ch, "finish_reason");
	if (!json_is_object(delta) || !json_object_get(delta, "role") || (fr && !json_is_null(fr)))
		return false;
	json_t *content = json_object_get(delta, "content");
	json_t *tc = json_object_get(delta, "tool_calls");
	return (!content || json_is_null(content) || json_string_length(content) == 0) &&
	       (!tc || json_is_null(tc) || json_array_size(tc) == 0);
}

enum ig_cont_action ig_cont_event(struct ig_cont *c, const char *d, size_t dn, char **out)
{
	*out = NULL;
	if (c->max <= 0 || (dn == 6 && memcmp(d, "[DONE]", 6) == 0))
		return IG_CONT_KEEP;
	bool suspect = memmem(d, dn, "\"tool_calls\"", 12) || memmem(d, dn, "\"reasoning", 10) ||
		       memmem(d, dn, "\"index\":1", 9);
	if (c->head && !c->cont_attempt && !suspect) {
		/* The common case: the text read without parsing the event. */
		if (c->dead)
			return IG_CONT_KEEP;
		json_t *t = string_after(d, dn, "\"content\":");
		if (!t && !memmem(d, dn, "\"content\":", 10))
			t = string_after(d, dn, "\"text\":");
		if (t && json_string_length(t) > 0) {
			ig_buf_append(&c->text, json_string_value(t), json_string_length(t));
			c->tokens++;
		}
		json_decref(t);
		return IG_CONT_KEEP;
	}
	json_t *o = json_loadb(d, dn, 0, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		return IG_CONT_KEEP;
	}
	enum ig_cont_action act = IG_CONT_KEEP;
	if (!c->head) {
		c->head = json_object();
		static const char *const keep[] = {"id", "created", "model"};
		for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
			json_t *v = json_object_get(o, keep[i]);
			if (v)
				json_object_set(c->head, keep[i], v);
		}
	} else if (c->cont_attempt) {
		if (role_only(o)) {
			json_decref(o);
			return IG_CONT_DROP;
		}
		rename_event(c, o);
		*out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		act = *out ? IG_CONT_REWRITE : IG_CONT_KEEP;
	}
	take_parsed(c, o);
	json_decref(o);
	return act;
}

/* Takes n tokens off an integer member, when there is one. Returns 0, or
 * -1 when nothing would be left of it. */
static int reduce(json_t *o, const char *key, long n, bool floor0)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_integer(v))
		return 0;
	long left = (long)json_integer_value(v) - n;
	if (left < 1) {
		if (!floor0)
			return -1;
		left = 0;
	}
	json_object_set_new(o, key, json_integer(left));
	return 0;
}

static char *append_string(json_t *s, const struct ig_buf *text)
{
	size_t n = json_string_length(s);
	char *joined = malloc(n + text->len + 1);
	if (!joined)
		return NULL;
	memcpy(joined, json_string_value(s), n);
	memcpy(joined + n, text->data, text->len);
	joined[n + text->len] = '\0';
	return joined;
}

/* The chat body: the partial answer is the final assistant message to go
 * on from (appended to one the client already gave to continue). */
static const char *chat_body(const struct ig_cont *c, json_t *o, json_t *msgs)
{
	if (!c->text.len)
		return NULL; /* nothing relayed yet: the request as it was */
	json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
	json_t *role = json_object_get(last, "role"), *content = json_object_get(last, "content");
	if (json_is_true(json_object_get(o, "continue_final_message")) && json_is_string(role) &&
	    strcmp(json_string_value(role), "assistant") == 0 && json_is_string(content)) {
		char *joined = append_string(content, &c->text);
		if (!joined)
			return "out of memory";
		json_object_set_new(last, "content", json_stringn(joined, strlen(joined)));
		free(joined);
	} else {
		json_array_append_new(msgs, json_pack("{s:s, s:s%}", "role", "assistant", "content", c->text.data,
						      c->text.len));
	}
	json_object_set_new(o, "continue_final_message", json_true());
	json_object_set_new(o, "add_generation_prompt", json_false());
	return NULL;
}

/* The completions body: the prompt plus the text so far. */
static const char *completion_body(const struct ig_cont *c, json_t *o)
{
	json_t *prompt = json_object_get(o, "prompt"), *holder = o;
	if (json_is_true(json_object_get(o, "echo")))
		return "the request asked for echo";
	if (json_is_array(prompt) && json_array_size(prompt) == 1) {
		holder = prompt;
		prompt = json_array_get(prompt, 0);
	}
	if (!json_is_string(prompt))
		return "the prompt is token ids or several prompts";
	if (!c->text.len)
		return NULL;
	char *joined = append_string(prompt, &c->text);
	if (!joined)
		return "out of memory";
	json_t *s = json_stringn(joined, strlen(joined));
	free(joined);
	if (holder == o)
		json_object_set_new(o, "prompt", s);
	else
		json_array_set_new(holder, 0, s);
	return NULL;
}

char *ig_cont_body(const struct ig_cont *c, const char *body, size_t len, const char **why)
{
	if (c->dead) {
		*why = c->dead_why;
		return NULL;
	}
	json_t *o = json_loadb(body, len, 0, NULL), *n, *msgs;
	char *out = NULL;
	*why = NULL;
	if (!json_is_object(o))
		*why = "the request body is gone";
	/* A constrained answer (structured.h) is never continued: the next
	 * server would start its grammar again after the partial answer, and
	 * the client would get two documents spliced. Hedging and retries
	 * never splice two servers' bytes: a retry starts only before a
	 * stream's first event went out (proxy.c end_attempt: !committed),
	 * and a hedge's loser is dropped at its first byte (relay_first_byte);
	 * continuation is the one strategy that joins two answers. */
	else if (ig_structured_output(o))
		*why = "the request constrains its answer (structured output): another server would start its grammar "
		       "again";
	else if (json_is_integer(n = json_object_get(o, "n")) && json_integer_value(n) > 1)
		*why = "the request asked for several choices (n > 1)";
	else if (json_is_array(msgs = json_object_get(o, "messages")) && json_array_size(msgs) > 0)
		*why = chat_body(c, o, msgs);
	else
		*why = completion_body(c, o);
	if (!*why && (reduce(o, "max_tokens", c->tokens, false) < 0 ||
		      reduce(o, "max_completion_tokens", c->tokens, false) < 0))
		*why = "every token asked for was relayed before the stream broke";
	if (!*why) {
		reduce(o, "min_tokens", c->tokens, true);
		if (!(out = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER)))
			*why = "out of memory";
	}
	json_decref(o);
	return out;
}
