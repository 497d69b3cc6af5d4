/* Micro-benchmark of the exact prefix index (src/gateway/sched/kvindex.c):
 * its memory per million blocks (its own accounting, and the process's
 * RSS), the time to apply a million stored blocks, and a pick's lookup of
 * a 100k-token prompt over 8 and 200 sources, each next to the floor
 * measured in the same run: hashing the same tokens into their chain of
 * ig_block_hash, which the index must do anyway. Run by hand:
 *   make tests/tools/kvindex_bench && ./tests/tools/kvindex_bench [blocks]
 * Not a test: prints figures, asserts nothing about time. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "infergate/blockhash.h"
#include "infergate/util.h"
#include "sched/kvindex.h"

#define BS 16
#define CHAIN 128        /* blocks of one cached prompt */
#define EVENT 32         /* blocks a STORED event (a prefill's new blocks) */
#define PROMPT 100000    /* tokens of the looked-up prompt */
#define REPS 101

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static size_t rss(void)
{
	long pages = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

static uint32_t *random_tokens(size_t n, uint64_t seed)
{
	uint32_t *t = malloc(n * sizeof(*t));
	if (!t) {
		perror("malloc");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		t[i] = (uint32_t)(ig_rand_next(&seed) % 150000); /* a vocabulary's ids */
	return t;
}

/* Source src stores blocks [0, nb) of tokens as one chain, in events of
 * EVENT blocks, engine hashes from h0. */
static void store_chain(struct ig_kvindex *ix, size_t src, uint32_t *tok, size_t nb, uint64_t h0)
{
	uint64_t h[EVENT];
	for (size_t b = 0; b < nb; b += EVENT) {
		size_t n = nb - b < EVENT ? nb - b : EVENT;
		for (size_t i = 0; i < n; i++)
			h[i] = h0 + b + i;
		uint64_t parent = h0 + b - 1;
		struct ig_kv_event ev = {.kind = IG_KV_STORED, .hashes = h, .nhashes = n, .has_parent = b > 0,
					 .parent = parent, .tokens = tok + b * BS, .ntokens = n * BS,
					 .block_size = BS, .lora_id = -1, .gpu = true};
		ig_kvindex_apply(ix, src, &ev);
	}
}

/* blocks spread over nsrc sources in chains of CHAIN, each its own tokens
 * (one holder a block). Returns the time taken, us. */
static double fill(struct ig_kvindex *ix, size_t nsrc, const uint32_t *tok, size_t blocks)
{
	double t0 = now_us();
	for (size_t c = 0; c * CHAIN < blocks; c++)
		store_chain(ix, c % nsrc, (uint32_t *)tok + c * CHAIN * BS, CHAIN, (uint64_t)c * CHAIN + 1);
	return now_us() - t0;
}

/* The floor of fill: the same blocks' keys alone. */
static double hash_only(const uint32_t *tok, size_t blocks, uint64_t *sink)
{
	double t0 = now_us();
	uint64_t x = 0;
	for (size_t c = 0; c * CHAIN < blocks; c++) {
		uint64_t k = 0;
		for (size_t b = 0; b < CHAIN; b++)
			k = ig_block_hash(k, (const char *)(tok + (c * CHAIN + b) * BS), BS * 4);
		x ^= k;
	}
	*sink ^= x;
	return now_us() - t0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Median of REPS matches of the prompt, us; of matches on its chain of keys
 * hashed beforehand (the gateway's pick: the request's chain is hashed once
 * at admission, ig_block_chain_ids); and the chain's own hashing. */
static void time_match(struct ig_kvindex *ix, size_t nsrc, const uint32_t *prompt, double *match, double *chained,
		       double *floor, uint32_t *m, uint64_t *sink)
{
	double a[REPS], b[REPS], c[REPS];
	uint64_t *chain = malloc(PROMPT / BS * sizeof(*chain));
	if (!chain)
		exit(1);
	size_t nb = ig_block_chain_ids(prompt, PROMPT, chain, PROMPT / BS);
	for (int r = 0; r < REPS; r++) {
		double t0 = now_us();
		ig_kvindex_match_chain(ix, chain, nb, m);
		c[r] = now_us() - t0;
		t0 = now_us();
		ig_kvindex_match(ix, prompt, PROMPT, m);
		a[r] = now_us() - t0;
		t0 = now_us();
		uint64_t k = 0;
		for (size_t i = 0; i < PROMPT / BS; i++)
			k = ig_block_hash(k, (const char *)(prompt + i * BS), BS * 4);
		b[r] = now_us() - t0;
		*sink ^= k + m[nsrc - 1];
	}
	qsort(a, REPS, sizeof(double), cmp);
	qsort(b, REPS, sizeof(double), cmp);
	qsort(c, REPS, sizeof(double), cmp);
	*match = a[REPS / 2];
	*chained = c[REPS / 2];
	*floor = b[REPS / 2];
	free(chain);
}

static void matches(const char *what, struct ig_kvindex *ix, size_t nsrc, const uint32_t *prompt, uint64_t *sink)
{
	uint32_t *m = calloc(nsrc, sizeof(*m));
	double us, ch, fl;
	time_match(ix, nsrc, prompt, &us, &ch, &fl, m, sink);
	size_t best = 0, held = 0;
	for (size_t s = 0; s < nsrc; s++) {
		best = m[s] > best ? m[s] : best;
		held += m[s] > 0;
	}
	printf("match %d tokens, %zu sources, %s: %.0f us median (%zu sources matched, the best %zu tokens); "
	       "floor (its %d keys hashed): %.0f us; %.2fx; on its chain hashed beforehand (a pick): %.0f us\n",
	       PROMPT, nsrc, what, us, held, best, PROMPT / BS, fl, us / fl, ch);
	free(m);
}

int main(int argc, char **argv)
{
	size_t blocks = argc > 1 ? strtoul(argv[1], NULL, 10) : 1000000;
	blocks = (blocks + CHAIN - 1) / CHAIN * CHAIN;
	uint64_t sink = 0;
	printf("kvindex_bench: %zu blocks of %d tokens, chains of %d, STORED events of %d blocks; %ld CPUs\n", blocks,
	       BS, CHAIN, EVENT, sysconf(_SC_NPROCESSORS_ONLN));

	/* 1. memory and apply: 8 sources, one holder a block */
	uint32_t *tok = random_tokens(blocks * BS, 1);
	uint32_t *prompt = random_tokens(PROMPT, 2);
	double ref = hash_only(tok, blocks, &sink);
	size_t rss0 = rss();
	struct ig_kvindex *ix = ig_kvindex_new(8, blocks * 4);
	double took = fill(ix, 8, tok, blocks);
	struct ig_kvindex_stats st;
	ig_kvindex_stats(ix, IG_KVINDEX_ALL, &st);
	size_t rss1 = rss();
	double per = 1e6 / (double)st.blocks;
	printf("memory, 8 sources, one holder a block: %zu bytes per million blocks by the index's count, "
	       "%zu by RSS\n", (size_t)((double)st.bytes * per), (size_t)((double)(rss1 - rss0) * per));
	printf("apply %zu stored blocks: %.0f ms (%.0f ns a block); floor (their keys hashed alone): %.0f ms; %.2fx\n",
	       (size_t)st.blocks, took / 1e3, took * 1e3 / (double)st.blocks, ref / 1e3, took / ref);

	/* 2. a 100k-token prompt among those: source 3 holds it all, source 5
	 * its first half */
	store_chain(ix, 3, prompt, PROMPT / BS, 1ull << 40);
	store_chain(ix, 5, prompt, PROMPT / BS / 2, 1ull << 40);
	matches("one holds it, one half", ix, 8, prompt, &sink);
	ig_kvindex_free(ix);

	/* 3. 200 sources: the same blocks spread, the prompt's first 1000 blocks
	 * (a long shared system prompt) held by all, the whole by 10 */
	ix = ig_kvindex_new(200, blocks + 200 * (PROMPT / BS) + 1000);
	fill(ix, 200, tok, blocks);
	for (size_t s = 0; s < 200; s++)
		store_chain(ix, s, prompt, s % 20 == 0 ? PROMPT / BS : 1000, 1ull << 40);
	matches("all hold 16k tokens, 10 all", ix, 200, prompt, &sink);
	/* the worst: all 200 hold it all (1.25M more pairs) */
	for (size_t s = 0; s < 200; s++)
		store_chain(ix, s, prompt, PROMPT / BS, 1ull << 40);
	matches("all hold it all", ix, 200, prompt, &sink);
	ig_kvindex_stats(ix, IG_KVINDEX_ALL, &st);
	/* (no RSS here: the heap part 1 freed is reused, the growth is not this index's size) */
	printf("memory, 200 sources, %zu pairs (%zu of them on 6250 shared keys; %zu dropped at the bound): %zu bytes "
	       "per million pairs by the index's count\n", (size_t)st.blocks, (size_t)200 * (PROMPT / BS),
	       (size_t)st.full, (size_t)((double)st.bytes * 1e6 / (double)st.blocks));
	/* 4. nothing held: the first block's miss ends it */
	uint32_t *other = random_tokens(PROMPT, 3);
	matches("none holds it", ix, 200, other, &sink);
	ig_kvindex_free(ix);
	free(tok);
	free(prompt);
	free(other);
	return sink == 42; /* keeps the hashing from being optimised away */
}
