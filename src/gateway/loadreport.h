/* A backend's load report: running and waiting requests, as SGLang and vLLM
 * tell them. */
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
 * or both to -1 when the text tells neither. */
void ig_loadreport_parse(const char *text, size_t len, long *running, long *waiting);

#endif
