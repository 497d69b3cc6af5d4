/* Unit tests for infergate-sim's flags (src/sim/conf.c): the defaults a
 * bare start gets; a step profile's knobs filled from the profile unless
 * given; the flags that would silently do nothing refused (a step knob or
 * --time-scale with the classic profile, SGLang-only switches with
 * --flavor vllm, priority switches without priority scheduling); bad
 * values named by their flag; the disaggregation flags and vLLM's
 * --kv-transfer-config checked as vLLM checks it. */
#include "config.h"
#include <check.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "infergate/log.h"
#include "../check_main.h"

static struct sim_conf *last; /* what parse filled */

static int parse(struct sim_conf *c, char **err, ...)
{
	char *argv[32] = {"infergate-sim"};
	int argc = 1;
	va_list ap;
	va_start(ap, err);
	for (char *a; (a = va_arg(ap, char *)) != NULL;)
		argv[argc++] = a;
	va_end(ap);
	*err = NULL;
	last = c;
	return sim_conf_from_args(c, argc, argv, err);
}

/* The message of a refused command line; the conf freed, as main does. */
static char *refused(char *err)
{
	static char out[512];
	sim_conf_free(last);
	ck_assert_ptr_nonnull(err);
	snprintf(out, sizeof(out), "%s", err);
	free(err);
	return out;
}

START_TEST(a_bare_start_is_a_classic_sglang_on_30000)
{
	struct sim_conf c;
	char *err;
	ck_assert_int_eq(parse(&c, &err, NULL), 0);
	ck_assert_str_eq(c.listen, "127.0.0.1:30000");
	ck_assert_int_eq(c.listen_port, 30000);
	ck_assert_str_eq(c.model, "sim-model");
	ck_assert_int_eq(c.flavor, SIM_FLAVOR_SGLANG);
	ck_assert_int_eq(c.profile, SIM_PROFILE_CLASSIC);
	ck_assert(!sim_conf_steps(&c));
	ck_assert_int_eq(c.max_running, 256);
	ck_assert_int_eq(c.ttft_ms, 50);
	ck_assert_int_eq(c.dp_ranks, 1);
	ck_assert(c.time_scale == 1);
	ck_assert_ptr_null(c.api_key);
	ck_assert(c.steps.step_ms == 0 && c.steps.kv_tokens == 0); /* no step knobs */
	sim_conf_free(&c);
}
END_TEST

START_TEST(a_profile_fills_the_knobs_not_given)
{
	struct sim_conf c;
	char *err;
	ck_assert_int_eq(parse(&c, &err, "--profile", "b200-27b-mtp", "--kv-tokens", "100000", "--step-ms", "12",
			       NULL), 0);
	ck_assert(sim_conf_steps(&c));
	ck_assert_int_eq(c.max_running, 256);
	ck_assert(c.steps.step_ms == 12);           /* given */
	ck_assert_int_eq(c.steps.kv_tokens, 100000); /* given */
	ck_assert(c.steps.tokens_per_step == 2.4);  /* the profile's: MTP */
	ck_assert(c.steps.prefill_tps == 40000);
	ck_assert_int_eq(c.steps.chunk, 8192);
	ck_assert_int_eq(c.steps.output_reserve, 128);
	sim_conf_free(&c);

	ck_assert_int_eq(parse(&c, &err, "--profile", "h100-8b", "--max-running", "64", "--time-scale", "10", NULL), 0);
	ck_assert_int_eq(c.max_running, 64);
	ck_assert(c.steps.step_ms == 6.2);
	ck_assert_int_eq(c.steps.kv_tokens, 420000);
	ck_assert(c.time_scale == 10);
	sim_conf_free(&c);
}
END_TEST

START_TEST(flags_that_would_do_nothing_are_refused)
{
	struct sim_conf c;
	char *err;
	ck_assert_int_eq(parse(&c, &err, "--kv-tokens", "1000", NULL), -1);
	ck_assert_str_eq(refused(err), "--kv-tokens: the classic profile has no decode steps; choose --profile h100-8b or "
				       "b200-27b-mtp");
	ck_assert_int_eq(parse(&c, &err, "--time-scale", "5", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--time-scale: the classic profile paces with --tokens-per-second"));
	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--metrics-refresh", "sglang", NULL), -1);
	ck_assert_str_eq(refused(err), "--metrics-refresh: 'sglang' needs --flavor sglang");
	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--enable-priority-scheduling", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--enable-priority-scheduling: needs --flavor sglang"));
	ck_assert_int_eq(parse(&c, &err, "--disable-priority-preemption", NULL), -1);
	ck_assert_str_eq(refused(err), "--disable-priority-preemption: needs --enable-priority-scheduling");
	ck_assert_int_eq(parse(&c, &err, "--schedule-low-priority-values-first", NULL), -1);
	ck_assert_str_eq(refused(err), "--schedule-low-priority-values-first: needs --enable-priority-scheduling");

	/* with priority scheduling, the switches are taken */
	ck_assert_int_eq(parse(&c, &err, "--enable-priority-scheduling", "--schedule-low-priority-values-first",
			       "--disable-priority-preemption", NULL), 0);
	ck_assert(c.priority_scheduling && c.low_first && c.no_preemption);
	sim_conf_free(&c);
}
END_TEST

