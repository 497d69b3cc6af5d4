/* Unit tests for DNS discovery (src/gateway/fleet/discover.c, included to reach
 * its static functions): a discover entry's URL taken apart, a name
 * resolved into backend URLs, and what the fleet becomes when a
 * resolution comes back (addresses added, vanished ones drained then
 * removed, one that comes back kept, a failed resolution changing nothing).
 * No thread: results are applied as the reactor applies them. */
#include "../../../../src/gateway/fleet/discover.c"

#include <check.h>

#include "../../check_main.h"

static struct entry entry_of(const char *url)
{
	struct entry e;
	memset(&e, 0, sizeof(e));
	e.bc.url = (char *)url;
	e.bc.weight = 3;
	e.bc.max_inflight = 7;
	e.last_ok = -1;
	return e;
}

static void entry_clear(struct entry *e)
{
	free(e->scheme);
	free(e->host);
	free(e->port);
	free(e->path);
}

START_TEST(a_discover_url_is_taken_apart)
{
	struct entry e = entry_of("http://sglang-headless.default.svc:30000/v1/");
	ck_assert_int_eq(split_url(&e), 0);
	ck_assert_str_eq(e.scheme, "http");
	ck_assert_str_eq(e.host, "sglang-headless.default.svc");
	ck_assert_str_eq(e.port, "30000");
	ck_assert_str_eq(e.path, "/v1"); /* no trailing slash: paths are appended */
	entry_clear(&e);

	e = entry_of("https://vllm.internal");
	ck_assert_int_eq(split_url(&e), 0);
	ck_assert_str_eq(e.port, "443"); /* the scheme's port */
	ck_assert_str_eq(e.path, "");
	entry_clear(&e);

	e = entry_of("http://[::1]:8000");
	ck_assert_int_eq(split_url(&e), 0);
	ck_assert_str_eq(e.host, "::1"); /* getaddrinfo takes it without brackets */
	entry_clear(&e);
}
END_TEST

START_TEST(a_name_resolves_to_one_url_per_address)
{
	struct entry e = entry_of("http://127.0.0.1:8000/v1");
	ck_assert_int_eq(split_url(&e), 0);
	struct result *r = resolve(&e);
	ck_assert_ptr_nonnull(r->urls);
	ck_assert_uint_eq(r->n, 1);
	ck_assert_str_eq(r->urls[0], "http://127.0.0.1:8000/v1");
	ck_assert_str_eq(r->name_url, "http://127.0.0.1:8000/v1");
	result_free(r);
	entry_clear(&e);

	e = entry_of("http://[::1]:8000");
	ck_assert_int_eq(split_url(&e), 0);
	r = resolve(&e);
	if (r->urls) { /* (a host without IPv6 cannot) */
		ck_assert_uint_eq(r->n, 1);
		ck_assert_str_eq(r->urls[0], "http://[::1]:8000");
	}
	result_free(r);
	entry_clear(&e);
}
END_TEST

static struct ig_conf cfg;

static void setup_gw(struct ig_gw *gw)
{
	memset(gw, 0, sizeof(*gw));
	memset(&cfg, 0, sizeof(cfg));
	gw->cfg = &cfg;
	ig_log_set_level(IG_LOG_ERROR);
}

/* A resolution's answer, as the thread posts it (urls sorted). */
static struct result *answer(const char *name, int n, ...)
{
	struct result *r = calloc(1, sizeof(*r));
	r->name_url = strdup(name);
	if (n < 0) {
		snprintf(r->err, sizeof(r->err), "Name or service not known");
		return r;
	}
	r->urls = calloc((size_t)n + 1, sizeof(char *));
	va_list ap;
	va_start(ap, n);
	for (int i = 0; i < n; i++)
		r->urls[r->n++] = strdup(va_arg(ap, const char *));
	va_end(ap);
	qsort(r->urls, r->n, sizeof(char *), cmp_str);
	return r;
}

static void applied(struct ig_gw *gw, struct entry *e, struct result *r)
{
	apply(gw, e, r);
	result_free(r);
	ig_health_reap(gw);
}

START_TEST(the_fleet_follows_the_name)
{
	struct ig_gw gw;
	setup_gw(&gw);
	const char *name = "http://pods:8000";
	/* a configured backend at an address the name also gives is left alone */
	struct ig_backend *conf = ig_backend_fleet_add(&gw.fleet, "http://10.0.0.9:8000", 1, 0);
	struct entry e = entry_of(name);

	applied(&gw, &e, answer(name, 2, "http://10.0.0.2:8000", "http://10.0.0.1:8000"));
	ck_assert_uint_eq(gw.fleet.n, 3);
	struct ig_backend *a = ig_backend_fleet_find_url(&gw.fleet, "http://10.0.0.1:8000");
	struct ig_backend *b = ig_backend_fleet_find_url(&gw.fleet, "http://10.0.0.2:8000");
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	/* each takes the entry's settings, and is probed before it serves */
	ck_assert_int_eq(a->weight, 3);
	ck_assert_int_eq(a->max_inflight, 7);
	ck_assert_str_eq(a->discover, name);
	ck_assert_ptr_nonnull(a->probe);
	ck_assert_int_eq(atomic_load(&a->state), IG_BACKEND_DOWN);
	ck_assert(gw.models_dirty);

	/* the name stops giving 10.0.0.1 while a request runs there: drained,
	 * not dropped; it goes once its last request is done */
	atomic_store(&a->inflight, 1);
	applied(&gw, &e, answer(name, 2, "http://10.0.0.2:8000", "http://10.0.0.9:8000"));
	ck_assert_int_eq(atomic_load(&a->admin), IG_ADMIN_REMOVING);
	ck_assert_int_eq(atomic_load(&b->admin), IG_ADMIN_ENABLED);
	ck_assert_ptr_null(conf->discover);
	ck_assert_int_eq(atomic_load(&conf->admin), IG_ADMIN_ENABLED);
	ck_assert_uint_eq(gw.fleet.n, 3);

	/* it comes back before it was removed: enabled again, the same backend */
	int id = a->id;
	applied(&gw, &e, answer(name, 2, "http://10.0.0.1:8000", "http://10.0.0.2:8000"));
	ck_assert_int_eq(atomic_load(&a->admin), IG_ADMIN_ENABLED);
	ck_assert_ptr_eq(ig_backend_fleet_find_id(&gw.fleet, id), a);

	/* a failed resolution changes nothing */
	applied(&gw, &e, answer(name, -1));
	ck_assert_uint_eq(gw.fleet.n, 3);
	ck_assert_int_eq(e.last_ok, 0);
	ck_assert_int_eq(atomic_load(&a->admin), IG_ADMIN_ENABLED);

	/* gone for good, nothing in flight: removed at once */
	atomic_store(&a->inflight, 0);
	applied(&gw, &e, answer(name, 1, "http://10.0.0.2:8000"));
	ck_assert_int_eq(e.last_ok, 1);
	ck_assert_uint_eq(gw.fleet.n, 2);
	ck_assert_ptr_null(ig_backend_fleet_find_id(&gw.fleet, id));
	ck_assert_ptr_nonnull(ig_backend_fleet_find_url(&gw.fleet, "http://10.0.0.2:8000"));

	ig_health_free(&gw);
	ig_backend_fleet_free(&gw.fleet);
}
END_TEST

IG_CHECK_MAIN("discover", a_discover_url_is_taken_apart, a_name_resolves_to_one_url_per_address,
	      the_fleet_follows_the_name)
