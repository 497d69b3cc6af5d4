/* The engines' KV events (kvevents.h): one thread, zmq_poll over every
 * source's sockets, each batch fed to the sink in sequence.
 *
 * The wire is vLLM's (vllm/distributed/kv_events.py, ZmqEventPublisher;
 * SGLang's python/sglang/srt/disaggregation/kv_events.py is the same
 * publisher): multipart [topic, 8-byte big-endian sequence, msgpack batch]
 * on a PUB socket; a ROUTER answers [empty, 8-byte start] with one
 * [empty, seq, batch] per buffered batch from there (newer vLLMs put the
 * topic before seq: [empty, topic, seq, batch]) and then a seq of -1 with
 * an empty batch. The sequence is handled as vLLM's example subscriber
 * (examples/online_serving/kv_events_subscriber.py) does, and more:
 *
 * - the first batch of a subscription that is not seq 0: the engine ran
 *   before we joined; with a replay endpoint its buffer is asked from 0;
 * - seq above the one expected: a gap (the SUB socket's queue overflowed,
 *   the connection broke): asked from the replay; the live batches that
 *   come meanwhile wait, in order; what the replay cannot give (no
 *   endpoint, its buffer starts later, no answer within
 *   IG_KVEV_REPLAY_TIMEOUT_MS) is lost: the source is cleared and its
 *   backend approximate for stale_after_ms (the index then fills again
 *   from the new batches, whose parents it may not know);
 * - seq below it: the engine restarted and counts from 0 again: its cache
 *   is empty, so is the source.
 *
 * Silence is not staleness (an idle engine publishes nothing): a source
 * is stale when its backend was given a request more than stale_after_ms
 * ago (backend.h: last_sent_ms) and no batch came since; a batch makes it
 * exact again. Every transition from exact to not is counted (fallbacks).
 *
 * Threads: the table of sources (`v`, slots, `dropped`) is under `mu`,
 * which reactor 0's sync and the reports take; a source's sockets and
 * sequence are the events thread's alone; its counters and state are
 * atomics that the reports read. A source is freed by the thread only,
 * under `mu`, after its slot in the index is cleared. */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "fleet/kvevents.h"
#include "infergate/log.h"
#include "infergate/util.h"

#define POLL_MS 50                  /* the thread's tick: replay deadlines, staleness */
#define BURST 64                    /* messages read from one socket per turn */
#define MAX_MSG_BYTES (64L << 20)   /* a bigger message is refused by ZMQ (hostile) */
#define PEND_MAX 20000              /* live batches held during a replay, at most */
#define PEND_MAX_BYTES (64u << 20)
#define LOG_EVERY_MS 10000          /* a source's malformed messages: the first, then a line per this */
#define END_SEQ UINT64_MAX          /* the replay's end: seq -1 */

enum state {
	ST_WAITING, /* subscribed, no batch yet */
	ST_FLOWING, /* batches in sequence: the index says what it holds */
	ST_STALE,   /* requests sent, no batch since stale_after_ms */
	ST_LOST,    /* a gap not filled: approximate for stale_after_ms */
};
static const char *const state_names[] = {"waiting", "flowing", "stale", "lost"};

enum counter {
	C_BATCHES, C_EVENTS, C_REPLAYED, C_GAPS, C_GAPS_FILLED, C_GAPS_LOST, C_RESTARTS, C_MALFORMED, C_FALLBACKS,
	NCOUNTERS,
};
static const char *const counter_names[] = {"batches", "events", "replayed", "gaps", "gaps_filled",
					    "gaps_lost", "restarts", "malformed", "fallbacks"};

/* A batch that came live while a replay was asked for. */
struct pending {
	uint64_t seq;
	void *data;
	size_t len;
};

struct src {
	/* set by the sync, under mu */
	int backend_id;
	struct ig_backend *b;      /* lives until the fleet is freed, after this thread */
	int rank;
	size_t slot;               /* its source id in the index */
	char *url;                 /* its backend's, for labels */
	char *ep, *replay_ep;      /* this rank's */
	char *ep0, *replay_ep0;    /* rank 0's: what the configuration says */
	int nranks;
	enum ig_kv_flavor flavor;
	atomic_bool dropped;       /* the sync let it go: the thread clears and frees it */
	/* the events thread's */
	void *sub, *dealer;
	uint64_t open_after_ms;    /* its endpoint refused: tried again then */
	bool have_seq;
	uint64_t next;             /* the seq expected */
	bool asking;               /* a replay is under way */
	bool ask_join;             /* ... asked from 0 at a join or restart, not for a gap */
	bool ask_short;            /* ... and it started past what was expected */
	uint64_t ask_deadline_ms;
	struct pending *pend;
	size_t npend, cappend, pend_bytes;
	uint64_t last_batch_ms;    /* when the last batch came (or the subscription began) */
	uint64_t approx_until_ms;  /* ST_LOST: until then */
	uint64_t last_log_ms, unlogged;
	/* read by the reports */
	atomic_int state;          /* enum state */
	_Atomic uint64_t c[NCOUNTERS];
};

