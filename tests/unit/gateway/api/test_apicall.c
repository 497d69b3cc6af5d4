/* Unit tests for src/gateway/api/apicall.c: an API call's fields, and its life
 * between "MHD is done" and "its last job ended" (whichever comes second
 * frees it). The suspend and resume themselves need a connection: the
 * Files and Batch API integration tests go through them. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "api/apicall.h"
#include "gateway.h"
#include "infergate/log.h"
#include "net/rx.h"
#include "../../check_main.h"

static enum MHD_Result handler(struct ig_call *call IG_UNUSED, struct ig_gw *gw IG_UNUSED,
			       struct MHD_Connection *conn IG_UNUSED, const char *url IG_UNUSED,
			       const char *method IG_UNUSED, const char *upload_data IG_UNUSED,
			       size_t *upload_data_size IG_UNUSED, void **con_cls IG_UNUSED)
{
	return MHD_YES;
}

START_TEST(init_fills_the_shared_part)
{
	struct ig_gw gw;
	struct ig_rx rx[1];
	memset(&gw, 0, sizeof(gw));
	gw.rx = rx;
	struct ig_api_call c;
	memset(&c, 0x5a, sizeof(c));
	char url[400];
	memset(url, 'u', sizeof(url) - 1);
	url[sizeof(url) - 1] = '\0';
	ig_api_call_init(&c, (struct ig_call){handler, NULL, NULL}, &gw, NULL, url, "DELETE", "alice");
	ck_assert_ptr_eq(c.call.on_request, handler);
	ck_assert_ptr_null(c.call.on_completed);
	ck_assert_ptr_eq(c.gw, &gw);
	ck_assert_ptr_eq(c.rx, &rx[0]); /* not on a reactor: the control plane's */
	ck_assert_str_eq(c.method, "DELETE");
	ck_assert_str_eq(c.owner, "alice");
	ck_assert_uint_eq(strlen(c.url), sizeof(c.url) - 1); /* cut, terminated */
	ck_assert(!c.suspended && !c.gone);
	ck_assert_int_eq(c.jobs, 0);
}
END_TEST

START_TEST(freed_by_the_second_of_completed_and_last_job)
{
	struct ig_gw gw;
	struct ig_rx rx[1];
	memset(&gw, 0, sizeof(gw));
	gw.rx = rx;
	struct ig_api_call c;
	ig_api_call_init(&c, (struct ig_call){handler, NULL, NULL}, &gw, NULL, "/v1/files", "POST", "");
	/* no job: MHD's end frees it */
	ck_assert(ig_api_call_completed(&c));
	ck_assert(c.gone && !c.conn);
	/* two jobs: its client leaves first, the last job frees it */
	ig_api_call_init(&c, (struct ig_call){handler, NULL, NULL}, &gw, NULL, "/v1/files", "POST", "");
	ig_api_call_job(&c);
	ig_api_call_job(&c);
	ck_assert(!ig_api_call_job_done(&c, true)); /* not suspended: nothing to resume, still held */
	ck_assert(!ig_api_call_completed(&c));
	ck_assert(ig_api_call_job_done(&c, true));
	ck_assert_int_eq(c.jobs, 0);
	/* the job ends first: MHD's end frees it */
	ig_api_call_init(&c, (struct ig_call){handler, NULL, NULL}, &gw, NULL, "/v1/batches", "POST", "");
	ig_api_call_job(&c);
	ck_assert(!ig_api_call_job_done(&c, false));
	ck_assert(ig_api_call_completed(&c));
}
END_TEST

IG_CHECK_MAIN("apicall", init_fills_the_shared_part, freed_by_the_second_of_completed_and_last_job)
