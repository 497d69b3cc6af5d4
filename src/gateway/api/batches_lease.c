/* The Batch and Files APIs across gateways (batch.h), when the cluster
 * section is set and every gateway mounts the same data_dir (a
 * ReadWriteMany volume, or one directory). data_dir stays the one truth
 * of what a batch is (batch.json) and has done (its two journals); Redis
 * decides who runs it and tells the others when something changed:
 *
 *   infergate:blease:ID   "NAME TOKEN FENCE": the gateway that runs batch
 *                         ID, for cluster.lease_s (renewed every lease_s/3)
 *   infergate:bfence      a counter: each lease taken gets the next number,
 *                         its fencing token, never used twice
 *   infergate:bcancel:ID  set when a gateway that does not run ID is asked
 *                         to cancel it: the holder (or the next) cancels it
 *   channel infergate:data  "b NAME ID": ID's batch.json changed (read it
 *                         again); "p NAME ID COMPLETED FAILED IN_FLIGHT":
 *                         progress, each second; "c NAME ID": cancel it;
 *                         "f NAME ID" / "d NAME ID": file ID stored/deleted
 *
 * Exactly one writer: a gateway that takes a lease writes its token into
 * the batch's `fence` file under an exclusive flock(2) before it reads the
 * journals; every journal append (on the reactor) and every batch.json
 * write and hand-over (on the I/O thread) is made under a shared flock
 * after checking that the fence still holds the writer's own token. So a
 * gateway that was paused past its lease (SIGSTOP, a long GC-like stall, a
 * partition) finds another's token at its next append and stops: its line
 * either went in before the take-over's scan (which then counts it as
 * done) or not at all (and the new holder sends it). Nothing depends on
 * the gateways' clocks: Redis's lease expiry decides when a batch may be
 * taken, the fence decides who may write.
 *
 * A batch another gateway runs is a copy here: what the API shows comes
 * from its batch.json (read again on each "b" message) and the last
 * progress message; a cancel through this gateway is handed to the holder
 * through Redis. While Redis is down, each gateway goes on with the batches
 * it holds (its fence still protects them) and nobody takes new ones; on
 * joining again a gateway reads data_dir again for what it missed.
 * Reactor 0 (its tick and its Redis replies), under the lock; the fence
 * and batch.json reads on the I/O thread. */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "api/batch.h"
#include "api/files.h"
#include "cluster/cluster.h"
#include "gateway.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/bio.h"
#include "net/redismsg.h"

#define PREFIX "infergate:"
#define CANCEL_TTL_MS (7ull * 86400 * 1000)

/* One round for every unfinished batch: ARGV this gateway's "NAME TOKEN",
 * the lease (ms), then per batch ID and 'r' (renew: ours) or 't' (take it
 * if nobody holds it). Returns per batch the fencing token it holds for
 * us (0: not ours) and whether a cancel was asked. */
static const char lease_script[] =
	"local h = ARGV[1]\n"
	"local px = tonumber(ARGV[2])\n"
	"local out = {}\n"
	"for i = 3, #ARGV, 2 do\n"
	"  local k = 'infergate:blease:' .. ARGV[i]\n"
	"  local cur = redis.call('GET', k)\n"
	"  local tok = 0\n"
	"  if cur and string.sub(cur, 1, #h + 1) == h .. ' ' then\n"
	"    redis.call('PEXPIRE', k, px)\n"
	"    tok = tonumber(string.sub(cur, #h + 2)) or 0\n"
	"  elseif not cur and ARGV[i+1] == 't' then\n"
	"    tok = redis.call('INCR', 'infergate:bfence')\n"
	"    redis.call('SET', k, h .. ' ' .. tok, 'PX', px)\n"
	"  end\n"
	"  out[#out+1] = tok\n"
	"  out[#out+1] = redis.call('EXISTS', 'infergate:bcancel:' .. ARGV[i])\n"
	"end\n"
	"return out\n";

/* What running left in a lost batch, once no job of it runs; then its
 * state is read again from data_dir, as any other gateway's. */
static void reload(struct ig_batches *bs, struct ig_batch *b);

