/* What infergate-bulk replay measured (replay_report.c): the per-request
 * line, the summary, the per-second CSV, its plot, the progress line. */
#ifndef IG_BULK_REPLAY_REPORT_H
#define IG_BULK_REPLAY_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "replay_state.h"

/* A request's ms of reported time: us of wall clock x time_scale / 1000. */
static inline double ig_replay_ms(const struct ig_replay *r, uint64_t us)
{
	return (double)us * r->o->time_scale / 1000.0;
}

/* TPOT of a record in reported ms: (end - first token) / (tokens - 1), or
 * -1 when it had fewer than 2 tokens. */
double ig_replay_tpot_ms(const struct ig_replay *r, const struct ig_replay_rec *x);
bool ig_replay_slo_met(const struct ig_replay *r, const struct ig_replay_rec *x);
/* The per-request line of request i (its record filled), as JSON. */
json_t *ig_replay_line_json(const struct ig_replay *r, size_t i, const char *backend, const char *error);
/* The summary (what --summary-json holds). */
json_t *ig_replay_summary_json(const struct ig_replay *r);
/* The summary for people. */
void ig_replay_print_summary(const struct ig_replay *r, const json_t *summary, FILE *f);
/* The per-second CSV. Returns 0, or -1 with errno. */
int ig_replay_write_csv(const struct ig_replay *r, const char *path);
/* --plot: gnuplot draws the CSV into path. Returns 0, or -1 with *err. */
int ig_replay_plot(const struct ig_replay *r, const char *csv, const char *path, char **err);
/* The live progress line (stderr): drawn when due, or always with force. */
void ig_replay_progress(struct ig_replay *r, uint64_t now_us, int force);

#endif
