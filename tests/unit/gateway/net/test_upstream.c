/* Unit tests for the libcurl multi glue (src/gateway/net/upstream.c, included to
 * reach curl's callbacks): the easy-handle pool, the epoll bookkeeping of
 * curl's sockets (a connection stays watched while it idles in curl's
 * cache, leaves when it stirs or is closed; the resolver's socketpair leaves
 * at once), curl's timer as a deadline, and a transfer's end reported
 * through its own done callback, driven by a small loop of the test's own:
 * a file:// transfer, and a connection refused on loopback. No network. */
#include "../../../../src/gateway/net/upstream.c"

#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>

#include "../../check_main.h"

static struct ig_conf cfg;
static struct ig_gw gw;
static struct ig_rx rx;

static void setup_rx(void)
{
	memset(&cfg, 0, sizeof(cfg));
	memset(&gw, 0, sizeof(gw));
	memset(&rx, 0, sizeof(rx));
	cfg.max_connections = 16;
	cfg.tls_verify = 1;
	gw.cfg = &cfg;
	rx.gw = &gw;
	rx.epfd = epoll_create1(EPOLL_CLOEXEC);
	ck_assert_int_ge(rx.epfd, 0);
	ck_assert_int_eq(ig_upstream_init(&rx), 0);
	ig_log_set_level(IG_LOG_ERROR);
}

static void free_rx(void)
{
	ig_upstream_free(&rx);
	close(rx.epfd);
}

/* Whether fd is in rx's epoll set (adding it again says so). */
static bool in_epoll(int fd)
{
	struct epoll_event ev = {.events = EPOLLIN};
	if (epoll_ctl(rx.epfd, EPOLL_CTL_ADD, fd, &ev) == 0) {
		epoll_ctl(rx.epfd, EPOLL_CTL_DEL, fd, NULL);
		return false;
	}
	return errno == EEXIST;
}

static uint32_t state_of(int fd)
{
	return (size_t)fd < rx.ncurl_fds ? rx.curl_fds[fd] : 0;
}

START_TEST(easy_handles_are_reused_reset)
{
	setup_rx();
	CURL *a = ig_upstream_easy_get(&rx);
	ck_assert_ptr_nonnull(a);
	curl_easy_setopt(a, CURLOPT_PRIVATE, (void *)&rx);
	ig_upstream_easy_put(&rx, a);
	ck_assert_uint_eq(rx.neasy_free, 1);
	/* the same handle comes back, with no option of its last use */
	CURL *b = ig_upstream_easy_get(&rx);
	ck_assert_ptr_eq(b, a);
	ck_assert_uint_eq(rx.neasy_free, 0);
	char *priv = (char *)&cfg;
	curl_easy_getinfo(b, CURLINFO_PRIVATE, &priv);
	ck_assert_ptr_null(priv);
	/* an empty pool makes a new one; NULL is no handle */
	CURL *c = ig_upstream_easy_get(&rx);
	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_ne(c, b);
	ig_upstream_easy_put(&rx, NULL);
	ck_assert_uint_eq(rx.neasy_free, 0);
	ig_upstream_easy_put(&rx, b);
	ig_upstream_easy_put(&rx, c);
	ck_assert_uint_eq(rx.neasy_free, 2);
	/* last in, first out */
	ck_assert_ptr_eq(ig_upstream_easy_get(&rx), c);
	ig_upstream_easy_put(&rx, c);

	/* the pool keeps at most EASY_FREE_MAX; the rest are cleaned up */
	for (int i = 0; i < EASY_FREE_MAX + 10; i++)
		ig_upstream_easy_put(&rx, curl_easy_init());
	ck_assert_uint_eq(rx.neasy_free, EASY_FREE_MAX);
	free_rx(); /* valgrind: every pooled handle freed */
	ck_assert_uint_eq(rx.neasy_free, 0);
}
END_TEST

