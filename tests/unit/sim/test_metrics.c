/* Unit tests for src/sim/metrics.c: the bodies of the simulator's reports
 * from an engine driven by hand. The exposition lines of each flavor byte
 * for byte (SGLang's sorted label set, dp_rank only with several ranks,
 * priority only with priority scheduling, prometheus_client's floats;
 * vLLM's engine label and finished_reason), the simulator's own series,
 * /v1/loads' rank selection and /sim/state. No socket. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "metrics.h"
#include "../check_main.h"

static struct sim_conf conf;
static struct sim sim;
static struct sim_req reqs[4];
static size_t nreqs;

/* A simulator with the given flavor and ranks, unpaced, nothing run. */
static void setup(int flavor, long ranks, bool priorities)
{
	memset(&conf, 0, sizeof(conf));
	memset(&sim, 0, sizeof(sim));
	conf.model = "m";
	conf.flavor = flavor;
	conf.max_running = 1;
	conf.dp_ranks = ranks;
	conf.ttft_ms = 60000; /* admitted requests stay running */
	conf.priority_scheduling = priorities;
	conf.preempt_threshold = 10;
	sim.conf = &conf;
	ck_assert_int_eq(sim_engine_init(&sim.eng, &conf), 0);
	nreqs = 0;
}

static void teardown(void)
{
	for (size_t i = 0; i < nreqs; i++) {
		sim_engine_abort(&sim.eng, &reqs[i]);
		sim_engine_req_free(&reqs[i]);
	}
	sim_engine_free(&sim.eng);
}

