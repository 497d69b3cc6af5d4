/* Deterministic answer text: words drawn by a PRNG seeded from the prompt
 * and --seed, so two requests with the same prompt get the same bytes
 * (streamed or not) and tests can compare them. Not a language model and
 * not a tokenizer: a "token" here is one word with its leading space. */
#include "config.h"
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
}

size_t sim_text_next(struct sim_text *t, char *out)
{
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
