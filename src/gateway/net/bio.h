/* The gateway's background I/O threads, after Redis's bio.c: what can
 * block on a disk (writes, fsync, rename, reading a whole file) runs here,
 * never on a reactor or under gw->lock. One thread per kind of job, each
 * with its FIFO queue: jobs of a kind run in the order they were
 * submitted, so two jobs on the same file (an upload's chunks, then its
 * fsync and rename) need no lock between them, and a long job of one kind
 * (a validation slice) never delays one of the other (an upload's write:
 * with one queue, an upload went at one chunk per slice). A job's
 * `done` runs afterwards on the reactor that submitted it (its eventfd is
 * in that reactor's epoll set), in the loop, under gw->lock, in the order
 * the jobs ran: that is where results touch the gateway's state and
 * library objects (the submitter's MHD connection). Not here: what a job
 * does (files.c, batches.c), or anything that talks to the network. */
#ifndef IG_BIO_H
#define IG_BIO_H

#include <stddef.h>
#include <stdint.h>

#include "gateway.h"
#include "infergate/list.h"

/* The kinds of job, each its own thread and queue. */
enum ig_bio_queue {
	IG_BIO_FILES,   /* the Files API's: an upload's writes, fsync and rename; removals (short, a client waits) */
	IG_BIO_BATCHES, /* the Batch API's: validation slices, result-file scans, batch.json, finalizing */
	IG_BIO_NQUEUES,
};

/* One piece of work, embedded in the caller's own object (IG_CONTAINER_OF
 * gets it back in run and done). */
struct ig_bio_job {
	struct ig_list link;                    /* in the queue, then in its home's done list */
	enum ig_bio_queue queue;                /* its kind (0: IG_BIO_FILES); written by: any (the submitter fills the job) */
	struct ig_rx *home;                     /* set by ig_bio_submit: whose loop runs done */
	/* On the I/O thread, without gw->lock: touches only what the job
	 * owns (and what nobody changes while it is queued). */
	void (*run)(struct ig_bio_job *job);    /* written by: any (the submitter) */
	/* On home's thread, under gw->lock, after run: applies the result and
	 * frees the job (it may submit another). */
	void (*done)(struct ig_bio_job *job);   /* written by: any (the submitter) */
	size_t bytes;                           /* memory it holds (for ig_bio_queued); written by: any (the submitter) */
};

struct ig_bio;

/* Starts the threads and puts one eventfd per reactor in that reactor's
 * epoll set (call after the reactors' epoll sets exist, before their
 * threads start). NULL when it cannot (logged). */
struct ig_bio *ig_bio_start(struct ig_gw *gw);
/* Queues job (run and done set); from then on the job is bio's until its
 * done: the caller does not touch it. The caller holds the lock if
 * threaded and runs on a reactor (the job's done comes back to it) or
 * before/after the loops (then to reactor 0). With no thread (bio NULL: a
 * gateway without data_dir, the unit tests) or once ig_bio_free has begun,
 * run and done are called at once, here. */
void ig_bio_submit(struct ig_bio *bio, struct ig_bio_job *job);
/* Jobs queued or running (all kinds), and the bytes they hold. */
size_t ig_bio_queued(const struct ig_bio *bio, size_t *bytes);
/* Runs every job still queued, stops the threads, and calls every done not
 * called yet, on this thread (the loops have ended: nothing else runs).
 * NULL is fine. */
void ig_bio_free(struct ig_bio *bio);

#endif