static void release(struct ig_batches *bs, struct ig_batch *b)
{
	ig_batch_abort(bs, b);
	if (b->jobs)
		return;
	ig_batch_run_clear(b);
	ig_batch_check_free(b->v);
	b->v = NULL;
	b->vslices = 0;
	if (b->fence_fd >= 0)
		close(b->fence_fd);
	b->fence_fd = -1;
	*b->paused = 0;
	b->inflight = 0;
	b->releasing = false;
	reload(bs, b);
}

/* ------------------------------------------------- taking a batch over */

struct take_job {
	struct ig_bio_job job;
	struct ig_batches *bs;
	char id[40];
	char *dir;
	uint64_t fence;
	int fd;
	uint64_t before;            /* the token the fence held */
	struct ig_batch *disk;      /* batch.json as the last holder left it */
	int err;
	bool stale;                 /* fence no more than before: not taken */
};

/* After a token that was not above the fence's: Redis's counter is raised
 * to the fence's (ARGV[1]) and the lease taken with it let go (batch
 * ARGV[2], holder ARGV[3], token ARGV[4]), so that the next round takes the
 * batch with a token above every one used before. */
static const char raise_script[] =
	"local c = tonumber(redis.call('GET', 'infergate:bfence') or '0') or 0\n"
	"if c < tonumber(ARGV[1]) then redis.call('SET', 'infergate:bfence', ARGV[1]) end\n"
	"local k = 'infergate:blease:' .. ARGV[2]\n"
	"if redis.call('GET', k) == ARGV[3] .. ' ' .. ARGV[4] then redis.call('DEL', k) end\n"
	"return 1\n";

static void take_run(struct ig_bio_job *job)
{
	struct take_job *tj = IG_CONTAINER_OF(job, struct take_job, job);
	char *p = ig_strdupf("%s/fence", tj->dir);
	char text[32];
	int n = snprintf(text, sizeof(text), "%" PRIu64 "\n", tj->fence);
	tj->fd = p ? open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
	free(p);
	/* exclusive: a holder's append in progress ends first, and its next
	 * one sees our token */
	bool ok = tj->fd >= 0 && flock(tj->fd, LOCK_EX) == 0 && ig_batch_fence_read(tj->fd, &tj->before) == 0;
	/* Tokens only grow, so one not above the fence's may be a writer's
	 * still (a holder paused past its lease has it): Redis's counter went
	 * back (restarted without persistence, or written by someone). Not
	 * taken: two writers with one token is what the fence is for. */
	tj->stale = ok && tj->fence <= tj->before;
	if (!ok || tj->stale || pwrite(tj->fd, text, (size_t)n, 0) != n || ftruncate(tj->fd, n) < 0 ||
	    fsync(tj->fd) < 0) {
		tj->err = tj->stale ? 0 : errno ? errno : EIO;
		if (tj->fd >= 0)
			close(tj->fd);
		tj->fd = -1;
		return;
	}
	flock(tj->fd, LOCK_UN);
	tj->disk = ig_batch_load(tj->bs, tj->id);
}

static void take_done(struct ig_bio_job *job)
{
	struct take_job *tj = IG_CONTAINER_OF(job, struct take_job, job);
	struct ig_batch *b = ig_batch_find(tj->bs, tj->id);
	if (b)
		b->jobs--;
	if (tj->stale) {
		char why[240], before[24], tok[24];
		snprintf(why, sizeof(why), "batch %s: fencing token %" PRIu64 " is not above its fence's %" PRIu64
			 " (Redis's counter went back); not taken, the counter raised for the next round", tj->id,
			 tj->fence, tj->before);
		ig_cluster_count_bad(tj->bs->gw->cluster, IG_BAD_BATCH_LEASE, why);
		snprintf(before, sizeof(before), "%" PRIu64, tj->before);
		snprintf(tok, sizeof(tok), "%" PRIu64, tj->fence);
		const char *argv[] = {"EVAL", raise_script, "0", before, tj->id, ig_cluster_holder(tj->bs->gw), tok};
		size_t lens[7];
		for (int i = 0; i < 7; i++)
			lens[i] = strlen(argv[i]);
		ig_cluster_command(tj->bs->gw, NULL, NULL, 7, argv, lens);
		tj->bs->lease_now = true;
	}
	if (!b || !b->taking || b->fence != tj->fence || tj->err || tj->stale) {
		if (tj->err)
			ig_log_error("batch %s: cannot write its fence: %s; not run here", tj->id, strerror(tj->err));
		if (b && b->taking)
			b->taking = false, b->fence = 0;
		if (tj->fd >= 0)
			close(tj->fd);
	} else {
		b->taking = false;
		b->ours = true;
		b->fence_fd = tj->fd;
		if (tj->disk)
			ig_batch_take_state(b, tj->disk);
		b->inflight = 0;
		tj->bs->takeovers++;
		ig_cluster_publish(tj->bs->gw, NULL, NULL, 0, 'b', "%s", b->id); /* a new one: the others learn it */
		ig_log_info("batch %s: run here from now (fencing token %" PRIu64 ", %s before): %s, %ld of %ld done",
			    b->id, tj->fence, tj->before ? "another's" : "none", ig_batch_status_names[b->status],
			    b->completed + b->failed, b->total);
	}
	ig_batch_drop(tj->disk);
	free(tj->dir);
	free(tj);
}

