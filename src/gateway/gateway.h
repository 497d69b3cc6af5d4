/* The gateway process: one reactor (epoll loop) that owns an MHD daemon in
 * external mode, a curl multi handle and the request objects. Everything in
 * this header is touched by the reactor thread only, except the backend
 * counters (atomics, see backend.h).
 *
 * Data flows one way: server.c (client request) -> proxy.c (request object,
 * routing, queue, retries) -> upstream.c (curl) -> proxy.c (response bytes)
 * -> server.c (MHD response) -> client. */
#ifndef IG_GATEWAY_H
#define IG_GATEWAY_H

#include <curl/curl.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "accesslog.h"
#include "auth.h"
#include "backend.h"
#include "infergate/buf.h"
#include "conf.h"

#define IG_MAX_TRIES 21 /* retries <= 20, plus the first attempt */

/* What an epoll event belongs to. */
enum ig_evkind {
	IG_EV_MHD,      /* the MHD daemon's epoll fd */
	IG_EV_CURL,     /* a curl socket */
	IG_EV_TICK,     /* housekeeping timer: probes, queue deadlines */
	IG_EV_SIGNAL,   /* signalfd */
	IG_EV_CLIENT,   /* a suspended client's socket, watched for hang-up */
	IG_EV_DISCOVER, /* eventfd: DNS discovery has results */
};

/* epoll data for curl sockets: this bit set, the fd in the low 32 bits
 * (user-space pointers never have bit 63 set on Linux). */
#define IG_EV_CURL_BIT (1ull << 63)

struct ig_evsrc {
	enum ig_evkind kind;
	int fd;
	void *ptr;
};

/* Kinds of curl transfers, the first field of every CURLOPT_PRIVATE. */
enum ig_xfer_kind {
	IG_XFER_REQUEST, /* a proxied client request */
	IG_XFER_PROBE,   /* a health probe */
	IG_XFER_ADMIN,   /* an /admin request reading its body (no transfer) */
};

enum ig_req_phase {
	IG_REQ_READING,  /* receiving the client body */
	IG_REQ_QUEUED,   /* waiting for a backend slot */
	IG_REQ_UPSTREAM, /* transfer running */
	IG_REQ_FINISHED, /* answer decided (response or error) */
};

enum ig_upstream_error {
	IG_UPERR_NONE,
	IG_UPERR_CONNECT, /* refused, unreachable, connect timeout */
	IG_UPERR_RESET,   /* connection closed or reset mid-transfer */
	IG_UPERR_TIMEOUT, /* no byte for timeouts.idle_s */
	IG_UPERR_STATUS,  /* 502, 503 or 504 from the backend */
	IG_UPERR_OTHER,
};

struct ig_gw;

struct ig_req {
	enum ig_xfer_kind kind;      /* IG_XFER_REQUEST; first for CURLOPT_PRIVATE */
	struct ig_gw *gw;
	struct MHD_Connection *conn;
	struct ig_req *prev, *next;  /* gw->reqs: every live request */
	struct ig_req *qnext, *qprev;/* gw queue, when QUEUED */
	enum ig_req_phase phase;
	int route_idx;               /* upstream path: ig_routes[route_idx] */
	struct ig_buf body;
	bool too_large;
	bool stream;                 /* client asked for "stream": true */
	bool suspended;              /* MHD connection suspended by us */
	bool committed;              /* response bytes handed to MHD: no retry */
	bool upstream_done;
	bool upstream_failed;        /* ended with an error after commit */
	bool sse;                    /* the streamed body is text/event-stream */
	size_t ready;                /* pending resp bytes that end a whole SSE event */
	bool client_gone;
	bool paused;                 /* curl transfer paused for back-pressure */
	bool watching;               /* client fd in our epoll for hang-up */
	bool in_multi;
	char request_id[80];
	char client[48];
	char *model;
	long max_tokens;
	struct curl_slist *up_headers;  /* headers sent upstream */
	CURL *easy;
	struct ig_backend *backend;     /* current attempt */
	struct ig_backend *tried[IG_MAX_TRIES];
	int ntried;
	int retries_done;
	long up_status;
	struct ig_buf up_resp_headers;  /* "Name\0Value\0" pairs to relay */
	bool headers_done;
	struct ig_buf resp;             /* response body bytes not yet sent */
	unsigned err_status;            /* error answer decided by the gateway */
	char *err_body;
	enum ig_upstream_error last_err;
	uint64_t t_start_us, t_first_byte_us, q_deadline_ms;
	uint64_t last_io_ms;            /* last byte from the backend (idle timeout) */
	uint64_t suspended_at_ms;       /* when it was last suspended */
	struct ig_buf sse_line;         /* partial SSE line, to find the usage chunk */
	long prompt_tokens, completion_tokens; /* from "usage", -1 when none */
	unsigned stream_error;          /* a 200 stream that carried an error event:
					 * the status it names (counted and logged
					 * as that), 0 when none */
	char *stream_error_msg;         /* its message, for the access log */
	unsigned status_sent;           /* what the client was answered */
	uint64_t bytes_out;
	uint64_t t_answer_us;           /* response handed to MHD */
	struct ig_evsrc client_ev;
	int client_fd;
};

