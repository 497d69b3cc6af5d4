/* Unit tests for src/sim/lora.c: the batch rule of each engine (how many
 * distinct adapters, the base model counted by SGLang only), the GPU slots
 * swapped least recently used first, registration limits, the flags'
 * NAME=PATH and nargs="+" forms, the load/unload answers of each flavor and
 * vLLM's lora_requests_info line. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "lora.h"
#include "../check_main.h"

static int add(struct sim_loras *l, const char *name)
{
	int idx = -1;
	ck_assert_int_eq(sim_loras_add(l, name, "/p", &idx), SIM_LORA_ADDED);
	return idx;
}

START_TEST(vllm_max_loras_counts_adapters_only)
{
	struct sim_loras l;
	ck_assert_int_eq(sim_loras_init(&l, 2, 1, false, 0), 0);
	int a = add(&l, "a"), b = add(&l, "b");
	ck_assert(sim_loras_fits(&l, 0, a));
	sim_loras_activate(&l, 0, -1); /* the base model takes no adapter slot */
	ck_assert(sim_loras_fits(&l, 0, a));
	ck_assert(sim_loras_activate(&l, 0, a)); /* first use: loaded */
	ck_assert(sim_loras_fits(&l, 0, a));     /* the same adapter joins */
	ck_assert(!sim_loras_fits(&l, 0, b));    /* another waits */
	ck_assert(sim_loras_fits(&l, 0, -1));
	ck_assert(sim_loras_fits(&l, 1, b));     /* another rank: its own batch */
	ck_assert(!sim_loras_activate(&l, 0, a)); /* resident: no load */
	sim_loras_deactivate(&l, 0, a);
	ck_assert(!sim_loras_fits(&l, 0, b));
	sim_loras_deactivate(&l, 0, a);
	ck_assert(sim_loras_fits(&l, 0, b));
	ck_assert(sim_loras_activate(&l, 0, b)); /* swapped in: a leaves its slot */
	sim_loras_deactivate(&l, 0, b);
	ck_assert(sim_loras_activate(&l, 0, a)); /* so a is loaded again */
	sim_loras_free(&l);
}
END_TEST

START_TEST(sglang_counts_the_base_model)
{
	struct sim_loras l;
	ck_assert_int_eq(sim_loras_init(&l, 1, 2, true, 0), 0);
	int a = add(&l, "a"), b = add(&l, "b"), c = add(&l, "c");
	sim_loras_activate(&l, 0, a);
	ck_assert(sim_loras_fits(&l, 0, b));
	sim_loras_activate(&l, 0, -1); /* base + a: the two of max 2 */
	ck_assert(!sim_loras_fits(&l, 0, b));
	ck_assert(sim_loras_fits(&l, 0, -1)); /* a base request is never held back */
	sim_loras_deactivate(&l, 0, -1);
	ck_assert(sim_loras_fits(&l, 0, b));
	sim_loras_activate(&l, 0, b);
	ck_assert(!sim_loras_fits(&l, 0, c));
	sim_loras_free(&l);
}
END_TEST

START_TEST(lru_slot_goes_to_the_idle_adapter_used_longest_ago)
{
	struct sim_loras l;
	ck_assert_int_eq(sim_loras_init(&l, 1, 2, false, 0), 0);
	int a = add(&l, "a"), b = add(&l, "b"), c = add(&l, "c");
	sim_loras_activate(&l, 0, a);
	sim_loras_activate(&l, 0, b);
	sim_loras_deactivate(&l, 0, a);
	sim_loras_deactivate(&l, 0, b);
	sim_loras_activate(&l, 0, a); /* a used after b */
	sim_loras_deactivate(&l, 0, a);
	ck_assert(sim_loras_activate(&l, 0, c)); /* takes b's slot */
	ck_assert(!sim_loras_activate(&l, 0, a));
	sim_loras_deactivate(&l, 0, a);
	sim_loras_deactivate(&l, 0, a);
	sim_loras_deactivate(&l, 0, c);
	ck_assert(sim_loras_activate(&l, 0, b));
	sim_loras_free(&l);
}
END_TEST

START_TEST(registration_names_limits_and_removal)
{
	struct sim_loras l;
	ck_assert_int_eq(sim_loras_init(&l, 1, 1, true, 2), 0);
	int a = add(&l, "a");
	ck_assert_int_eq(sim_loras_add(&l, "a", "/q", NULL), SIM_LORA_EXISTS);
	add(&l, "b");
	ck_assert_int_eq(sim_loras_add(&l, "c", "/q", NULL), SIM_LORA_FULL);
	ck_assert_int_eq(sim_loras_remove(&l, "a"), 0);
	ck_assert_int_eq(sim_loras_remove(&l, "a"), -1);
	ck_assert_int_eq(sim_loras_find(&l, "a"), -1);
	ck_assert_uint_eq(sim_loras_count(&l), 1);
	int c = add(&l, "a"); /* the name is free again, at a new index */
	ck_assert_int_ne(c, a);
	ck_assert_int_eq(sim_loras_find(&l, "a"), c);
	sim_loras_free(&l);
}
END_TEST