static void take(struct ig_batches *bs, struct ig_batch *b, uint64_t fence)
{
	struct take_job *tj = calloc(1, sizeof(*tj));
	if (!tj || !(tj->dir = strdup(b->dir))) {
		free(tj);
		return; /* out of memory: the lease lapses, someone takes it */
	}
	tj->bs = bs;
	snprintf(tj->id, sizeof(tj->id), "%s", b->id);
	tj->fence = fence;
	tj->fd = -1;
	b->taking = true;
	b->fence = fence;
	b->jobs++;
	tj->job.queue = IG_BIO_BATCHES;
	tj->job.run = take_run;
	tj->job.done = take_done;
	ig_bio_submit(bs->gw->bio, &tj->job);
}

/* --------------------------------------------------- others' batches */

/* Reading batch.json again (one batch, or every one: id ""). */
struct reload_job {
	struct ig_bio_job job;
	struct ig_batches *bs;
	char id[40];
	struct ig_batch **got;
	size_t n;
	void (*cb)(void *arg);      /* a lookup's: called at the end */
	void *arg;
};

static void reload_run(struct ig_bio_job *job)
{
	struct reload_job *rj = IG_CONTAINER_OF(job, struct reload_job, job);
	if (*rj->id) {
		if ((rj->got = malloc(sizeof(*rj->got))) && (rj->got[0] = ig_batch_load(rj->bs, rj->id)))
			rj->n = 1;
		return;
	}
	ig_batch_load_dir(rj->bs, &rj->got, &rj->n, false); /* one it cannot read: read at the next join */
}

static void reload_done(struct ig_bio_job *job)
{
	struct reload_job *rj = IG_CONTAINER_OF(job, struct reload_job, job);
	struct ig_batches *bs = rj->bs;
	if (*rj->id) {
		struct ig_batch *b = ig_batch_find(bs, rj->id);
		if (b)
			b->reloading = false;
	}
	for (size_t i = 0; i < rj->n; i++) {
		struct ig_batch *got = rj->got[i], *b = ig_batch_find(bs, got->id);
		if (!b) {
			got->ours = false;
			ig_batch_insert(bs, got); /* made through another gateway */
			continue;
		}
		if (!b->ours && !b->taking && !b->releasing) {
			ig_batch_take_state(b, got); /* its in-flight count comes with the progress messages */
			if (ig_batch_finished(b->status))
				b->inflight = 0;
		}
		ig_batch_drop(got);
	}
	if (rj->cb)
		rj->cb(rj->arg);
	free(rj->got);
	free(rj);
}

static int submit_reload_cb(struct ig_batches *bs, const char *id, void (*cb)(void *), void *arg)
{
	struct reload_job *rj = calloc(1, sizeof(*rj));
	if (!rj)
		return -1;
	rj->cb = cb;
	rj->arg = arg;
	rj->bs = bs;
	snprintf(rj->id, sizeof(rj->id), "%s", id);
	rj->job.queue = IG_BIO_BATCHES;
	rj->job.run = reload_run;
	rj->job.done = reload_done;
	ig_bio_submit(bs->gw->bio, &rj->job);
	return 0;
}