struct ig_probe;

/* Latency histogram (Prometheus style: cumulative when printed). */
#define IG_HIST_BUCKETS 16
struct ig_hist {
	uint64_t counts[IG_HIST_BUCKETS + 1]; /* last one: above every bound */
	double sum;
	uint64_t n;
};

/* Requests by route, status and backend: a short list (a few dozen
 * combinations in practice), searched linearly. */
struct ig_reqcount {
	int route;          /* index in IG_ROUTES */
	unsigned status;
	char *backend;      /* URL, or "" when no backend answered */
	uint64_t n;
};

#define IG_NROUTES 3
extern const char *const ig_routes[IG_NROUTES];

struct ig_stats {
	struct ig_hist duration[IG_NROUTES];   /* whole request */
	struct ig_hist ttfb[IG_NROUTES];       /* streams: first byte */
	struct ig_reqcount *counts;
	size_t ncounts;
	uint64_t requests;          /* proxied requests received */
	uint64_t responses[6];      /* by status class 1xx..5xx, index status/100 */
	uint64_t retries;
	uint64_t client_aborts;
	uint64_t queue_rejected;    /* 429 */
	uint64_t queue_timeouts;    /* 503 after waiting */
	uint64_t stream_errors;     /* 200 streams that carried an error event */
	uint64_t upstream_errors[IG_UPERR_OTHER + 1];
	uint64_t bytes_in, bytes_out;
	uint64_t prompt_tokens, completion_tokens;
};

struct ig_gw {
	struct ig_conf *cfg;
	struct ig_pool pool;
	int epfd;
	struct ig_evsrc ev_mhd, ev_tick, ev_signal;
	int tick_fd, signal_fd;
	uint64_t curl_deadline_us;     /* when curl wants its timeout action */
	uint32_t *curl_fds;            /* upstream.c: epoll state of curl sockets, by fd */
	size_t ncurl_fds;
	CURL **easy_free;              /* reset easy handles kept for reuse */
	size_t neasy_free;
	int listen_fd;
	struct MHD_Daemon *mhd;
	CURLM *multi;
	bool resume_pending;
	struct ig_req *reqs;           /* all live requests */
	size_t nreqs;
	struct ig_req *qhead, *qtail;  /* FIFO of QUEUED requests */
	size_t qlen;
	struct ig_stats stats;
	uint64_t started_ms;
	bool stopping;
	uint64_t stop_deadline_ms;
	int exit_code;
	uint64_t next_idle_scan_ms;
	uint64_t next_watch_scan_ms;
	struct ig_keyset api_keys, admin_keys;
	struct ig_accesslog alog;
	struct ig_discovery *discovery;  /* NULL without discover entries */
	int argc;                      /* to re-read the configuration on SIGHUP */
	char **argv;
};

/* reactor.c */
/* Sets up epoll, timers, signals, MHD and curl. Returns 0 or -1 (logged). */
int ig_gw_init(struct ig_gw *gw, struct ig_conf *cfg);
/* Runs until a stop signal and the grace period; returns the exit code. */
int ig_gw_run(struct ig_gw *gw);
void ig_gw_free(struct ig_gw *gw);
/* An easy handle from the free list (or a new one); and back (NULL is
 * fine). Saves an allocation and setup per request. */
CURL *ig_gw_easy_get(struct ig_gw *gw);
void ig_gw_easy_put(struct ig_gw *gw, CURL *easy);
/* Asks the loop to run MHD again (after MHD_resume_connection). */
void ig_gw_resume(struct ig_gw *gw, struct ig_req *req);

