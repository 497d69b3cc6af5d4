/* The background I/O threads (bio.h). The queues and the done lists are
 * guarded by bio->mu, which is never held while a job runs or a done is
 * called: a reactor takes it (under gw->lock) only to append or to take
 * its done list whole; a thread takes it (without gw->lock) only to take
 * its next job and to hand a finished one back. So the lock order is
 * gw->lock, then bio->mu, and the threads never want gw->lock at all. Not for jobs that need the
 * gateway's state while they run: they copy what they need at submit and
 * apply their result in done. */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "infergate/log.h"
#include "net/bio.h"
#include "net/rx.h"

/* Where a reactor's finished jobs wait for its loop. */
struct home {
	struct ig_event ev;         /* the eventfd, in the reactor's epoll set */
	struct ig_bio *bio;
	struct ig_rx *rx;
	struct ig_list done;        /* under bio->mu */
};

/* One kind of job: its thread and queue. */
struct queue {
	struct ig_bio *bio;
	pthread_t thread;
	bool started;
	pthread_cond_t cv;          /* a job was queued, or stop */
	struct ig_list jobs;        /* under bio->mu */
};

struct ig_bio {
	struct ig_gw *gw;
	pthread_mutex_t mu;
	bool stop;                  /* under mu: run what is queued, then end */
	bool stopped;               /* ig_bio_free has joined the threads: submit runs the job at once */
	struct queue q[IG_BIO_NQUEUES];
	size_t queued, bytes;       /* under mu: jobs queued or running, bytes they hold */
	struct home *homes;         /* one per reactor */
	size_t nhomes;
};

/* Moves every element of `from` to the end of `to`. */
static void splice(struct ig_list *to, struct ig_list *from)
{
	if (ig_list_empty(from))
		return;
	struct ig_list *first = from->next, *last = from->prev;
	first->prev = to->prev;
	to->prev->next = first;
	last->next = to;
	to->prev = last;
	ig_list_init(from);
}

/* The threads give way to the reactors: a validation slice is CPU work
 * too, and on a machine with few cores a reactor that wants the CPU must
 * get it first. The Batch API's thread runs only when nothing else wants
 * the CPU (SCHED_IDLE: a batch has 24 hours); the Files API's, whose
 * writes a client waits for, at nice +19 (per thread on Linux): when the
 * CPU is short, an upload's writer falls behind, its connection is
 * suspended and the client slows down, rather than the interactive
 * requests (bench/stall.py: nice +10 gave 1.6-2x idle TTFT p99 beside a
 * 1 GiB upload, +19 1.1-1.2x, uploads as fast when the CPU is free). */
#define BIO_NICE 19

static void lower_priority(enum ig_bio_queue k)
{
	struct sched_param sp = {0};
	if (k == IG_BIO_BATCHES && sched_setscheduler(0, SCHED_IDLE, &sp) == 0)
		return;
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), BIO_NICE) < 0)
		ig_log_debug("%s: setpriority: %s", __func__, strerror(errno));
}