START_TEST(bad_values_are_named_by_their_flag)
{
	struct sim_conf c;
	char *err;
	ck_assert_int_eq(parse(&c, &err, "--fail-rate", "1.5", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--fail-rate"));
	ck_assert_int_eq(parse(&c, &err, "--flavor", "tgi", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--flavor"));
	ck_assert_int_eq(parse(&c, &err, "--model", "bad\tname", NULL), -1);
	ck_assert_str_eq(refused(err), "--model: 'bad\tname' contains a control character");
	ck_assert_int_eq(parse(&c, &err, "--max-running", "0", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--max-running"));
	ck_assert_int_eq(parse(&c, &err, "--profile", "h100-8b", "--tokens-per-step", "0", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--tokens-per-step"));
	ck_assert_int_eq(parse(&c, &err, "--listen", "127.0.0.1:99999", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--listen"));
	/* the value and the range said */
	ck_assert_int_eq(parse(&c, &err, "--ttft-ms", "-1", NULL), -1);
	ck_assert_str_eq(refused(err), "--ttft-ms: -1 is out of range (0..3600000)");
	ck_assert_int_eq(parse(&c, &err, "--dp-ranks", "65", NULL), -1);
	ck_assert_str_eq(refused(err), "--dp-ranks: 65 is out of range (1..64)");
}
END_TEST

/* Prefill/decode disaggregation: SGLang's and vLLM's defaults, the
 * kv-transfer-config read as vLLM's KVTransferConfig reads it, each
 * flavor's flags refused with the other. */
START_TEST(disaggregation_flags_and_the_kv_transfer_config)
{
	struct sim_conf c;
	char *err;
	ck_assert_int_eq(parse(&c, &err, NULL), 0);
	ck_assert_int_eq(c.pd_mode, SIM_PD_MODE_NULL);
	ck_assert_int_eq(c.bootstrap_port, 8998);
	ck_assert_int_eq(c.pd_timeout_ms, 300000);
	ck_assert_int_eq(c.nixl_port, 5600);
	ck_assert(c.nixl_abort_s == 480);
	ck_assert_int_eq(c.kv_bytes_per_token, 131072);
	ck_assert(c.transfer_gbps == 25);
	ck_assert_ptr_null(c.engine_id);
	sim_conf_free(&c);

	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--kv-transfer-config",
			       "{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}", NULL), 0);
	ck_assert(!c.kv_recompute); /* kv_load_failure_policy "fail" by default */
	ck_assert_uint_eq(strlen(c.engine_id), 36); /* a uuid4 */
	ck_assert_int_eq(c.engine_id[14], '4');
	sim_conf_free(&c);
	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--kv-transfer-config",
			       "{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_producer\",\"engine_id\":\"p0\","
			       "\"kv_load_failure_policy\":\"recompute\"}", NULL), 0);
	ck_assert(c.kv_recompute);
	ck_assert_str_eq(c.engine_id, "p0");
	sim_conf_free(&c);

	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--kv-transfer-config",
			       "{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"both\"}", NULL), -1);
	ck_assert_str_eq(refused(err), "--kv-transfer-config: kv_role must be one of kv_producer, kv_consumer, kv_both");
	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--kv-transfer-config",
			       "{\"kv_connector\":\"LMCacheConnectorV1\",\"kv_role\":\"kv_both\"}", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "NixlConnector"));
	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--kv-transfer-config", "[1]", NULL), -1);
	ck_assert_str_eq(refused(err), "--kv-transfer-config: '[1]' is not a JSON object");
	ck_assert_int_eq(parse(&c, &err, "--disaggregation-mode", "decode", "--disaggregation-fail-transfer", NULL), -1);
	ck_assert_ptr_nonnull(strstr(refused(err), "--disaggregation-fail-transfer: needs"));
	ck_assert_int_eq(parse(&c, &err, "--disaggregation-mode", "prefill", "--disaggregation-fail-transfer",
			       "--disaggregation-bootstrap-port", "0", NULL), 0);
	ck_assert_int_eq(c.pd_mode, SIM_PD_MODE_PREFILL);
	ck_assert(c.pd_fail);
	ck_assert_int_eq(c.bootstrap_port, 0);
	sim_conf_free(&c);
}
END_TEST

START_TEST(lora_and_rank_flags)
{
	struct sim_conf c;
	char *err = NULL;
	/* vLLM: --lora-modules takes several values, limits default to vLLM's */
	ck_assert_int_eq(parse(&c, &err, "--flavor", "vllm", "--enable-lora", "--lora-modules", "a=/a", "b=/b",
			       "--dp-ranks", "3", "--dp-rank-slowdown", "2=4.5", "--dp-rank-slowdown", "0=2", NULL), 0);
	ck_assert_uint_eq(c.nloras, 2);
	ck_assert_str_eq(c.lora_names[1], "b");
	ck_assert_str_eq(c.lora_paths[1], "/b");
	ck_assert_int_eq(c.max_loras, 1);
	ck_assert_int_eq(c.max_loaded_loras, 0);
	ck_assert(c.rank_slowdown[0] == 2 && c.rank_slowdown[1] == 1 && c.rank_slowdown[2] == 4.5);
	sim_conf_free(&c);
	/* SGLang: --lora-paths turns LoRA on; its defaults */
	ck_assert_int_eq(parse(&c, &err, "--lora-paths", "x=/x", "--max-loaded-loras", "3", NULL), 0);
	ck_assert(c.enable_lora);
	ck_assert_int_eq(c.max_loras, 8);
	ck_assert_int_eq(c.max_loaded_loras, 3);
	sim_conf_free(&c);
	ck_assert_int_eq(parse(&c, &err, "--dp-rank-slowdown", "1=2", NULL), -1);
	ck_assert_ptr_nonnull(strstr(err, "RANK 0..0"));
	free(err);
	sim_conf_free(&c);
}
END_TEST

IG_CHECK_MAIN("sim_conf", a_bare_start_is_a_classic_sglang_on_30000, a_profile_fills_the_knobs_not_given,
	      flags_that_would_do_nothing_are_refused, bad_values_are_named_by_their_flag,
	      disaggregation_flags_and_the_kv_transfer_config, lora_and_rank_flags)
