/* libcurl multi glue: the reactor hands curl's socket events and timer here;
 * a transfer is a `struct ig_xfer` embedded in the object that started it
 * (a proxied request, a health probe), and its end is reported through the
 * callback stored in it. Knows nothing of requests or probes. */
#ifndef IG_UPSTREAM_H
#define IG_UPSTREAM_H

#include <curl/curl.h>
#include <stdbool.h>

#include "gateway.h"

struct ig_xfer {
	CURL *easy;
	/* The transfer ended: called once, after the handle left the multi
	 * (curl_easy_getinfo still works). */
	void (*done)(struct ig_xfer *x, CURLcode result);
	bool running;   /* in the multi */
	struct ig_rx *rx; /* whose multi: set by ig_upstream_start */
	struct ig_list unpause_link; /* rx->unpause: a paused transfer to go on */
};

/* Returns 0, or -1 (logged). */
int ig_upstream_init(struct ig_rx *rx);
void ig_upstream_free(struct ig_rx *rx);
/* The reactor's calls: a curl socket is ready / curl's timer expired
 * (curl's action, made without the gateway's lock); then, with the lock,
 * the transfers that ended call their done callbacks. */
void ig_upstream_on_socket(struct ig_rx *rx, int fd, uint32_t events);
void ig_upstream_on_timer(struct ig_rx *rx);
void ig_upstream_check_done(struct ig_rx *rx);

/* An easy handle from the free list (or a new one); and back (NULL is
 * fine). Saves an allocation and setup per request. */
CURL *ig_upstream_easy_get(struct ig_rx *rx);
void ig_upstream_easy_put(struct ig_rx *rx, CURL *easy);

/* Starts x->easy (its options set by the caller) in rx's multi, on rx's
 * thread; x->done is called when it ends, on the same. Returns CURLM_OK or
 * curl's error. */
CURLMcode ig_upstream_start(struct ig_rx *rx, struct ig_xfer *x);
/* Asks x's reactor to let a paused transfer go on (curl_easy_pause), at
 * the top of its next turn with the lock let go: never from inside
 * libmicrohttpd, whose response mutex would then be held while curl runs
 * the write callback (which may take the gateway's lock: an inversion). */
void ig_upstream_unpause(struct ig_xfer *x);
/* The reactor's: unpauses what was asked (lock let go). */
void ig_upstream_run_unpauses(struct ig_rx *rx);

/* Takes a running transfer out of the multi without calling x->done (the
 * caller ends it: idle timeout, client gone). Nothing when not running. */
void ig_upstream_stop(struct ig_xfer *x);

#endif