struct ig_kvevents {
	void *zctx;
	pthread_t thr;
	bool started;
	int wakefd;
	atomic_bool stop;
	struct ig_kvevents_sink sink;
	size_t nsrc;
	pthread_mutex_t mu;        /* the table: v, n, used, each source's dropped */
	struct src **v;
	size_t n, cap;
	unsigned char *used;       /* a slot taken (until its source is cleared) */
	bool full_logged;
	_Atomic long stale_after_ms;
	/* the thread's snapshot of the table */
	struct src **snap;
	size_t nsnap, capsnap;
};

static void count(struct src *s, enum counter c, uint64_t n)
{
	atomic_fetch_add_explicit(&s->c[c], n, memory_order_relaxed);
}

static uint64_t counter(const struct src *s, enum counter c)
{
	return atomic_load_explicit(&s->c[c], memory_order_relaxed);
}

/* ---- endpoints ---- */

char *ig_kvevents_rank_endpoint(const char *ep, int rank)
{
	if (rank == 0 || strncmp(ep, "tcp://", 6) != 0)
		return rank == 0 ? strdup(ep) : ig_strdupf("%s_dp%d", ep, rank);
	const char *colon = strrchr(ep, ':');
	return ig_strdupf("%.*s:%ld", (int)(colon - ep), ep, strtol(colon + 1, NULL, 10) + rank);
}

/* tcp://HOST:port for a backend URL (normalised: scheme://host:port...). */
static char *derived(const char *url, long port)
{
	const char *h = strstr(url, "://");
	h = h ? h + 3 : url;
	size_t n = h[0] == '[' ? strcspn(h, "]") + 1 : strcspn(h, ":/");
	return ig_strdupf("tcp://%.*s:%ld", (int)n, h, port);
}

/* The configuration entry b came from, or NULL (added through the admin API). */
static const struct ig_backend_conf *entry_of(const struct ig_conf *cfg, const struct ig_backend *b)
{
	for (size_t i = 0; i < cfg->n_backends; i++) {
		const struct ig_backend_conf *bc = &cfg->backends[i];
		if (bc->discover ? b->discover && strcmp(bc->url, b->discover) == 0
				 : !b->discover && strcmp(bc->url, b->url) == 0)
			return bc;
	}
	return NULL;
}

/* What cfg says of b's events: rank 0's endpoints (malloc'd; *ep NULL:
 * none), its ranks and format. */
static void spec_of(const struct ig_conf *cfg, const struct ig_backend *b, char **ep, char **replay, int *ranks,
		    enum ig_kv_flavor *flavor)
{
	const struct ig_backend_conf *bc = entry_of(cfg, b);
	*ep = *replay = NULL;
	*ranks = bc && bc->dp_ranks > 1 ? (int)bc->dp_ranks : 1;
	*flavor = bc && bc->kv_format ? (enum ig_kv_flavor)(bc->kv_format - 1) : (enum ig_kv_flavor)cfg->kv_format;
	if (bc && bc->kv_events) {
		*ep = strdup(bc->kv_events);
		*replay = bc->kv_events_replay ? strdup(bc->kv_events_replay) : NULL;
	} else if (cfg->kv_port) {
		*ep = derived(b->url, cfg->kv_port);
		*replay = cfg->kv_replay_port ? derived(b->url, cfg->kv_replay_port) : NULL;
	}
}

bool ig_kvevents_wanted(const struct ig_conf *cfg)
{
	for (size_t i = 0; !cfg->kv_port && i < cfg->n_backends; i++)
		if (cfg->backends[i].kv_events)
			return true;
	return cfg->kv_port != 0;
}

size_t ig_kvevents_sources(const struct ig_conf *cfg)
{
	size_t n = 0;
	for (size_t i = 0; i < cfg->n_backends; i++) {
		const struct ig_backend_conf *bc = &cfg->backends[i];
		size_t r = bc->dp_ranks > 1 ? (size_t)bc->dp_ranks : 1;
		n += bc->discover ? 16 * r : r; /* a name resolves to a few addresses */
	}
	n = 2 * n + 16;
	return n > 4096 ? 4096 : n;
}

/* ---- the table (under mu) ---- */

static void src_free(struct src *s)
{
	for (size_t i = 0; i < s->npend; i++)
		free(s->pend[i].data);
	free(s->pend);
	free(s->url);
	free(s->ep);
	free(s->replay_ep);
	free(s->ep0);
	free(s->replay_ep0);
	free(s);
}