/* Submits a chat request of that priority (1 prompt token, 4 tokens out). */
static void submit(long priority)
{
	struct sim_req *r = &reqs[nreqs++];
	sim_engine_req_init(r, SIM_CHAT);
	r->n_tokens = 4;
	r->prompt_tokens = 1;
	r->priority = priority;
	r->model_json = strdup("\"m\"");
	sim_engine_submit(&sim.eng, r);
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

#define SGL "engine_type=\"unified\",model_name=\"m\",moe_ep_rank=\"0\",pp_rank=\"0\","

START_TEST(sglang_series_and_labels)
{
	/* two ranks (dp_rank), priorities 0 and 5 seen: one running and one
	 * waiting on rank 0 (priority 5 waits), one running on rank 1 */
	setup(SIM_FLAVOR_SGLANG, 2, true);
	submit(0);
	submit(0);
	submit(5);
	char *t = sim_metrics_text(&sim);
	static const char *const want[] = {
		"# HELP sglang:num_running_reqs The number of running requests.",
		"# TYPE sglang:num_running_reqs gauge",
		"sglang:num_running_reqs{dp_rank=\"0\"," SGL "priority=\"\",tp_rank=\"0\"} 1.0",
		"sglang:num_running_reqs{dp_rank=\"0\"," SGL "priority=\"0\",tp_rank=\"0\"} 1.0",
		"sglang:num_running_reqs{dp_rank=\"0\"," SGL "priority=\"5\",tp_rank=\"0\"} 0.0",
		"sglang:num_running_reqs{dp_rank=\"1\"," SGL "priority=\"0\",tp_rank=\"0\"} 1.0",
		"sglang:num_queue_reqs{dp_rank=\"0\"," SGL "priority=\"\",tp_rank=\"0\"} 1.0",
		"sglang:num_queue_reqs{dp_rank=\"0\"," SGL "priority=\"5\",tp_rank=\"0\"} 1.0",
		"sglang:prompt_tokens_total{dp_rank=\"1\"," SGL "priority=\"\",tp_rank=\"0\"} 0.0",
		"sglang:num_requests_total{dp_rank=\"0\"," SGL "priority=\"\",tp_rank=\"0\"} 0.0",
		"# TYPE sglang:cache_hit_rate gauge",
		"# TYPE infergate_sim_requests_served_total counter",
		"infergate_sim_max_running_reqs{model_name=\"m\"} 1",
		"infergate_sim_fault_mode{mode=\"ok\"} 1",
		"infergate_sim_fault_mode{mode=\"down\"} 0",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(has_line(t, want[i]), "missing line: %s\n%s", want[i], t);
	free(t);
	teardown();

	/* one rank, no priorities: neither label */
	setup(SIM_FLAVOR_SGLANG, 1, false);
	submit(0);
	t = sim_metrics_text(&sim);
	ck_assert(has_line(t, "sglang:num_running_reqs{" SGL "tp_rank=\"0\"} 1.0"));
	ck_assert_ptr_null(strstr(t, "dp_rank="));
	ck_assert_ptr_null(strstr(t, "priority="));
	ck_assert_ptr_null(strstr(t, "vllm:"));
	free(t);
	teardown();
}
END_TEST

START_TEST(vllm_series_per_engine)
{
	setup(SIM_FLAVOR_VLLM, 2, false);
	submit(0);
	submit(0);
	submit(0);
	/* finish the running ones: the counters move, by finished_reason */
	sim.eng.ranks[0].finished_stop = 2;
	sim.eng.ranks[1].finished_length = 1;
	char *t = sim_metrics_text(&sim);
	static const char *const want[] = {
		"# TYPE vllm:num_requests_running gauge",
		"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0",
		"vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 1.0",
		"vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1.0",
		"vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 0.0",
		"vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 2.0",
		"vllm:request_success_total{engine=\"1\",finished_reason=\"length\",model_name=\"m\"} 1.0",
		"infergate_sim_requests_served_total{model_name=\"m\"} 0",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(has_line(t, want[i]), "missing line: %s\n%s", want[i], t);
	ck_assert_ptr_null(strstr(t, "sglang:"));
	free(t);
	teardown();
}
END_TEST

START_TEST(loads_select_ranks_and_state_counts)
{
	setup(SIM_FLAVOR_SGLANG, 2, false);
	submit(0);
	submit(0);
	submit(0);
	char *b = sim_metrics_loads(&sim, NULL);
	json_t *j = json_loads(b, 0, NULL);
	ck_assert_ptr_nonnull(j);
	json_t *loads = json_object_get(j, "loads");
	ck_assert_int_eq(json_array_size(loads), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(loads, 0), "num_waiting_reqs")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(loads, 0), "num_total_tokens")), 2);
	json_decref(j);
	free(b);
	b = sim_metrics_loads(&sim, "1");
	j = json_loads(b, 0, NULL);
	loads = json_object_get(j, "loads");
	ck_assert_int_eq(json_array_size(loads), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(loads, 0), "dp_rank")), 1);
	json_decref(j);
	free(b);
	b = sim_metrics_loads(&sim, "7"); /* no such rank: an empty list */
	j = json_loads(b, 0, NULL);
	ck_assert_int_eq(json_array_size(json_object_get(j, "loads")), 0);
	json_decref(j);
	free(b);
	ck_assert_ptr_null(sim_metrics_loads(&sim, "x")); /* the caller's 400 */
	ck_assert_ptr_null(sim_metrics_loads(&sim, ""));

	b = sim_metrics_state(&sim);
	ck_assert_str_eq(b, "{\"requests_received\":0,\"requests_preempted\":0,\"num_running_reqs\":2,\"num_waiting_reqs\":1,"
			    "\"num_hung_reqs\":0,\"max_running_requests\":1,\"fault\":\"ok\",\"flavor\":\"sglang\","
			    "\"ranks\":[{\"num_running_reqs\":1,\"num_waiting_reqs\":1,\"requests_served\":0,"
			    "\"slowdown\":1.0},{\"num_running_reqs\":1,\"num_waiting_reqs\":0,\"requests_served\":0,"
			    "\"slowdown\":1.0}],\"traceparents\":[]}");
	free(b);
	/* /get_load: num_reqs counts running and waiting */
	b = sim_metrics_get_load(&sim);
	j = json_loads(b, 0, NULL);
	ck_assert_int_eq(json_array_size(j), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(j, 0), "num_reqs")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(j, 0), "num_pending_tokens")), 1);
	ck_assert(sim.load_warned);
	json_decref(j);
	free(b);
	teardown();
}
END_TEST

IG_CHECK_MAIN("sim metrics", sglang_series_and_labels, vllm_series_per_engine, loads_select_ranks_and_state_counts)
