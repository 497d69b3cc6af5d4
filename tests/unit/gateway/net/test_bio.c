/* Unit tests for the background I/O threads (src/gateway/net/bio.c): a job runs
 * on another thread, its done comes back on the submitting reactor's loop
 * (its eventfd in that reactor's epoll set), in the order the jobs ran; a
 * long job of one kind does not hold up the other kind; stopping runs
 * what was queued and loses no done. A one-reactor gateway with a real
 * epoll set, driven by hand. */
#include "../../../../src/gateway/net/bio.c"

#include <check.h>
#include <stdatomic.h>

#include "../../check_main.h"

struct loop {
	struct ig_gw gw;
	struct ig_rx rx[1];
	pthread_t main;
};

static void loop_init(struct loop *l)
{
	memset(l, 0, sizeof(*l));
	l->gw.rx = l->rx;
	l->gw.nrx = 1;
	l->rx[0].gw = &l->gw;
	l->rx[0].epfd = epoll_create1(EPOLL_CLOEXEC);
	ck_assert_int_ge(l->rx[0].epfd, 0);
	ig_rx_self = &l->rx[0];
	l->main = pthread_self();
	ig_log_set_level(IG_LOG_ERROR);
}

static void loop_free(struct loop *l)
{
	close(l->rx[0].epfd);
	ig_rx_self = NULL;
}

/* One turn of reactor 0: its events' handlers (the bio eventfd's). A wait
 * of up to 10 s guards against a hang; nothing is timed. */
static void turn(struct loop *l)
{
	struct epoll_event evs[8];
	int n = epoll_wait(l->rx[0].epfd, evs, 8, 10000);
	ck_assert_int_gt(n, 0);
	for (int i = 0; i < n; i++) {
		struct ig_event *ev = evs[i].data.ptr;
		ev->handler(ev, evs[i].events);
	}
}

struct tjob {
	struct ig_bio_job job;
	struct loop *l;
	int seq;
	bool ran_elsewhere;          /* set by run */
	int *order;                  /* done appends seq here */
	int *ndone;
	int block_fd;                /* run reads one byte from it first (-1 none) */
	atomic_int *runs;
};

static void tjob_run(struct ig_bio_job *job)
{
	struct tjob *t = IG_CONTAINER_OF(job, struct tjob, job);
	char c;
	if (t->block_fd >= 0)
		ck_assert_int_eq(read(t->block_fd, &c, 1), 1);
	t->ran_elsewhere = !pthread_equal(pthread_self(), t->l->main);
	if (t->runs)
		atomic_fetch_add(t->runs, 1);
}

static void tjob_done(struct ig_bio_job *job)
{
	struct tjob *t = IG_CONTAINER_OF(job, struct tjob, job);
	/* on the loop's thread, after run */
	ck_assert(pthread_equal(pthread_self(), t->l->main));
	ck_assert(t->ran_elsewhere);
	t->order[(*t->ndone)++] = t->seq;
	free(t);
}

static struct tjob *tjob(struct loop *l, enum ig_bio_queue q, int seq, int *order, int *ndone)
{
	struct tjob *t = calloc(1, sizeof(*t));
	ck_assert_ptr_nonnull(t);
	*t = (struct tjob){.l = l, .seq = seq, .order = order, .ndone = ndone, .block_fd = -1};
	t->job.queue = q;
	t->job.run = tjob_run;
	t->job.done = tjob_done;
	return t;
}

START_TEST(jobs_run_off_the_loop_and_their_dones_come_back_in_order)
{
	struct loop l;
	loop_init(&l);
	struct ig_bio *bio = ig_bio_start(&l.gw);
	ck_assert_ptr_nonnull(bio);
	int order[200], ndone = 0;
	for (int i = 0; i < 200; i++)
		ig_bio_submit(bio, &tjob(&l, i % 2 ? IG_BIO_FILES : IG_BIO_BATCHES, i, order, &ndone)->job);
	while (ndone < 200)
		turn(&l);
	/* each kind in the order submitted (the two kinds interleave freely) */
	int last[IG_BIO_NQUEUES] = {-1, -1};
	for (int i = 0; i < 200; i++) {
		int k = order[i] % 2 ? IG_BIO_FILES : IG_BIO_BATCHES;
		ck_assert_int_gt(order[i], last[k]);
		last[k] = order[i];
	}
	ck_assert_uint_eq(ig_bio_queued(bio, NULL), 0);
	ig_bio_free(bio);
	loop_free(&l);
}
END_TEST

START_TEST(a_long_job_of_one_kind_does_not_hold_up_the_other)
{
	struct loop l;
	loop_init(&l);
	struct ig_bio *bio = ig_bio_start(&l.gw);
	int p[2], order[16], ndone = 0;
	ck_assert_int_eq(pipe(p), 0);
	/* a validation slice that does not end until the test says so */
	struct tjob *slow = tjob(&l, IG_BIO_BATCHES, 100, order, &ndone);
	slow->block_fd = p[0];
	ig_bio_submit(bio, &slow->job);
	for (int i = 0; i < 10; i++)
		ig_bio_submit(bio, &tjob(&l, IG_BIO_FILES, i, order, &ndone)->job);
	while (ndone < 10) /* an upload's writes are done meanwhile */
		turn(&l);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(order[i], i);
	ck_assert_uint_eq(ig_bio_queued(bio, NULL), 1);
	ck_assert_int_eq(write(p[1], "x", 1), 1);
	while (ndone < 11)
		turn(&l);
	ck_assert_int_eq(order[10], 100);
	ig_bio_free(bio);
	close(p[0]);
	close(p[1]);
	loop_free(&l);
}
END_TEST

START_TEST(stopping_runs_what_was_queued_and_calls_every_done)
{
	struct loop l;
	loop_init(&l);
	struct ig_bio *bio = ig_bio_start(&l.gw);
	int order[100], ndone = 0;
	atomic_int runs = 0;
	for (int i = 0; i < 100; i++) {
		struct tjob *t = tjob(&l, i % 2 ? IG_BIO_FILES : IG_BIO_BATCHES, i, order, &ndone);
		t->runs = &runs;
		ig_bio_submit(bio, &t->job);
	}
	ig_bio_free(bio); /* no turn of the loop: the dones come from here */
	ck_assert_int_eq(atomic_load(&runs), 100);
	ck_assert_int_eq(ndone, 100);
	loop_free(&l);
}
END_TEST

static void inline_run(struct ig_bio_job *job)
{
	IG_CONTAINER_OF(job, struct tjob, job)->ran_elsewhere = true; /* here: "ran" */
}

START_TEST(without_a_thread_a_job_and_its_done_run_at_once)
{
	struct loop l;
	loop_init(&l);
	int order[1], ndone = 0;
	struct tjob *t = tjob(&l, IG_BIO_FILES, 7, order, &ndone);
	t->job.run = inline_run;
	ig_bio_submit(NULL, &t->job); /* a gateway without data_dir, the other unit tests */
	ck_assert_int_eq(ndone, 1);
	ck_assert_int_eq(order[0], 7);
	loop_free(&l);
}
END_TEST

IG_CHECK_MAIN("bio", jobs_run_off_the_loop_and_their_dones_come_back_in_order,
	      a_long_job_of_one_kind_does_not_hold_up_the_other, stopping_runs_what_was_queued_and_calls_every_done,
	      without_a_thread_a_job_and_its_done_run_at_once)