static void submit_reload(struct ig_batches *bs, const char *id)
{
	submit_reload_cb(bs, id, NULL, NULL);
}

int ig_batch_lookup(struct ig_batches *bs, const char *id, void (*done)(void *arg), void *arg)
{
	if (!bs->clustered || !ig_batch_id_valid(id))
		return -1;
	return submit_reload_cb(bs, id, done, arg);
}

static void reload(struct ig_batches *bs, struct ig_batch *b)
{
	if (b->reloading)
		return;
	b->reloading = true;
	submit_reload(bs, b->id);
}

/* Cancelled here, run here: as the API does alone. */
static void cancel_here(struct ig_batch *b)
{
	if (b->status == IG_BATCH_VALIDATING || b->status == IG_BATCH_IN_PROGRESS) {
		ig_log_info("batch %s: cancelled through another gateway", b->id);
		ig_batch_set_status(b, IG_BATCH_CANCELLING);
	}
}

void ig_batch_cancel_remote(struct ig_batch *b)
{
	char key[80];
	snprintf(key, sizeof(key), PREFIX "bcancel:%s", b->id);
	b->status = IG_BATCH_CANCELLING; /* here, until its holder's batch.json says more */
	b->cancelling_at = ig_wall_s();
	ig_cluster_publish(b->bs->gw, key, "1", CANCEL_TTL_MS, 'c', "%s", b->id);
	b->bs->lease_now = true; /* nobody runs it? then this gateway takes it and cancels it */
}

int ig_batch_lease_parse(char kind, const char *rest, size_t n, struct ig_batch_msg *m,
			 struct ig_redismsg_bad *bad)
{
	struct ig_redismsg_field f[4];
	const char *k = ig_redismsg_data_kind(kind);
	char shown[48];
	long long v[3] = {0, 0, 0};
	int nf = ig_redismsg_fields(rest, n, f, 4);
	memset(m, 0, sizeof(*m));
	m->kind = kind;
	if (!strchr("bpcfd", kind) || kind == '\0')
		return 0; /* a kind a newer gateway sends: not read here */
	ig_redismsg_shown(shown, sizeof(shown), rest, n);
	if (nf != (kind == 'p' ? 4 : 1) || f[0].n >= sizeof(m->id))
		return ig_redismsg_fail(bad, k, "'%s' is not '%s'", shown, kind == 'p' ? "ID COMPLETED FAILED IN_FLIGHT" : "ID");
	memcpy(m->id, f[0].p, f[0].n);
	m->id[f[0].n] = '\0';
	/* the ids the APIs take from clients, and nothing else: an id is a
	 * directory's or a file's name in data_dir */
	if (kind == 'f' || kind == 'd' ? !ig_files_id_valid(m->id) : !ig_batch_id_valid(m->id))
		return ig_redismsg_fail(bad, k, "'%s': not a %s id", shown, kind == 'f' || kind == 'd' ? "file" : "batch");
	for (int i = 0; kind == 'p' && i < 3; i++)
		if (ig_redismsg_int(f[1 + i].p, f[1 + i].n, 0, IG_BATCH_LINES_MAX, &v[i]) < 0)
			return ig_redismsg_fail(bad, k, "'%s': count %d is not from 0 to %lld", shown, i + 1,
						IG_BATCH_LINES_MAX);
	m->completed = (long)v[0];
	m->failed = (long)v[1];
	m->inflight = (long)v[2];
	return 0;
}

