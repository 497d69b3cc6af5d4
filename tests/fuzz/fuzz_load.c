/* libFuzzer target: the gateway's reading of a backend's load report
 * (loadreport.c ig_loadreport_parse: Prometheus gauges of SGLang and vLLM, SGLang's
 * /v1/loads and /get_load JSON) and the slot-count rule fed with what it
 * read (capacity.c ig_capacity_learn). A report is the backend's text, so any
 * bytes must give either "nothing found" (-1, -1) or two counts in
 * 0..IG_LOADREPORT_MAX (and a stated capacity only with them), and the rules
 * (ig_capacity_learn, and ig_capacity_report with capacities, finished
 * requests and missing reports) must keep their invariants over any sequence. */
#include "config.h"
#include <stdint.h>
#include <stdlib.h>

#include "fleet/capacity.h"
#include "fleet/loadreport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	long running = -1, waiting = -1, capacity = -1;

	ig_loadreport_parse((const char *)data, size, &running, &waiting, &capacity);
	if ((running < 0) != (waiting < 0))
		abort(); /* both found or neither */
	if (capacity == 0 || capacity > IG_LOADREPORT_MAX || (capacity > 0 && running < 0))
		abort(); /* a capacity is stated with a load, and sane */
	if (running > IG_LOADREPORT_MAX || waiting > IG_LOADREPORT_MAX || running < -1 || waiting < -1)
		abort();

	/* The same bytes as a sequence of reports (running, waiting, ours). */
	struct ig_slots s = {0};
	for (size_t i = 0; i + 3 <= size; i += 3) {
		long r = data[i] == 255 ? -1 : data[i], w = data[i + 1] == 255 ? -1 : data[i + 1];
		long ours = data[i + 2];
		long before = s.cur;
		long cur = ig_capacity_learn(&s, r, w, ours);
		if (cur != s.cur || cur < 0 || s.peak < 0 || s.calm < 0 || s.calm >= IG_SLOTS_PROBE_AFTER)
			abort();
		if (r < 0 || w < 0) {
			if (cur != before)
				abort(); /* nothing reported: nothing learned */
		} else if (w > 0) {
			/* queueing: at least one, at most what it runs (or one) */
			if (cur < 1 || cur > (r > 1 ? r : 1) || s.peak < cur)
				abort();
		} else if (cur < before) {
			abort(); /* no queue never lowers the limit */
		}
	}

	/* As reports with a stated capacity, finished requests and missing
	 * reports (running, waiting, capacity, ours; 254: none this time). */
	struct ig_slots t;
	bool stale;
	ig_capacity_reset(&t, true);
	for (size_t i = 0; i + 4 <= size; i += 4) {
		long r = data[i] == 255 ? -1 : data[i], w = data[i + 1] == 255 ? -1 : data[i + 1];
		long cap = data[i + 2] == 255 ? -1 : data[i + 2], ours = data[i + 3];
		if (data[i] == 254)
			ig_capacity_no_reports(&t);
		else if (data[i + 1] == 254)
			ig_capacity_done(&t, ours);
		else
			ig_capacity_report(&t, r, w, cap, ours, ours, i, &stale);
		if (t.cur < 0 || t.ramp < 0 || t.ramp > IG_SLOTS_RAMP_MAX || ig_capacity_limit(&t) < 0)
			abort();
		if (t.reported > 0 && t.cur > t.reported)
			abort(); /* never past what it states */
		if (t.cur > 0 && ig_capacity_from(&t) != IG_SLOTS_REPORTED && ig_capacity_from(&t) != IG_SLOTS_LEARNED)
			abort();
	}
	return 0;
}
