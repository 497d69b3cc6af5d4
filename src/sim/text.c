/* Deterministic answer text: words drawn by a PRNG seeded from the prompt
 * and --seed, so two requests with the same prompt get the same bytes
 * (streamed or not) and tests can compare them. Not a language model: an
 * answer's "token" is one word with its leading space; a prompt's is 4
 * bytes (what /tokenize gives back). */
#include "config.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "text.h"

static const char *const words[] = {
	"the", "of", "and", "to", "in", "a", "is", "that", "for", "it",
	"as", "was", "with", "be", "by", "on", "not", "he", "this", "are",
	"or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
	"you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
	"been", "if", "more", "when", "will", "would", "who", "so", "no", "model",
	"token", "server", "request", "answer", "batch", "queue", "prompt", "latency", "cache", "memory",
	"simple", "quick", "gentle", "bright", "steady", "careful", "early", "late", "small", "large",
	"river", "mountain", "garden", "window", "engine", "signal", "harbor", "winter", "summer", "forest",
	"runs", "waits", "moves", "builds", "keeps", "finds", "takes", "gives", "holds", "turns",
	"always", "often", "rarely", "again", "together", "slowly", "quietly", "clearly", "nearly", "still",
	"network", "packet", "thread", "socket", "buffer", "stream", "kernel", "process", "cluster", "router",
	"ocean", "valley", "meadow", "lantern", "compass", "journey", "story", "letter", "morning", "evening",
	"green", "silver", "golden", "hollow", "distant", "open", "hidden", "certain",
};
#define NWORDS (sizeof(words) / sizeof(words[0]))

uint64_t sim_text_seed(const void *prompt, size_t n, uint64_t seed)
{
	return ig_hash64(prompt, n, seed * 0x9E3779B97F4A7C15ull + 1);
}

void sim_text_init(struct sim_text *t, uint64_t text_seed)
{
	t->state = text_seed;
	t->index = 0;
	t->capitalize = true;
	t->doc = NULL;
	t->doc_len = t->doc_at = 0;
}

void sim_text_doc(struct sim_text *t, const char *doc, size_t len)
{
	t->doc = doc;
	t->doc_len = doc ? len : 0;
	t->doc_at = 0;
}

size_t sim_text_next(struct sim_text *t, char *out)
{
	if (t->doc) {
		size_t n = 0;
		if (t->doc_at < t->doc_len) {
			n = strlen(t->doc + t->doc_at);
			memcpy(out, t->doc + t->doc_at, n);
			t->doc_at += n + 1;
		}
		out[n] = '\0';
		t->index++;
		return n;
	}
	uint64_t r = ig_rand_next(&t->state);
	const char *w = words[r % NWORDS];
	size_t n = 0;

	if (t->index > 0)
		out[n++] = ' ';
	size_t wl = strlen(w);
	memcpy(out + n, w, wl);
	if (t->capitalize)
		out[n] = (char)(out[n] - 'a' + 'A');
	n += wl;
	t->capitalize = false;
	unsigned p = (unsigned)((r >> 32) % 100);
	if (t->index > 0 && p < 9) {
		out[n++] = '.';
		t->capitalize = true;
	} else if (t->index > 0 && p < 16) {
		out[n++] = ',';
	}
	out[n] = '\0';
	t->index++;
	return n;
}

void sim_text_start(struct sim_text *t, uint64_t text_seed, long skip)
{
	char tok[SIM_TOKEN_MAX + 1];
	sim_text_init(t, text_seed);
	for (long i = 0; i < skip; i++)
		sim_text_next(t, tok);
}

long sim_text_prefix_words(uint64_t text_seed, const char *prefix, size_t n, long max)
{
	struct sim_text t;
	char tok[SIM_TOKEN_MAX + 1];
	size_t at = 0;
	sim_text_init(&t, text_seed);
	for (long k = 1; k <= max && at < n; k++) {
		size_t len = sim_text_next(&t, tok);
		if (len > n - at || memcmp(prefix + at, tok, len) != 0)
			return 0;
		at += len;
		if (at == n)
			return k;
	}
	return 0;
}

size_t sim_text_split(const char *prompt, size_t n, uint64_t seed, long *nwords)
{
	uint64_t h = sim_text_seed("", 0, seed);
	for (size_t k = 1; k < n; k++) {
		h = ig_hash64_more(h, prompt + k - 1, 1);
		if (prompt[k] < 'A' || prompt[k] > 'Z')
			continue;
		long w = sim_text_prefix_words(h, prompt + k, n - k, 1000000);
		if (w > 0) {
			*nwords = w;
			return k;
		}
	}
	return 0;
}

long sim_text_natural_tokens(uint64_t text_seed)
{
	uint64_t st = text_seed ^ 0x5851F42D4C957F2Dull;
	return 16 + (long)(ig_rand_next(&st) % 241);
}

long sim_text_prompt_tokens(size_t bytes)
{
	long n = (long)((bytes + 3) / 4);
	return n > 0 ? n : 1;
}

void sim_text_tokenize(const char *text, size_t n, json_t *arr)
{
	for (size_t i = 0; i < n; i += 4) {
		uint32_t id = 0;
		for (size_t k = 0; k < 4 && i + k < n; k++)
			id |= (uint32_t)(unsigned char)text[i + k] << (8 * k);
		json_array_append_new(arr, json_integer((json_int_t)id));
	}
}

char *sim_text_detokenize(json_t *ids)
{
	size_t i, len = 0;
	json_t *v;
	char *out = malloc(json_array_size(ids) * 4 + 1);
	if (!out)
		return NULL;
	json_array_foreach(ids, i, v) {
		json_int_t id = json_integer_value(v);
		if (!json_is_integer(v) || id < 0 || id > 0xFFFFFFFFll) {
			free(out);
			return NULL;
		}
		for (int k = 0; k < 4; k++)
			if ((id >> (8 * k)) & 0xFF)
				out[len++] = (char)((id >> (8 * k)) & 0xFF);
	}
	out[len] = '\0';
	return out;
}