static bool same(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* The first of n free consecutive slots, or nsrc. */
static size_t find_slots(const struct ig_kvevents *kv, size_t n)
{
	for (size_t i = 0; i + n <= kv->nsrc; i++) {
		size_t k = 0;
		while (k < n && !kv->used[i + k])
			k++;
		if (k == n)
			return i;
		i += k;
	}
	return kv->nsrc;
}

/* An array with room for `need` items (ig_grow makes room for one more;
 * here a backend brings all its ranks at once, a poll set is rebuilt whole). */
static bool room(void *vp, size_t *cap, size_t need, size_t size)
{
	void **v = vp;
	if (need <= *cap)
		return true;
	void *nv = realloc(*v, need * size);
	if (!nv)
		return false; /* the old array stays, and its capacity */
	*v = nv;
	*cap = need;
	return true;
}

/* Subscribes b's ranks. Returns 0, or -1 (no slots or memory: logged once). */
static int add_sources(struct ig_kvevents *kv, struct ig_backend *b, const char *ep, const char *replay, int ranks,
		       enum ig_kv_flavor fl)
{
	size_t at = find_slots(kv, (size_t)ranks);
	if (at == kv->nsrc || !room(&kv->v, &kv->cap, kv->n + (size_t)ranks, sizeof(*kv->v))) {
		if (!kv->full_logged)
			ig_log_warn("kv_events: no room for backend %s's %d sources (%zu held): it is routed without "
				    "its events", b->url, ranks, kv->nsrc);
		kv->full_logged = true;
		return -1;
	}
	uint64_t now = ig_now_ms();
	for (int r = 0; r < ranks; r++) {
		struct src *s = calloc(1, sizeof(*s));
		if (!s)
			abort();
		/* A server whose ranks are entries of their own (backend.h):
		 * each rank's events are its entry's; else the entry's, all. */
		struct ig_backend *rb = b->nranks == ranks && r < b->nranks ? ig_backend_rank(b, r) : b;
		s->backend_id = rb->id;
		s->b = rb;
		s->rank = r;
		s->nranks = ranks;
		s->slot = at + (size_t)r;
		s->url = strdup(b->url);
		s->ep0 = strdup(ep);
		s->replay_ep0 = replay ? strdup(replay) : NULL;
		s->ep = ig_kvevents_rank_endpoint(ep, r);
		s->replay_ep = replay ? ig_kvevents_rank_endpoint(replay, r) : NULL;
		s->flavor = fl;
		s->last_batch_ms = now;
		if (!s->url || !s->ep0 || !s->ep || (replay && (!s->replay_ep0 || !s->replay_ep)))
			abort();
		kv->used[s->slot] = 1;
		kv->v[kv->n++] = s;
	}
	if (b->nranks > 1 && b->nranks == ranks) {
		for (int r = 0; r < ranks; r++) {
			atomic_store(&ig_backend_rank(b, r)->kv_exact, 0);
			atomic_store(&ig_backend_rank(b, r)->kv_ranks, 1);
			atomic_store(&ig_backend_rank(b, r)->kv_src, (int)at + r + 1);
		}
	} else {
		atomic_store(&b->kv_exact, 0);
		atomic_store(&b->kv_ranks, ranks);
		atomic_store(&b->kv_src, (int)at + 1);
	}
	ig_log_info("kv_events: backend %s: subscribing to %s%s%s (%s, %d rank%s)", b->url, ep, replay ? ", replay " : "",
		    replay ? replay : "", fl == IG_KV_SGLANG ? "sglang" : "vllm", ranks, ranks > 1 ? "s" : "");
	return 0;
}

static void wake(struct ig_kvevents *kv)
{
	uint64_t one = 1;
	if (write(kv->wakefd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		ig_log_warn("kv_events: waking the events thread: %s", strerror(errno));
}

void ig_kvevents_sync(struct ig_kvevents *kv, const struct ig_fleet *fleet, const struct ig_conf *cfg)
{
	if (!kv)
		return;
	atomic_store(&kv->stale_after_ms, cfg->kv_stale_after_ms);
	bool changed = false;
	pthread_mutex_lock(&kv->mu);
	/* sources whose backend left the table or whose endpoints changed go */
	for (size_t i = 0; i < kv->n; i++) {
		struct src *s = kv->v[i];
		if (s->dropped)
			continue;
		struct ig_backend *b = ig_backend_fleet_find_id(fleet, s->backend_id);
		char *ep = NULL, *replay = NULL;
		int ranks = 1;
		enum ig_kv_flavor fl = IG_KV_VLLM;
		if (b)
			spec_of(cfg, b, &ep, &replay, &ranks, &fl);
		if (!b || !same(ep, s->ep0) || !same(replay, s->replay_ep0) || ranks != s->nranks || fl != s->flavor) {
			s->dropped = changed = true;
			atomic_store(&s->b->kv_src, 0); /* its entry's (a rank's own, or the server's) */
			atomic_store(&s->b->kv_exact, 0);
			if (s->rank == 0) {
				ig_log_info("kv_events: backend %s: %s", s->url,
					    b ? "its events' settings changed: subscribing again" : "gone: unsubscribed");
			}
		}
		free(ep);
		free(replay);
	}
	/* backends with events and no sources are subscribed */
	for (size_t i = 0; i < fleet->n; i++) {
		struct ig_backend *b = fleet->v[i];
		bool has = false;
		if (b->server != b)
			continue; /* a rank: subscribed with its server's rank 0 */
		for (size_t j = 0; j < kv->n && !has; j++)
			has = kv->v[j]->backend_id == b->id && !kv->v[j]->dropped;
		if (has)
			continue;
		char *ep = NULL, *replay = NULL;
		int ranks;
		enum ig_kv_flavor fl;
		spec_of(cfg, b, &ep, &replay, &ranks, &fl);
		if (ep && add_sources(kv, b, ep, replay, ranks, fl) == 0)
			changed = true;
		free(ep);
		free(replay);
	}
	pthread_mutex_unlock(&kv->mu);
	if (changed)
		wake(kv);
}

/* ---- the events thread ---- */

static void *open_socket(struct ig_kvevents *kv, int type, const char *ep, const char *url)
{
	void *z = zmq_socket(kv->zctx, type);
	int zero = 0, one = 1, hwm = 100000, ivl_max = 2000;
	int64_t max = MAX_MSG_BYTES;
	if (!z) {
		ig_log_error("kv_events: backend %s: zmq_socket: %s", url, zmq_strerror(zmq_errno()));
		return NULL;
	}
	zmq_setsockopt(z, ZMQ_LINGER, &zero, sizeof(zero));
	zmq_setsockopt(z, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(z, ZMQ_MAXMSGSIZE, &max, sizeof(max));
	zmq_setsockopt(z, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof(ivl_max));
	zmq_setsockopt(z, ZMQ_IPV6, &one, sizeof(one));
	if (type == ZMQ_SUB)
		zmq_setsockopt(z, ZMQ_SUBSCRIBE, "", 0); /* vLLM's topic is "" by default: take any */
	if (zmq_connect(z, ep) < 0) {
		/* the configuration checked its form: a name that does not resolve */
		ig_log_error("kv_events: backend %s: cannot connect to %s: %s", url, ep, zmq_strerror(zmq_errno()));
		zmq_close(z);
		return NULL;
	}
	return z;
}

static void close_socket(void **z)
{
	if (*z)
		zmq_close(*z);
	*z = NULL;
}

static void set_state(struct src *s, enum state to)
{
	enum state from = (enum state)atomic_exchange(&s->state, (int)to);
	if (from == to)
		return;
	if (from == ST_FLOWING)
		count(s, C_FALLBACKS, 1);
	if (to != ST_WAITING && (from == ST_FLOWING || to == ST_FLOWING))
		ig_log_info("kv_events: backend %s rank %d: %s -> %s", s->url, s->rank, state_names[from],
			    state_names[to]);
}

/* The source's blocks are no longer known: cleared, approximate for a while. */
static void lose(struct ig_kvevents *kv, struct src *s, uint64_t now)
{
	kv->sink.clear(kv->sink.arg, s->slot);
	count(s, C_GAPS_LOST, 1);
	s->approx_until_ms = now + (uint64_t)atomic_load(&kv->stale_after_ms);
	set_state(s, ST_LOST);
}

static void malformed(struct src *s, uint64_t now, const char *why)
{
	count(s, C_MALFORMED, 1);
	if (counter(s, C_MALFORMED) == 1 || now - s->last_log_ms >= LOG_EVERY_MS) {
		ig_log_warn("kv_events: backend %s rank %d: a malformed message dropped (%s)%s", s->url, s->rank, why,
			    s->unlogged ? "; more since the last line" : "");
		s->last_log_ms = now;
		s->unlogged = 0;
	} else {
		s->unlogged++;
	}
}

/* Batch seq, the one expected: decoded and applied. */
static void apply(struct ig_kvevents *kv, struct src *s, uint64_t seq, const void *data, size_t len, uint64_t now,
		  bool replayed)
{
	struct ig_kv_batch b;
	char err[200];
	s->next = seq + 1;
	s->have_seq = true;
	if (ig_kv_decode(s->flavor, data, len, &b, err, sizeof(err)) < 0) {
		malformed(s, now, err);
		return;
	}
	kv->sink.apply(kv->sink.arg, s->slot, &b);
	s->last_batch_ms = now;
	if (atomic_load(&s->state) != ST_LOST)
		set_state(s, ST_FLOWING); /* before the counts: a report that sees them sees it */
	count(s, C_BATCHES, 1);
	count(s, C_EVENTS, b.nev);
	if (replayed)
		count(s, C_REPLAYED, 1);
	ig_kv_batch_free(&b);
}

static void ask(struct src *s, uint64_t from, bool join, uint64_t now)
{
	unsigned char req[8];
	ig_kv_seq_write(req, from);
	/* a DEALER sends the empty delimiter a REQ socket would */
	if (zmq_send(s->dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 || zmq_send(s->dealer, req, 8, ZMQ_DONTWAIT) < 0)
		ig_log_warn("kv_events: backend %s rank %d: asking the replay: %s", s->url, s->rank,
			    zmq_strerror(zmq_errno()));
	s->asking = true;
	s->ask_join = join;
	s->ask_short = false;
	s->ask_deadline_ms = now + IG_KVEV_REPLAY_TIMEOUT_MS;
	s->have_seq = true;
	s->next = from;
}

static void on_live(struct ig_kvevents *kv, struct src *s, uint64_t seq, const void *data, size_t len, uint64_t now);

/* Holds a live batch while a replay runs; past the bounds the replay is
 * given up. Returns 0, or -1 when it was not held. */
static int hold(struct src *s, uint64_t seq, const void *data, size_t len)
{
	if (s->npend >= PEND_MAX || s->pend_bytes + len > PEND_MAX_BYTES ||
	    !(s->pend = ig_grow(s->pend, &s->cappend, s->npend + 1, sizeof(*s->pend), 16)))
		return -1;
	void *copy = malloc(len ? len : 1);
	if (!copy)
		return -1;
	memcpy(copy, data, len);
	s->pend[s->npend++] = (struct pending){seq, copy, len};
	s->pend_bytes += len;
	return 0;
}

/* The replay ended (or was given up: complete false): what it could not
 * give is lost; the batches held go on in order. */
static void replay_done(struct ig_kvevents *kv, struct src *s, bool complete, uint64_t now)
{
	struct pending *p = s->pend;
	size_t n = s->npend;
	s->pend = NULL;
	s->npend = s->cappend = s->pend_bytes = 0;
	s->asking = false;
	bool covered = n == 0 || p[0].seq <= s->next;
	if (!s->ask_short && (!complete || !covered)) /* (a short one was counted when it showed) */
		lose(kv, s, now);
	else if (!s->ask_short && !s->ask_join)
		count(s, C_GAPS_FILLED, 1);
	if (!covered)
		s->next = p[0].seq; /* what is lost is skipped */
	for (size_t i = 0; i < n; i++) {
		/* the replay may have run past the first held: applied already */
		if (p[i].seq >= s->next)
			on_live(kv, s, p[i].seq, p[i].data, p[i].len, now);
		free(p[i].data);
	}
	free(p);
}

static void on_replayed(struct ig_kvevents *kv, struct src *s, uint64_t seq, const void *data, size_t len,
			uint64_t now)
{
	if (!s->asking)
		return; /* an answer after its time: the socket is new since, so none */
	if (seq == END_SEQ) {
		replay_done(kv, s, true, now);
		return;
	}
	if (seq < s->next)
		return; /* applied already */
	if (seq > s->next && !s->ask_short) {
		/* its buffer starts past what we miss */
		s->ask_short = true;
		lose(kv, s, now);
	}
	apply(kv, s, seq, data, len, now, true);
}

static void on_live(struct ig_kvevents *kv, struct src *s, uint64_t seq, const void *data, size_t len, uint64_t now)
{
	if (s->asking) {
		if (hold(s, seq, data, len) == 0)
			return;
		ig_log_warn("kv_events: backend %s rank %d: too many batches while the replay runs: given up", s->url,
			    s->rank);
		close_socket(&s->dealer); /* its late answers are not read */
		s->dealer = open_socket(kv, ZMQ_DEALER, s->replay_ep, s->url);
		replay_done(kv, s, false, now);
		if (s->asking || seq < s->next)
			return; /* (the held ones asked again: rare enough to lose this one) */
	}
	if (s->have_seq && seq < s->next) {
		/* counting from the start again: a new engine, an empty cache */
		kv->sink.clear(kv->sink.arg, s->slot);
		count(s, C_RESTARTS, 1);
		ig_log_info("kv_events: backend %s rank %d: sequence back from %llu to %llu: the engine restarted",
			    s->url, s->rank, (unsigned long long)s->next, (unsigned long long)seq);
		s->have_seq = false;
	}
	if (!s->have_seq) {
		if (seq > 0 && s->dealer && hold(s, seq, data, len) == 0) {
			ask(s, 0, true, now); /* what it published before we joined */
			return;
		}
		s->have_seq = true;
		s->next = seq;
	}
	if (seq > s->next) {
		count(s, C_GAPS, 1);
		if (s->dealer && hold(s, seq, data, len) == 0) {
			ask(s, s->next, false, now);
			return;
		}
		lose(kv, s, now);
	}
	apply(kv, s, seq, data, len, now, false);
}

/* Reads one multipart message into fr[0..max); more parts are read and
 * dropped. Returns the number of parts, or 0 when none was waiting. */
static int recv_parts(void *z, zmq_msg_t *fr, int max)
{
	int n = 0, more = 1;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, z, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
			zmq_msg_close(&m);
			break;
		}
		more = zmq_msg_more(&m);
		if (n < max)
			fr[n] = m;
		else
			zmq_msg_close(&m);
		n++;
	}
	return n;
}

static void close_parts(zmq_msg_t *fr, int n, int max)
{
	for (int i = 0; i < n && i < max; i++)
		zmq_msg_close(&fr[i]);
}

/* Up to BURST messages of one socket. */
static void drain(struct ig_kvevents *kv, struct src *s, bool replay, uint64_t now)
{
	for (int k = 0; k < BURST; k++) {
		void *z = replay ? s->dealer : s->sub;
		zmq_msg_t fr[4];
		if (!z)
			return;
		int n = recv_parts(z, fr, 4);
		if (n == 0)
			return;
		/* live: [topic, seq, batch]; replayed: [empty, seq, batch] or
		 * [empty, topic, seq, batch] */
		int at = replay ? n - 2 : 1;
		if ((replay ? (n != 3 && n != 4) || zmq_msg_size(&fr[0]) != 0 : n != 3) ||
		    zmq_msg_size(&fr[at]) != 8) {
			char why[64];
			bool frames_ok = replay ? (n == 3 || n == 4) && zmq_msg_size(&fr[0]) == 0 : n == 3;
			if (frames_ok)
				snprintf(why, sizeof(why), "a sequence of %zu bytes, not 8", zmq_msg_size(&fr[at]));
			else
				snprintf(why, sizeof(why), "%d frames, not %s", n, replay ? "[empty, seq, batch]" : "3");
			malformed(s, now, why);
		} else {
			uint64_t seq = ig_kv_seq_read(zmq_msg_data(&fr[at]));
			if (replay)
				on_replayed(kv, s, seq, zmq_msg_data(&fr[at + 1]), zmq_msg_size(&fr[at + 1]), now);
			else
				on_live(kv, s, seq, zmq_msg_data(&fr[at + 1]), zmq_msg_size(&fr[at + 1]), now);
		}
		close_parts(fr, n, 4);
	}
}

/* The backend's kv_exact: all its ranks flowing. */
static void publish_exact(struct src *const *v, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t j = i;
		bool all = true;
		for (; j < n && v[j]->backend_id == v[i]->backend_id; j++)
			all &= atomic_load(&v[j]->state) == ST_FLOWING;
		if (!v[i]->dropped)
			atomic_store(&v[i]->b->kv_exact, all ? 1 : 0);
		i = j;
	}
}

/* Deadlines and staleness. */
static void tick(struct ig_kvevents *kv, uint64_t now)
{
	uint64_t stale = (uint64_t)atomic_load(&kv->stale_after_ms);
	for (size_t i = 0; i < kv->nsnap; i++) {
		struct src *s = kv->snap[i];
		if (s->asking && now >= s->ask_deadline_ms) {
			ig_log_warn("kv_events: backend %s rank %d: no end of the replay within %d ms: the gap is lost",
				    s->url, s->rank, IG_KVEV_REPLAY_TIMEOUT_MS);
			close_socket(&s->dealer);
			s->dealer = open_socket(kv, ZMQ_DEALER, s->replay_ep, s->url);
			replay_done(kv, s, false, now);
		}
		int st = atomic_load(&s->state);
		if (st == ST_LOST && now >= s->approx_until_ms)
			set_state(s, s->last_batch_ms + stale >= now ? ST_FLOWING : ST_WAITING);
		uint64_t sent = atomic_load(&s->b->last_sent_ms);
		if ((st == ST_FLOWING || st == ST_WAITING) && sent > s->last_batch_ms && now - sent > stale)
			set_state(s, ST_STALE);
	}
	publish_exact(kv->snap, kv->nsnap);
}

/* Under mu: sources let go are closed, cleared and freed; new ones
 * connected; the snapshot taken. Returns 0, or -1 out of memory. */
static int refresh(struct ig_kvevents *kv)
{
	size_t k = 0;
	for (size_t i = 0; i < kv->n; i++) {
		struct src *s = kv->v[i];
		if (s->dropped) {
			close_socket(&s->sub);
			close_socket(&s->dealer);
			kv->sink.clear(kv->sink.arg, s->slot);
			kv->used[s->slot] = 0;
			kv->full_logged = false;
			src_free(s);
			continue;
		}
		if (!s->sub && ig_now_ms() >= s->open_after_ms) {
			/* the checked form, but a name that does not resolve: every 5 s */
			if ((s->sub = open_socket(kv, ZMQ_SUB, s->ep, s->url)) && s->replay_ep)
				s->dealer = open_socket(kv, ZMQ_DEALER, s->replay_ep, s->url);
			if (!s->sub)
				s->open_after_ms = ig_now_ms() + 5000;
		}
		kv->v[k++] = s;
	}
	kv->n = k;
	if (!room(&kv->snap, &kv->capsnap, kv->n, sizeof(*kv->snap)))
		return -1;
	if (kv->n)
		memcpy(kv->snap, kv->v, kv->n * sizeof(*kv->v));
	kv->nsnap = kv->n;
	return 0;
}

static void *run(void *arg)
{
	struct ig_kvevents *kv = arg;
	zmq_pollitem_t *items = NULL;
	struct src **who = NULL;
	size_t capi = 0, capw = 0;
	while (!atomic_load(&kv->stop)) {
		pthread_mutex_lock(&kv->mu);
		int rc = refresh(kv);
		pthread_mutex_unlock(&kv->mu);
		size_t n = 1;
		if (rc < 0 || !room(&items, &capi, 1 + 2 * kv->nsnap, sizeof(*items)) ||
		    !room(&who, &capw, 1 + 2 * kv->nsnap, sizeof(*who))) {
			ig_log_error("kv_events: out of memory: the events thread stops");
			break;
		}
		items[0] = (zmq_pollitem_t){.fd = kv->wakefd, .events = ZMQ_POLLIN};
		for (size_t i = 0; i < kv->nsnap; i++) {
			struct src *s = kv->snap[i];
			if (s->sub) {
				who[n] = s;
				items[n++] = (zmq_pollitem_t){.socket = s->sub, .events = ZMQ_POLLIN};
			}
			if (s->dealer) {
				who[n] = s;
				items[n++] = (zmq_pollitem_t){.socket = s->dealer, .events = ZMQ_POLLIN};
			}
		}
		if (zmq_poll(items, (int)n, POLL_MS) < 0 && zmq_errno() != EINTR) {
			ig_log_error("kv_events: zmq_poll: %s: the events thread stops", zmq_strerror(zmq_errno()));
			break;
		}
		uint64_t now = ig_now_ms();
		if (items[0].revents & ZMQ_POLLIN) {
			uint64_t v;
			if (read(kv->wakefd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				ig_log_warn("kv_events: reading the wake-up: %s", strerror(errno));
		}
		for (size_t i = 1; i < n; i++)
			if (items[i].revents & ZMQ_POLLIN)
				drain(kv, who[i], items[i].socket == who[i]->dealer, now);
		tick(kv, now);
	}
	/* stopped (or failed): no backend is exact any more */
	for (size_t i = 0; i < kv->nsnap; i++)
		atomic_store(&kv->snap[i]->b->kv_exact, 0);
	free(items);
	free(who);
	return NULL;
}

static void sink_none_apply(void *arg IG_UNUSED, size_t src IG_UNUSED, const struct ig_kv_batch *b IG_UNUSED) {}
static void sink_none_clear(void *arg IG_UNUSED, size_t src IG_UNUSED) {}
static uint64_t sink_none_blocks(void *arg IG_UNUSED, size_t src IG_UNUSED)
{
	return 0;
}

struct ig_kvevents *ig_kvevents_start(size_t nsrc, const struct ig_kvevents_sink *sink, char **err)
{
	struct ig_kvevents *kv = calloc(1, sizeof(*kv));
	if (!kv || !(kv->used = calloc(nsrc ? nsrc : 1, 1))) {
		free(kv);
		*err = strdup("kv_events: out of memory");
		return NULL;
	}
	kv->nsrc = nsrc;
	kv->sink = *sink;
	if (!kv->sink.apply)
		kv->sink.apply = sink_none_apply;
	if (!kv->sink.clear)
		kv->sink.clear = sink_none_clear;
	if (!kv->sink.blocks)
		kv->sink.blocks = sink_none_blocks;
	kv->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&kv->mu, NULL);
	atomic_init(&kv->stale_after_ms, 5000);
	if (kv->wakefd < 0 || !(kv->zctx = zmq_ctx_new())) {
		*err = ig_strdupf("kv_events: %s", kv->wakefd < 0 ? strerror(errno) : zmq_strerror(zmq_errno()));
		goto fail;
	}
	/* its I/O thread is the only other thread ZMQ starts */
	zmq_ctx_set(kv->zctx, ZMQ_IO_THREADS, 1);
	int rc = ig_thread_start(&kv->thr, run, kv);
	if (rc != 0) {
		*err = ig_strdupf("kv_events: the events thread: %s", strerror(rc));
		goto fail;
	}
	kv->started = true;
	return kv;
fail:
	ig_kvevents_stop(kv);
	return NULL;
}

void ig_kvevents_stop(struct ig_kvevents *kv)
{
	if (!kv)
		return;
	if (kv->started) {
		atomic_store(&kv->stop, true);
		wake(kv);
		pthread_join(kv->thr, NULL);
	}
	for (size_t i = 0; i < kv->n; i++) {
		close_socket(&kv->v[i]->sub);
		close_socket(&kv->v[i]->dealer);
		src_free(kv->v[i]);
	}
	if (kv->zctx)
		zmq_ctx_term(kv->zctx);
	if (kv->wakefd >= 0)
		close(kv->wakefd);
	pthread_mutex_destroy(&kv->mu);
	free(kv->v);
	free(kv->snap);
	free(kv->used);
	free(kv);
}

/* ---- reports ---- */

void ig_kvevents_report(struct ig_kvevents *kv, const struct ig_backend *b, json_t *entry)
{
	if (!kv)
		return;
	pthread_mutex_lock(&kv->mu);
	json_t *o = NULL, *states = json_array();
	uint64_t sum[NCOUNTERS] = {0}, blocks = 0;
	int worst = ST_FLOWING;
	/* the state a reader acts on first: lost, stale, waiting, flowing */
	static const int rank_of[] = {[ST_FLOWING] = 0, [ST_WAITING] = 1, [ST_STALE] = 2, [ST_LOST] = 3};
	for (size_t i = 0; i < kv->n; i++) {
		struct src *s = kv->v[i];
		if (s->backend_id != b->id || s->dropped)
			continue;
		if (!o)
			o = json_pack("{s:s, s:o, s:s, s:i}", "endpoint", s->ep0, "replay",
				      s->replay_ep0 ? json_string(s->replay_ep0) : json_null(), "format",
				      s->flavor == IG_KV_SGLANG ? "sglang" : "vllm", "ranks", s->nranks);
		for (int c = 0; c < NCOUNTERS; c++)
			sum[c] += counter(s, (enum counter)c);
		blocks += kv->sink.blocks(kv->sink.arg, s->slot);
		int st = atomic_load(&s->state);
		if (rank_of[st] > rank_of[worst])
			worst = st;
		json_array_append_new(states, json_string(state_names[st]));
	}
	pthread_mutex_unlock(&kv->mu);
	if (!o) {
		json_decref(states);
		return;
	}
	json_object_set_new(o, "state", json_string(state_names[worst]));
	if (json_array_size(states) > 1) /* each rank's, when there are several */
		json_object_set_new(o, "rank_states", json_incref(states));
	json_decref(states);
	json_object_set_new(o, "blocks", json_integer((json_int_t)blocks));
	for (int c = 0; c < NCOUNTERS; c++)
		json_object_set_new(o, counter_names[c], json_integer((json_int_t)sum[c]));
	json_object_set_new(entry, "kv_events", o);
}

void ig_kvevents_prom(void *arg, struct ig_buf *out)
{
	struct ig_kvevents *kv = arg;
	static const struct {
		const char *name, *help, *type;
		int first, last; /* counters */
	} fam[] = {
		{"infergate_kv_events_total", "KV event batches, events and replayed batches taken from the engines.",
		 "counter", C_BATCHES, C_REPLAYED},
		{"infergate_kv_event_errors_total", "KV event sequence gaps (filled or lost), engine restarts, malformed "
		 "messages, and falls back to the approximate index.", "counter", C_GAPS, C_FALLBACKS},
	};
	pthread_mutex_lock(&kv->mu);
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		ig_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fam[f].name, fam[f].help, fam[f].name, fam[f].type);
		for (size_t i = 0; i < kv->n; i++) {
			struct src *s = kv->v[i];
			if (s->dropped)
				continue;
			for (int c = fam[f].first; c <= fam[f].last; c++) {
				ig_buf_printf(out, "%s{backend=\"", fam[f].name);
				ig_buf_prom_label(out, s->url);
				ig_buf_printf(out, "\",rank=\"%d\",kind=\"%s\"} %llu\n", s->rank, counter_names[c],
					      (unsigned long long)counter(s, (enum counter)c));
			}
		}
	}
	ig_buf_printf(out, "# HELP infergate_kv_events_exact Whether a backend's KV events flow (1), so the "
		      "exact index is used for it, or not (0).\n# TYPE infergate_kv_events_exact gauge\n");
	for (size_t i = 0; i < kv->n; i++) {
		struct src *s = kv->v[i];
		if (s->dropped || s->rank != 0)
			continue;
		ig_buf_printf(out, "infergate_kv_events_exact{backend=\"");
		ig_buf_prom_label(out, s->url);
		ig_buf_printf(out, "\"} %d\n", atomic_load(&s->b->kv_exact));
	}
	pthread_mutex_unlock(&kv->mu);
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag kvevents_rows[] = {
	{.name = "--kv-events-port", .key = "kv_events.port", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(kv_port),
	 .min = 0, .max = 65535, .def = "0", .metavar = "PORT",
	 .help = "subscribe to every backend's KV cache events (vLLM's --kv-events-config publisher, SGLang's "
		 "--kv-events-config) at tcp://ITS_HOST:PORT (rank r of dp_ranks at PORT + r), unless its entry "
		 "in backends names kv_events; they feed the exact prefix index; 0: none"},
	{.name = "--kv-events-replay-port", .key = "kv_events.replay_port", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(kv_replay_port), .min = 0, .max = 65535, .def = "0", .metavar = "PORT",
	 .help = "the engines' replay port (vLLM's replay_endpoint): a gap in the events' sequence is asked "
		 "from it; 0: none (a gap clears the backend's blocks)"},
	{.name = "--kv-events-format", .key = "kv_events.format", .type = IG_FLAG_CHOICE,
	 .off = IG_CONF_OFF(kv_format), .def = "vllm", .metavar = "vllm|sglang",
	 .help = "how the engines encode their KV event batches (backends[].kv_events_format for one)"},
	{.name = "--kv-events-stale-ms", .key = "kv_events.stale_after_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(kv_stale_after_ms), .min = 100, .max = 3600000, .def = "5000", .metavar = "MS",
	 .help = "a backend given requests this long ago with no KV event since is stale: routed by what it "
		 "was sent, as after a gap that could not be filled, until its events come again"},
	{.name = "--kv-events-max-blocks", .key = "kv_events.max_blocks", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(kv_max_blocks), .min = 1024, .max = 1000000000, .def = "4000000", .metavar = "N",
	 .help = "the exact prefix index holds at most N (backend, block) pairs; a block stored past that "
		 "is not indexed"},
};
const struct ig_conf_part ig_kvevents_conf = IG_CONF_PART(kvevents_rows);