/* server.c: the MHD side */
MHD_AccessHandlerCallback ig_server_handler(void);
void ig_server_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe);
/* The client's address as text ("" when unknown). */
void ig_server_client_addr(struct MHD_Connection *conn, char *out, size_t n);
/* Queues an OpenAI-shaped error; returns MHD's result. */
enum MHD_Result ig_server_error(struct MHD_Connection *conn, unsigned status, const char *message,
				const char *param, const char *code, const char *request_id);

/* proxy.c: the request object */
struct ig_req *ig_req_new(struct ig_gw *gw, struct MHD_Connection *conn, int route_idx);
void ig_req_free(struct ig_req *req);
/* Body complete: validate and dispatch. Returns the MHD result; may suspend. */
enum MHD_Result ig_req_start(struct ig_req *req);
/* Called by the access handler after a resume: queue whatever is decided. */
enum MHD_Result ig_req_respond(struct ig_req *req);
/* The client left (completion callback or hang-up): abort everything. */
void ig_req_client_gone(struct ig_req *req);
/* A curl transfer of this request finished. */
void ig_req_upstream_done(struct ig_req *req, CURLcode result);
/* The status a request ended with: what was sent, or the status named by
 * the error event a 200 stream carried (metrics and the access log count it
 * as that). */
static inline unsigned ig_req_status(const struct ig_req *req)
{
	return req->stream_error ? req->stream_error : req->status_sent;
}
/* Writes the request's access log line (if the log is on). */
void ig_req_log(struct ig_req *req, bool completed);
/* Housekeeping: queue deadlines. */
void ig_proxy_tick(struct ig_gw *gw, uint64_t now_ms);
/* A backend slot was freed: start queued requests. */
void ig_proxy_drain_queue(struct ig_gw *gw);

/* upstream.c: curl multi glue */
int ig_upstream_init(struct ig_gw *gw);
void ig_upstream_free(struct ig_gw *gw);
void ig_upstream_on_socket(struct ig_gw *gw, int fd, uint32_t events);
void ig_upstream_on_timer(struct ig_gw *gw);
/* Every easy handle must go through this: curl's socket closes are how
 * sockets leave the reactor's epoll set. */
void ig_upstream_watch_closes(struct ig_gw *gw, CURL *easy);

/* health.c: active probes and passive accounting */
int ig_health_init(struct ig_gw *gw);
void ig_health_free(struct ig_gw *gw);
/* Probe state for a backend added at run time / about to be removed. */
int ig_health_add(struct ig_gw *gw, struct ig_backend *b);
void ig_health_remove(struct ig_gw *gw, struct ig_backend *b);
void ig_health_tick(struct ig_gw *gw, uint64_t now_ms);
void ig_health_probe_done(struct ig_gw *gw, struct ig_probe *p, CURLcode result);
/* A request to b succeeded / failed (passive checks). */
void ig_health_passive_ok(struct ig_gw *gw, struct ig_backend *b);
void ig_health_passive_fail(struct ig_gw *gw, struct ig_backend *b, enum ig_upstream_error e,
			    const char *detail);

/* admin.c: runtime control and reload */
/* Answers an /admin request (key already checked); body may be empty. */
enum MHD_Result ig_admin_handle(struct ig_gw *gw, struct MHD_Connection *conn, const char *method,
				const char *url, const char *body, size_t len);
/* Finishes removals whose in-flight requests are done. */
void ig_admin_tick(struct ig_gw *gw);
/* SIGHUP: re-read the configuration; on any problem keep the running one. */
void ig_gw_reload(struct ig_gw *gw);
/* Loads keys and opens the access log for cfg; -1 with *err on a problem. */
int ig_gw_load_files(struct ig_gw *gw, const struct ig_conf *cfg, char **err);

/* discover.c: DNS discovery of backends */
/* Starts resolving the config's discover entries (none: does nothing). */
int ig_discovery_start(struct ig_gw *gw);
void ig_discovery_stop(struct ig_gw *gw);
void ig_discovery_on_event(struct ig_gw *gw);

/* metrics.c: /metrics, /health, /health/backends, /v1/models bodies */
char *ig_metrics_text(struct ig_gw *gw);
/* Counts a finished proxied request (status, latency, backend). */
void ig_metrics_observe(struct ig_gw *gw, const struct ig_req *req);
void ig_metrics_free(struct ig_gw *gw);
char *ig_health_json(struct ig_gw *gw, unsigned *status);
char *ig_backends_json(struct ig_gw *gw);
json_t *ig_backend_to_json(const struct ig_backend *b, uint64_t now);
char *ig_models_json(struct ig_gw *gw);

#endif