START_TEST(split_and_expand_argv)
{
	char *n, *p;
	ck_assert_int_eq(sim_lora_split("sql=/m/sql", &n, &p), 0);
	ck_assert_str_eq(n, "sql");
	ck_assert_str_eq(p, "/m/sql");
	free(n);
	free(p);
	ck_assert_int_eq(sim_lora_split("/m/x", &n, &p), 0); /* SGLang: a bare path names itself */
	ck_assert_str_eq(n, "/m/x");
	free(n);
	free(p);
	ck_assert_int_eq(sim_lora_split("=x", &n, &p), -1);
	ck_assert_int_eq(sim_lora_split("a=", &n, &p), -1);

	char *argv[] = {"sim", "--lora-modules", "a=1", "b=2", "--model", "m", "--lora-paths=c=3", "d=4", NULL};
	int argc;
	char **x = sim_lora_expand_argv(8, argv, &argc);
	const char *want[] = {"sim", "--lora-modules", "a=1", "--lora-modules", "b=2", "--model", "m",
			      "--lora-paths=c=3", "d=4"};
	/* "--lora-paths=c=3" carries its value: a bare word after it is not one of its values */
	ck_assert_int_eq(argc, 9);
	for (int i = 0; i < argc; i++)
		ck_assert_str_eq(x[i], want[i]);
	ck_assert_ptr_null(x[argc]);
	free(x);
}
END_TEST

START_TEST(update_answers_per_flavor)
{
	struct sim_loras l;
	struct sim_lora_answer a;
	ck_assert_int_eq(sim_loras_init(&l, 1, 1, false, 0), 0);
	const char *load = "{\"lora_name\":\"x\",\"lora_path\":\"/x\"}";
	sim_lora_update(&l, true, true, true, load, strlen(load), &a);
	ck_assert_uint_eq(a.status, 200);
	ck_assert_str_eq(a.body, "Success: LoRA adapter 'x' added successfully.");
	free(a.body);
	sim_lora_update(&l, true, true, true, load, strlen(load), &a);
	ck_assert_uint_eq(a.status, 400);
	ck_assert_ptr_null(a.body);
	ck_assert_str_eq(a.type, "InvalidUserInput");
	ck_assert_str_eq(a.msg, "The lora adapter 'x' has already been loaded.");
	free(a.msg);
	const char *unload = "{\"lora_name\":\"y\"}";
	sim_lora_update(&l, true, true, false, unload, strlen(unload), &a);
	ck_assert_uint_eq(a.status, 404);
	ck_assert_str_eq(a.msg, "The lora adapter 'y' cannot be found.");
	free(a.msg);
	/* SGLang: its LoRAUpdateOutput either way */
	const char *unload_x = "{\"lora_name\":\"x\"}";
	sim_lora_update(&l, true, false, false, unload_x, strlen(unload_x), &a);
	ck_assert_uint_eq(a.status, 200);
	ck_assert_str_eq(a.body, "{\"success\":true,\"error_message\":null,\"loaded_adapters\":{}}");
	free(a.body);
	sim_lora_update(&l, true, false, false, unload_x, strlen(unload_x), &a);
	ck_assert_uint_eq(a.status, 400);
	ck_assert_ptr_nonnull(strstr(a.body, "\"success\":false"));
	free(a.body);
	sim_loras_free(&l);
}
END_TEST

START_TEST(vllm_metric_line)
{
	struct sim_loras l;
	struct ig_buf b;
	ck_assert_int_eq(sim_loras_init(&l, 2, 3, false, 0), 0);
	int a = add(&l, "a");
	add(&l, "b");
	int c = add(&l, "c");
	sim_loras_activate(&l, 1, a);
	sim_loras_activate(&l, 0, c);
	long waiting[3] = {0, 2, 0};
	ig_buf_init(&b);
	sim_loras_metric(&l, waiting, 1700000000.5, &b);
	ig_buf_append(&b, "", 1);
	ck_assert_ptr_nonnull(strstr(b.data, "# TYPE vllm:lora_requests_info gauge\n"));
	ck_assert_ptr_nonnull(strstr(b.data, "vllm:lora_requests_info{max_lora=\"3\",waiting_lora_adapters=\"b\","
					     "running_lora_adapters=\"a,c\"} 1.700000000"));
	ig_buf_free(&b);
	sim_loras_free(&l);
}
END_TEST

IG_CHECK_MAIN("sim_lora", vllm_max_loras_counts_adapters_only, sglang_counts_the_base_model,
	      lru_slot_goes_to_the_idle_adapter_used_longest_ago, registration_names_limits_and_removal,
	      split_and_expand_argv, update_answers_per_flavor, vllm_metric_line)
