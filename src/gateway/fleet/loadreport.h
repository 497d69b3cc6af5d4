/* A backend's load report: running and waiting requests, as SGLang and vLLM
 * tell them, and the capacity a server states (SGLang's /v1/loads). */
#ifndef IG_LOADREPORT_H
#define IG_LOADREPORT_H

#include <stddef.h>

/* Counts above this are clamped (a report is the backend's text). */
#define IG_LOADREPORT_MAX 1000000000L

/* Reads the backend's own counts of running and waiting requests from any
 * of: SGLang's or vLLM's /metrics gauges (summed over data-parallel ranks
 * and engines; SGLang's per-priority series skipped), SGLang's /v1/loads
 * ({"loads": [...]} one entry per rank) or /get_load (an object, or a list
 * per rank, whose num_reqs is running + waiting). Sets both to 0..IG_LOADREPORT_MAX,
 * or both to -1 when the text tells neither.
 * *capacity: the requests it runs at once by its own configuration, the sum
 * over ranks of /v1/loads' max_running_requests (sgl-project/sglang
 * python/sglang/srt/managers/io_struct.py, GetLoadsReqOutput); -1 when the
 * report does not state it. vLLM states it nowhere a client can read in
 * production: its /metrics has the KV cache's configuration only
 * (vllm:cache_config_info, vllm/v1/metrics/loggers.py), and /server_info,
 * which has scheduler_config.max_num_seqs, is served only with
 * VLLM_SERVER_DEV_MODE (vllm/entrypoints/openai/api_server.py). */
void ig_loadreport_parse(const char *text, size_t len, long *running, long *waiting, long *capacity);
/* The same for one data-parallel rank of the server (rank < 0: all, as
 * above): the Prometheus samples whose dp_rank (SGLang) or engine (vLLM)
 * label is `rank` (a sample without either is rank 0's), the JSON objects
 * whose "dp_rank" is `rank` (one without it: its place in the list). */
void ig_loadreport_parse_rank(const char *text, size_t len, long rank, long *running, long *waiting,
			      long *capacity);

#endif
