/* libcurl multi glue: the reactor hands curl's socket events and timer here;
 * a transfer is a `struct ig_xfer` embedded in the object that started it
 * (a proxied request, a health probe), and its end is reported through the
 * callback stored in it. Knows nothing of requests or probes. */
#ifndef IG_UPSTREAM_H
#define IG_UPSTREAM_H

#include <curl/curl.h>
#include <stdbool.h>
#include <stdint.h>

#include "infergate/list.h"

struct ig_rx;

/* Kinds of upstream failure: proxy.c classifies a transfer's end (curl's
 * result and the status), health.c and the metrics count them. */
enum ig_upstream_error {
	IG_UPERR_NONE,
	IG_UPERR_CONNECT, /* refused, unreachable, connect timeout */
	IG_UPERR_RESET,   /* connection closed or reset mid-transfer */
	IG_UPERR_TIMEOUT, /* no byte for timeouts.idle_s */
	IG_UPERR_STATUS,  /* 502, 503 or 504 from the backend */
	IG_UPERR_OTHER,
};

/* epoll data for curl sockets in a reactor's set: this bit set, the fd in
 * the low 32 bits (user-space pointers never have bit 63 set on Linux).
 * Tagged by fd, not by pointer, so an event for a socket curl closed
 * earlier in the same batch is harmless (the loop hands these to
 * ig_upstream_on_socket, every other event is a struct ig_event). */
#define IG_EV_CURL_BIT (1ull << 63)

struct ig_xfer {
	CURL *easy;     /* written by: adapters (the others listed in check_layers.py) */
	/* The transfer ended: called once, after the handle left the multi
	 * (curl_easy_getinfo still works). */
	void (*done)(struct ig_xfer *x, CURLcode result); /* written by: adapters (and check_layers.py's list) */
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

/* An easy handle from rx's free list (or a new one); and back (NULL is
 * fine), reset for its next use. Saves an allocation and setup per
 * request. On rx's thread only: a handle is configured (and reset) by its
 * own reactor, and the list is that reactor's. */
CURL *ig_upstream_easy_get(struct ig_rx *rx);
void ig_upstream_easy_put(struct ig_rx *rx, CURL *easy);

/* headers with the backend's key appended when backend_api_key is set
 * ("Authorization: Bearer KEY", what SGLang's and vLLM's --api-key ask of
 * every route but the health ones); returns the list (curl_slist_append's
 * rules: NULL out of memory). */
struct ig_conf;
struct curl_slist *ig_upstream_backend_key(struct curl_slist *headers, const struct ig_conf *cfg);

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
 * caller ends it: idle timeout, client gone). Nothing when not running.
 * On x->rx's thread only: another reactor posts that work to it (rx.h). */
void ig_upstream_stop(struct ig_xfer *x);

#endif
