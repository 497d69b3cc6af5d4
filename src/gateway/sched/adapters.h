/* LoRA adapters as a resource of the fleet: which adapters each server
 * holds (its /v1/models list, and the loads and unloads this gateway made),
 * where an adapter's request goes (a server that holds it), and the load of
 * an adapter on another server of its base model when those are busy and it
 * has room under its max_loras, unloading its least recently used idle
 * adapter first when it has none; one load of an adapter at a time, however
 * many of its requests wait (they wait in their model's queue, woken when
 * the load ends). Loads and unloads are counted and timed (/metrics,
 * /health/backends).
 *
 * An adapter is a model name (the scheduler's queues, keys, limits, usage
 * take it as one): configured in models[].adapters (its base model is the
 * entry's name) or listed by a server's /v1/models with a "parent" (vLLM's
 * way, vllm/entrypoints/openai/serving_models.py show_available_models).
 *
 * Not here: the queue (dispatch.c, which calls this module around its
 * picks), the HTTP of a proxied request. Everything is under the gateway's
 * lock; the load and unload transfers are reactor 0's. */
#ifndef IG_ADAPTERS_H
#define IG_ADAPTERS_H

#include <jansson.h>
#include <stdbool.h>

#include "sched/policy.h"

struct ig_gw;
struct ig_backend;
struct ig_adapters;

/* Sets gw->adapters up: its timer (the transfers start on reactor 0) and
 * its /metrics families. Returns 0, or -1 out of memory. */
int ig_adapters_init(struct ig_gw *gw);
/* Stops the transfers (on reactor 0's thread, at the stop) and frees. */
void ig_adapters_free(struct ig_gw *gw);

/* When `model` is an adapter: picks among the servers that hold it with
 * policy p (as ig_policy_pick does), and when none takes the request, may
 * start a load elsewhere; *got: IG_PICK_OK (*out set, its slot taken),
 * IG_PICK_BUSY (wait: those are full, or a load is under way, or room may
 * come), IG_PICK_NONE (no server of its base model is up). Returns false,
 * touching nothing, when model is no adapter. */
bool ig_adapters_pick(struct ig_gw *gw, const char *model, const struct ig_policy *p, void *state, unsigned *rotor,
		      struct ig_pick_req *rq, struct ig_backend **out, enum ig_pick *got);
/* A request of model started on b / ended there (its use and the LRU).
 * started returns whether b takes the adapter as "lora_path" (SGLang, which
 * reads "model" as its base model unless it is "BASE:ADAPTER":
 * sgl-project/sglang python/sglang/srt/entrypoints/openai/serving_base.py)
 * rather than as "model" (vLLM). */
bool ig_adapters_started(struct ig_gw *gw, const char *model, const struct ig_backend *b);
void ig_adapters_ended(struct ig_gw *gw, const char *model, const struct ig_backend *b);
/* /health/backends: b's "lora" {max_loras, max_loras_from ("config",
 * "learned", "none"), resident, loading} once an adapter is known or b has
 * a limit. */
void ig_adapters_report_backend(const struct ig_gw *gw, const struct ig_backend *b, json_t *entry);
/* The limit of adapters the gateway keeps on b: backends[].max_loras, else
 * what it said (vLLM's max_lora, SGLang's max_loras_per_batch), else 0
 * (none loaded by it). */
long ig_adapters_max(const struct ig_backend *b);

#endif