static void on_message(struct ig_gw *gw, char kind, const char *rest)
{
	struct ig_batches *bs = gw->batches;
	struct ig_redismsg_bad bad;
	struct ig_batch_msg m;
	if (!bs)
		return;
	if (ig_batch_lease_parse(kind, rest, strlen(rest), &m, &bad) < 0) {
		ig_cluster_count_bad(gw->cluster, bad.kind, bad.why);
		return;
	}
	const char *id = m.id;
	if (kind == 'f' || kind == 'd') {
		if (kind == 'f')
			ig_files_learn(gw->files, gw->bio, id);
		else
			ig_files_forget(gw->files, id);
		return;
	}
	struct ig_batch *b = *id ? ig_batch_find(bs, id) : NULL;
	switch (kind) {
	case 'b':
		if (!b)
			submit_reload(bs, id);
		else if (!b->ours && !b->taking)
			reload(bs, b);
		break;
	case 'p':
		if (!b || b->ours || b->taking || ig_batch_finished(b->status))
			break;
		/* no more than the batch holds, once its total is known here */
		if (b->total > 0 && (m.completed + m.failed > b->total || m.inflight > b->total)) {
			char why[200];
			snprintf(why, sizeof(why), "batch %s: %ld completed, %ld failed and %ld in flight of %ld lines",
				 id, m.completed, m.failed, m.inflight, b->total);
			ig_cluster_count_bad(gw->cluster, IG_BAD_DATA_PROGRESS, why);
			break;
		}
		b->completed = m.completed;
		b->failed = m.failed;
		b->inflight = m.inflight;
		break;
	case 'c':
		if (b && b->ours)
			cancel_here(b);
		break;
	default:
		break;
	}
}

static void on_joined(struct ig_gw *gw)
{
	if (gw->batches) {
		submit_reload(gw->batches, "");
		gw->batches->lease_now = true;
	}
	if (gw->files)
		ig_files_learn(gw->files, gw->bio, NULL);
}

static void on_left(struct ig_gw *gw)
{
	if (gw->batches)
		gw->batches->lease_now = true;
}

/* ------------------------------------------------------------ the round */

struct round {
	struct ig_batches *bs;
	size_t n;
	char (*ids)[40];
	char *modes;
};

int ig_batch_lease_reply(const struct redisReply *r, size_t n, uint64_t *tok, bool *cancel,
			 struct ig_redismsg_bad *bad)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 * n)
		return ig_redismsg_fail(bad, IG_BAD_BATCH_LEASE, "the reply is not an array of %zu integers", 2 * n);
	for (size_t i = 0; i < n; i++) {
		const redisReply *t = r->element[2 * i], *cx = r->element[2 * i + 1];
		/* a token is INCR's, and Lua's numbers are exact below 2^53 */
		if (t->type != REDIS_REPLY_INTEGER || t->integer < 0 || t->integer >= (1LL << 53))
			return ig_redismsg_fail(bad, IG_BAD_BATCH_LEASE, "batch %zu's fencing token is not an integer "
						"from 0 to 2^53", i);
		if (cx->type != REDIS_REPLY_INTEGER || (cx->integer != 0 && cx->integer != 1))
			return ig_redismsg_fail(bad, IG_BAD_BATCH_LEASE, "batch %zu's cancel is not 0 or 1", i);
		tok[i] = (uint64_t)t->integer;
		cancel[i] = cx->integer == 1;
	}
	return 0;
}

static void on_round(const redisReply *reply, void *privdata)
{
	struct round *rd = privdata;
	struct ig_batches *bs = rd->bs;
	const redisReply *r = reply;
	struct ig_redismsg_bad bad;
	uint64_t *toks = rd->n ? calloc(rd->n, sizeof(*toks)) : NULL;
	bool *cancels = rd->n ? calloc(rd->n, sizeof(*cancels)) : NULL;
	bs->leasing = false;
	if (r && r->type == REDIS_REPLY_ERROR) {
		char shown[200];
		ig_redismsg_shown(shown, sizeof(shown), r->str ? r->str : "", r->str ? r->len : 0);
		ig_log_error("cluster: the batches' lease round: %s", shown);
	} else if (r && toks && cancels && ig_batch_lease_reply(r, rd->n, toks, cancels, &bad) < 0) {
		ig_cluster_count_bad(bs->gw->cluster, bad.kind, bad.why); /* nothing taken, nothing lost: the next round */
	} else if (r && toks && cancels) {
		for (size_t i = 0; i < rd->n; i++) {
			struct ig_batch *b = ig_batch_find(bs, rd->ids[i]);
			uint64_t tok = toks[i];
			if (!b)
				continue;
			if (rd->modes[i] == 'r') {
				if ((b->ours || b->taking) && tok != b->fence) {
					char why[120];
					snprintf(why, sizeof(why), "its lease is %s", tok ? "another's" : "gone");
					ig_batch_lose(b, why);
				}
			} else if (tok && !b->ours && !b->taking && !b->releasing) {
				take(bs, b, tok);
			}
			if (cancels[i] && b->ours)
				cancel_here(b);
		}
	}
	free(toks);
	free(cancels);
	free(rd->ids);
	free(rd->modes);
	free(rd);
}