static void *bio_thread(void *arg)
{
	struct queue *q = arg;
	struct ig_bio *bio = q->bio;
	lower_priority((enum ig_bio_queue)(q - bio->q));
	pthread_mutex_lock(&bio->mu);
	for (;;) {
		struct ig_bio_job *job = IG_LIST_FIRST(&q->jobs, struct ig_bio_job, link);
		if (!job) {
			if (bio->stop)
				break;
			pthread_cond_wait(&q->cv, &bio->mu);
			continue;
		}
		ig_list_del(&job->link);
		pthread_mutex_unlock(&bio->mu);
		job->run(job);
		pthread_mutex_lock(&bio->mu);
		struct home *h = &bio->homes[job->home - bio->gw->rx];
		bool was_empty = ig_list_empty(&h->done);
		ig_list_append(&h->done, &job->link);
		bio->queued--;
		bio->bytes -= job->bytes;
		if (was_empty) { /* one wake-up per batch of completions */
			uint64_t one = 1;
			if (write(h->ev.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
				ig_log_warn("%s: eventfd write: %s", __func__, strerror(errno));
		}
	}
	pthread_mutex_unlock(&bio->mu);
	return NULL;
}

/* Calls the done of each job in list, in order (a done frees its job). */
static void call_done(struct ig_list *list)
{
	struct ig_bio_job *job;
	while ((job = IG_LIST_FIRST(list, struct ig_bio_job, link))) {
		ig_list_del(&job->link);
		job->done(job);
	}
}

/* Finished jobs came back (the eventfd is readable): in the loop, under
 * gw->lock. */
static void on_done(struct ig_event *ev, uint32_t events IG_UNUSED)
{
	struct home *h = ev->data;
	struct ig_list mine;
	uint64_t junk;
	if (read(ev->fd, &junk, sizeof(junk)) < 0 && errno != EAGAIN)
		ig_log_warn("%s: eventfd read: %s", __func__, strerror(errno));
	ig_list_init(&mine);
	pthread_mutex_lock(&h->bio->mu);
	splice(&mine, &h->done);
	pthread_mutex_unlock(&h->bio->mu);
	call_done(&mine);
}

struct ig_bio *ig_bio_start(struct ig_gw *gw)
{
	struct ig_bio *bio = calloc(1, sizeof(*bio));
	if (!bio || !(bio->homes = calloc(gw->nrx, sizeof(*bio->homes)))) {
		free(bio);
		ig_log_error("%s: out of memory", __func__);
		return NULL;
	}
	bio->gw = gw;
	bio->nhomes = gw->nrx;
	pthread_mutex_init(&bio->mu, NULL);
	for (int k = 0; k < IG_BIO_NQUEUES; k++) {
		bio->q[k].bio = bio;
		pthread_cond_init(&bio->q[k].cv, NULL);
		ig_list_init(&bio->q[k].jobs);
	}
	for (size_t i = 0; i < bio->nhomes; i++)
		bio->homes[i].ev.fd = -1;
	for (size_t i = 0; i < bio->nhomes; i++) {
		struct home *h = &bio->homes[i];
		h->bio = bio;
		h->rx = &gw->rx[i];
		ig_list_init(&h->done);
		h->ev = (struct ig_event){eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), on_done, h};
		if (h->ev.fd < 0 || ig_event_add(h->rx, &h->ev, EPOLLIN) < 0) {
			ig_log_error("%s: eventfd: %s", __func__, strerror(errno));
			goto fail;
		}
	}
	for (int k = 0; k < IG_BIO_NQUEUES; k++) {
		int rc = ig_thread_start(&bio->q[k].thread, bio_thread, &bio->q[k]); /* signals blocked */
		if (rc != 0) {
			ig_log_error("cannot start a background I/O thread: %s", strerror(rc));
			goto fail;
		}
		bio->q[k].started = true;
	}
	return bio;
fail:
	ig_bio_free(bio);
	return NULL;
}

void ig_bio_submit(struct ig_bio *bio, struct ig_bio_job *job)
{
	if (!bio || bio->stopped) { /* no thread (tests), or it has ended: this thread is the only one left */
		job->home = NULL;
		job->run(job);
		job->done(job);
		return;
	}
	struct ig_rx *self = ig_rx_self;
	job->home = self && self->gw == bio->gw ? self : ig_gw_home(bio->gw);
	struct queue *q = &bio->q[job->queue < IG_BIO_NQUEUES ? job->queue : 0];
	pthread_mutex_lock(&bio->mu);
	ig_list_append(&q->jobs, &job->link);
	bio->queued++;
	bio->bytes += job->bytes;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&bio->mu);
}

size_t ig_bio_queued(const struct ig_bio *bio, size_t *bytes)
{
	struct ig_bio *b = (struct ig_bio *)bio; /* the mutex, not the state, changes */
	pthread_mutex_lock(&b->mu);
	size_t n = b->queued;
	if (bytes)
		*bytes = b->bytes;
	pthread_mutex_unlock(&b->mu);
	return n;
}

void ig_bio_free(struct ig_bio *bio)
{
	if (!bio)
		return;
	pthread_mutex_lock(&bio->mu);
	bio->stop = true;
	for (int k = 0; k < IG_BIO_NQUEUES; k++)
		pthread_cond_signal(&bio->q[k].cv);
	pthread_mutex_unlock(&bio->mu);
	for (int k = 0; k < IG_BIO_NQUEUES; k++)
		if (bio->q[k].started)
			pthread_join(bio->q[k].thread, NULL);
	/* from here a submit runs its job and done at once (this is the only
	 * thread left) */
	bio->stopped = true;
	for (size_t i = 0; i < bio->nhomes; i++) {
		struct ig_list mine;
		ig_list_init(&mine);
		splice(&mine, &bio->homes[i].done);
		call_done(&mine);
	}
	for (size_t i = 0; i < bio->nhomes; i++) {
		struct home *h = &bio->homes[i];
		if (h->ev.fd >= 0) {
			if (h->rx->epfd >= 0)
				ig_event_del(h->rx, &h->ev);
			close(h->ev.fd);
		}
	}
	pthread_mutex_destroy(&bio->mu);
	for (int k = 0; k < IG_BIO_NQUEUES; k++)
		pthread_cond_destroy(&bio->q[k].cv);
	free(bio->homes);
	free(bio);
}
