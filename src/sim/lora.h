/* LoRA adapters as vLLM and SGLang serve them (lora.c): the adapters a
 * server knows (from its flags, or loaded at run time), which of them each
 * data-parallel rank holds in its GPU slots, and the batch rule that keeps
 * a request for an adapter waiting while the batch has as many distinct
 * adapters as it may. Pure bookkeeping, no time and no HTTP: the engine
 * asks it at admission, the HTTP side for the load and unload endpoints,
 * metrics.c for vLLM's lora_requests_info. */
#ifndef IG_SIM_LORA_H
#define IG_SIM_LORA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infergate/buf.h"

struct sim_lora {
	char *name, *path;
	bool gone;          /* unloaded: the entry stays, so the indexes that
			     * requests hold stay valid; the name is free again */
	long *running;      /* per rank: its requests running there */
	uint64_t *resident; /* per rank: when its GPU slot was last used (LRU);
			     * 0: not in a slot, the next use loads it */
};

struct sim_loras {
	struct sim_lora *a;
	size_t n, cap;
	long nranks;
	long max_batch;     /* distinct adapters in a rank's batch: vLLM's
			     * max_loras, SGLang's max_loras_per_batch */
	bool count_base;    /* SGLang: the base model is one of them */
	long max_loaded;    /* adapters known at once: vLLM's max_cpu_loras,
			     * SGLang's max_loaded_loras; 0: no limit */
	long *base_running; /* per rank: running requests without an adapter */
	uint64_t clock;     /* LRU stamps */
};

/* Returns 0, or -1 when out of memory. */
int sim_loras_init(struct sim_loras *l, long nranks, long max_batch, bool count_base, long max_loaded);
void sim_loras_free(struct sim_loras *l);
/* The index of the adapter called name, or -1. */
int sim_loras_find(const struct sim_loras *l, const char *name);
/* Adapters known now (not unloaded). */
size_t sim_loras_count(const struct sim_loras *l);

enum sim_lora_add {
	SIM_LORA_ADDED = 0,
	SIM_LORA_EXISTS = -1, /* the name is taken */
	SIM_LORA_FULL = -2,   /* max_loaded adapters are known already */
	SIM_LORA_NOMEM = -3,
};
/* Registers name -> path; *idx gets its index when added. */
enum sim_lora_add sim_loras_add(struct sim_loras *l, const char *name, const char *path, int *idx);
/* Forgets the adapter called name (its running requests finish with it).
 * Returns 0, or -1 when no adapter has that name. */
int sim_loras_remove(struct sim_loras *l, const char *name);

/* Whether a request for adapter `want` (-1: the base model) may join rank's
 * running batch now. The base model always may; an adapter already in the
 * batch may; another only while the batch has fewer than max_batch distinct
 * adapters (SGLang counting the base model among them when it runs). */
bool sim_loras_fits(const struct sim_loras *l, long rank, int want);
/* A request for `want` joins rank's batch. Returns true when the adapter
 * was not in one of the rank's max_batch GPU slots: it is loaded now (the
 * least recently used adapter with nothing running leaves its slot), and
 * the caller charges the load time. */
bool sim_loras_activate(struct sim_loras *l, long rank, int want);
/* A request for `want` left rank's batch (finished, aborted, preempted). */
void sim_loras_deactivate(struct sim_loras *l, long rank, int want);

/* "NAME=PATH" (a bare PATH: its name is the path, as SGLang's --lora-paths
 * takes it). Returns 0 with *name and *path malloc'd, or -1 when a part is
 * empty. */
int sim_lora_split(const char *arg, char **name, char **path);
/* argv with "--lora-modules A B C" (and --lora-paths) written as the flag
 * once per value, "--lora-modules A --lora-modules B ...", as argparse's
 * nargs="+" takes them: every argument after the flag up to the next one
 * starting with "--". Returns a malloc'd array of *argc_out pointers into
 * argv (NULL-terminated), or NULL when out of memory. */
char **sim_lora_expand_argv(int argc, char **argv, int *argc_out);

/* vLLM's lora_requests_info gauge (vllm/v1/metrics/loggers.py): running and
 * waiting are comma-joined adapter names, in the order the adapters were
 * first seen by the scheduler (here: their index order). waiting[i] is the
 * count of waiting requests for adapter i (l->n entries). */
void sim_loras_metric(const struct sim_loras *l, const long *waiting, double now_s, struct ig_buf *out);

/* POST /v1/load_lora_adapter, /v1/unload_lora_adapter (vLLM) and
 * /load_lora_adapter, /unload_lora_adapter (SGLang): body {"lora_name",
 * "lora_path"} or {"lora_name"}. The answer: status, and either body
 * (malloc'd, of type ctype) or, body NULL, an error of type `type` with
 * msg (malloc'd) for the caller to write in the flavor's error shape. */
struct sim_lora_answer {
	unsigned status;
	char *body;
	const char *ctype;
	const char *type;
	char *msg;
};
void sim_lora_update(struct sim_loras *l, bool enabled, bool vllm, bool load, const char *body, size_t len,
		     struct sim_lora_answer *a);

#endif