START_TEST(curl_sockets_in_the_epoll_set)
{
	setup_rx();
	/* a connection (AF_INET) */
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(on_curl_socket(NULL, s, CURL_POLL_OUT, &rx, NULL), 0);
	ck_assert(in_epoll(s));
	ck_assert_uint_eq(state_of(s), FD_REGISTERED | FD_WANTED | EPOLLOUT);
	ck_assert_int_eq(on_curl_socket(NULL, s, CURL_POLL_INOUT, &rx, NULL), 0);
	ck_assert_uint_eq(state_of(s), FD_REGISTERED | FD_WANTED | EPOLLIN | EPOLLOUT);
	/* curl is done with it for now: it idles in curl's cache, still
	 * watched, so reusing it costs no epoll_ctl */
	ck_assert_int_eq(on_curl_socket(NULL, s, CURL_POLL_REMOVE, &rx, NULL), 0);
	ck_assert(in_epoll(s));
	ck_assert_uint_eq(state_of(s), FD_REGISTERED | EPOLLIN | EPOLLOUT);
	/* reused */
	ck_assert_int_eq(on_curl_socket(NULL, s, CURL_POLL_IN, &rx, NULL), 0);
	ck_assert_uint_eq(state_of(s), FD_REGISTERED | FD_WANTED | EPOLLIN);
	ck_assert_int_eq(on_curl_socket(NULL, s, CURL_POLL_REMOVE, &rx, NULL), 0);
	/* it stirs while idle (the backend closed it): no longer watched,
	 * and curl is not called for it */
	ig_upstream_on_socket(&rx, s, EPOLLIN | EPOLLRDHUP);
	ck_assert(!in_epoll(s));
	ck_assert_uint_eq(state_of(s), 0);
	/* curl closes a connection: out of the set first, then closed */
	ck_assert_int_eq(on_curl_socket(NULL, s, CURL_POLL_IN, &rx, NULL), 0);
	ck_assert(in_epoll(s));
	ck_assert_int_eq(on_curl_close(&rx, s), 0);
	ck_assert_uint_eq(state_of(s), 0);
	ck_assert_int_eq(fcntl(s, F_GETFD), -1);

	/* not a connection (the threaded resolver's socketpair): curl closes
	 * it without the close callback, so it leaves the set on REMOVE */
	int sp[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	ck_assert_int_eq(on_curl_socket(NULL, sp[0], CURL_POLL_IN, &rx, NULL), 0);
	ck_assert_uint_eq(state_of(sp[0]), FD_REGISTERED | FD_WANTED | FD_TRANSIENT | EPOLLIN);
	ck_assert_int_eq(on_curl_socket(NULL, sp[0], CURL_POLL_REMOVE, &rx, NULL), 0);
	ck_assert(!in_epoll(sp[0]));
	ck_assert_uint_eq(state_of(sp[0]), 0);
	close(sp[0]);
	close(sp[1]);

	/* the table grows to any fd (it starts with room for 1024) */
	ck_assert_int_ge(ig_raise_nofile(4096), 2100);
	int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int hi = fcntl(t, F_DUPFD_CLOEXEC, 2000);
	close(t);
	ck_assert_int_ge(hi, 2000);
	ck_assert_int_eq(on_curl_socket(NULL, hi, CURL_POLL_IN, &rx, NULL), 0);
	ck_assert_uint_gt(rx.ncurl_fds, (size_t)hi);
	ck_assert_int_eq(on_curl_close(&rx, hi), 0);
	free_rx();
}
END_TEST

START_TEST(curls_timer_is_a_deadline)
{
	setup_rx();
	ck_assert_int_eq(on_curl_timer(rx.multi, -1, &rx), 0);
	ck_assert_uint_eq(rx.curl_deadline_us, UINT64_MAX);
	ck_assert_int_eq(on_curl_timer(rx.multi, 0, &rx), 0);
	ck_assert_uint_le(rx.curl_deadline_us, ig_now_us()); /* at once */
	ck_assert_int_eq(on_curl_timer(rx.multi, 60000, &rx), 0);
	ck_assert_uint_ne(rx.curl_deadline_us, UINT64_MAX);
	/* the action clears it (curl may set a new one) */
	ck_assert_int_eq(on_curl_timer(rx.multi, -1, &rx), 0);
	free_rx();
}
END_TEST

/* A transfer of the test's own: its done callback notes the result. */
struct job {
	struct ig_xfer x;
	int done;
	CURLcode result;
	char got[64];
	size_t ngot;
};

static void job_done(struct ig_xfer *x, CURLcode result)
{
	struct job *j = IG_CONTAINER_OF(x, struct job, x);
	j->done++;
	j->result = result;
	ck_assert(!x->running); /* out of the multi before it is called */
}

static size_t job_body(char *p, size_t size, size_t n, void *userdata)
{
	struct job *j = userdata;
	size_t k = size * n < sizeof(j->got) - 1 - j->ngot ? size * n : sizeof(j->got) - 1 - j->ngot;
	memcpy(j->got + j->ngot, p, k);
	j->ngot += k;
	return size * n;
}

/* The reactor's part, as reactor.c's loop does it, until the job ends. */
static void run_until_done(struct job *j)
{
	for (int turns = 0; !j->done; turns++) {
		ck_assert_msg(turns < 100000, "the transfer never ended");
		struct epoll_event evs[16];
		int timeout = rx.curl_deadline_us == UINT64_MAX ? 100 : 1;
		int n = epoll_wait(rx.epfd, evs, 16, timeout);
		for (int i = 0; i < n; i++) {
			ck_assert(evs[i].data.u64 & IG_EV_CURL_BIT);
			ig_upstream_on_socket(&rx, (int)(evs[i].data.u64 & 0xffffffffu), evs[i].events);
		}
		if (rx.curl_deadline_us != UINT64_MAX && ig_now_us() >= rx.curl_deadline_us)
			ig_upstream_on_timer(&rx);
		ig_upstream_check_done(&rx);
	}
}

START_TEST(a_transfer_ends_through_its_done_callback)
{
	setup_rx();
	char path[] = "/tmp/ig-test-upstream-XXXXXX", url[64];
	int fd = mkstemp(path);
	ck_assert_int_eq(write(fd, "hello", 5), 5);
	close(fd);
	snprintf(url, sizeof(url), "file://%s", path);

	struct job j = {.x.done = job_done};
	j.x.easy = ig_upstream_easy_get(&rx);
	curl_easy_setopt(j.x.easy, CURLOPT_URL, url);
	curl_easy_setopt(j.x.easy, CURLOPT_WRITEFUNCTION, job_body);
	curl_easy_setopt(j.x.easy, CURLOPT_WRITEDATA, &j);
	ck_assert_int_eq(ig_upstream_start(&rx, &j.x), CURLM_OK);
	ck_assert(j.x.running);
	ck_assert_ptr_eq(j.x.rx, &rx);
	run_until_done(&j);
	ck_assert_int_eq(j.done, 1);
	ck_assert_int_eq(j.result, CURLE_OK);
	ck_assert_str_eq(j.got, "hello");
	unlink(path);

	/* the handle goes back to the pool and serves the next transfer: a
	 * connection refused on loopback (a bound port nobody listens on) */
	ig_upstream_easy_put(&rx, j.x.easy);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/models", ntohs(a.sin_port));
	struct job k = {.x.done = job_done};
	k.x.easy = ig_upstream_easy_get(&rx);
	ck_assert_ptr_eq(k.x.easy, j.x.easy);
	curl_easy_setopt(k.x.easy, CURLOPT_URL, url);
	curl_easy_setopt(k.x.easy, CURLOPT_WRITEFUNCTION, job_body);
	curl_easy_setopt(k.x.easy, CURLOPT_WRITEDATA, &k);
	ck_assert_int_eq(ig_upstream_start(&rx, &k.x), CURLM_OK);
	run_until_done(&k);
	ck_assert_int_eq(k.done, 1);
	ck_assert_int_eq(k.result, CURLE_COULDNT_CONNECT);
	/* its socket was closed through the close callback: none is left in
	 * the epoll set */
	for (size_t fdn = 0; fdn < rx.ncurl_fds; fdn++)
		ck_assert_msg(rx.curl_fds[fdn] == 0, "fd %zu still registered", fdn);
	close(s);

	/* a transfer stopped before it ends: out of the multi, done not called */
	struct job m = {.x.done = job_done};
	m.x.easy = k.x.easy;
	ck_assert_int_eq(ig_upstream_start(&rx, &m.x), CURLM_OK);
	ig_upstream_stop(&m.x);
	ck_assert(!m.x.running);
	ig_upstream_check_done(&rx);
	ck_assert_int_eq(m.done, 0);
	ig_upstream_stop(&m.x); /* twice is fine */
	ig_upstream_easy_put(&rx, m.x.easy);
	free_rx();
}
END_TEST

IG_CHECK_MAIN("upstream", easy_handles_are_reused_reset, curl_sockets_in_the_epoll_set, curls_timer_is_a_deadline,
	      a_transfer_ends_through_its_done_callback)