static void send_round(struct ig_batches *bs)
{
	struct ig_gw *gw = bs->gw;
	size_t cap = 0, n = 0;
	struct ig_batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		cap += !ig_batch_finished(b->status);
	if (cap == 0)
		return;
	struct round *rd = calloc(1, sizeof(*rd));
	const char **argv = calloc(5 + 2 * cap, sizeof(*argv));
	size_t *lens = calloc(5 + 2 * cap, sizeof(*lens));
	if (rd) {
		rd->ids = calloc(cap, sizeof(*rd->ids));
		rd->modes = calloc(cap, 1);
	}
	char px[32];
	snprintf(px, sizeof(px), "%ld", gw->cfg->cluster_lease_s * 1000);
	if (!rd || !argv || !lens || !rd->ids || !rd->modes)
		goto out;
	argv[0] = "EVAL";
	argv[1] = lease_script;
	argv[2] = "0";
	argv[3] = ig_cluster_holder(gw);
	argv[4] = px;
	size_t argc = 5;
	static const char modes[2][2] = {"r", "t"};
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link) {
		if (ig_batch_finished(b->status) || b->releasing || n == cap)
			continue;
		bool mine = b->ours || b->taking;
		if (!mine && b->jobs)
			continue;
		snprintf(rd->ids[n], sizeof(rd->ids[n]), "%s", b->id);
		rd->modes[n] = mine ? 'r' : 't';
		argv[argc++] = rd->ids[n];
		argv[argc++] = modes[mine ? 0 : 1];
		n++;
	}
	rd->n = n;
	rd->bs = bs;
	for (size_t i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	if (n && ig_cluster_command(gw, on_round, rd, (int)argc, argv, lens) == 0) {
		bs->leasing = true;
		rd = NULL; /* on_round's */
	}
out:
	if (rd) {
		free(rd->ids);
		free(rd->modes);
		free(rd);
	}
	free(argv);
	free(lens);
}

static void files_notify(void *arg, char kind, const char *id)
{
	ig_cluster_publish(arg, NULL, NULL, 0, kind, "%s", id);
}

void ig_batch_lease_open(struct ig_batches *bs)
{
	if (bs->gw->files) /* from the start: a lookup of an id not known yet needs it before the first tick */
		ig_files_set_notify(bs->gw->files, files_notify, bs->gw);
}

void ig_batch_lease_tick(struct ig_batches *bs, uint64_t now)
{
	struct ig_gw *gw = bs->gw;
	struct ig_batch *b;
	static const struct ig_cluster_hooks hooks = {on_message, on_joined, on_left};
	ig_cluster_hooks(gw, &hooks); /* what the others announce comes here (the cluster starts after the store) */
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		if (b->releasing)
			release(bs, b);
	if (!ig_cluster_joined(gw))
		return; /* the batches held go on under their fences; none is taken */
	if (!bs->leasing && (bs->lease_now || now >= bs->next_lease_ms)) {
		bs->lease_now = false;
		bs->next_lease_ms = now + (uint64_t)gw->cfg->cluster_lease_s * 1000 / 3;
		send_round(bs);
	}
	if (now >= bs->next_progress_ms) {
		bs->next_progress_ms = now + 1000;
		IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link) {
			if (!b->ours || b->status != IG_BATCH_IN_PROGRESS ||
			    (b->completed == b->pub_completed && b->failed == b->pub_failed && b->inflight == b->pub_inflight))
				continue;
			b->pub_completed = b->completed;
			b->pub_failed = b->failed;
			b->pub_inflight = b->inflight;
			ig_cluster_publish(gw, NULL, NULL, 0, 'p', "%s %ld %ld %ld", b->id, b->completed, b->failed,
					   b->inflight);
		}
	}
}
