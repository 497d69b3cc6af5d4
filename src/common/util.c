/* Clocks, flag parsing, randomness. Nothing here allocates on a hot path
 * except the error messages. */
#include "config.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include "infergate/util.h"

uint64_t ig_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ig_now_us(void) { return ig_now_ns() / 1000u; }

uint64_t ig_now_ms(void) { return ig_now_us() / 1000u; }

int64_t ig_wall_s(void) { return (int64_t)time(NULL); }

void ig_iso_time(char *out, size_t n)
{
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000);
}

long ig_raise_nofile(long want)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 1024;
	if (rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max < want) {
		struct rlimit more = {(rlim_t)want, (rlim_t)want};
		if (setrlimit(RLIMIT_NOFILE, &more) == 0)
			return want;
	}
	rlim_t target = rl.rlim_max == RLIM_INFINITY ? (rlim_t)want : rl.rlim_max;
	if (rl.rlim_cur < target) {
		struct rlimit nl = {target, rl.rlim_max};
		if (setrlimit(RLIMIT_NOFILE, &nl) == 0)
			rl.rlim_cur = target;
	}
	return rl.rlim_cur == RLIM_INFINITY ? want : (long)rl.rlim_cur;
}

void *ig_grow(void *v, size_t *cap, size_t n, size_t size, size_t first)
{
	if (n < *cap)
		return v;
	size_t want = *cap ? *cap * 2 : first;
	while (want <= n) /* room for index n, however far past the end */
		want *= 2;
	void *nv = realloc(v, want * size);
	if (nv)
		*cap = want;
	return nv;
}

char *ig_strdupf(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	return s;
}

int ig_parse_long(const char *what, const char *s, long min, long max, long *out, char **err)
{
	char *end;
	long v;

	if (!s || !*s) {
		*err = ig_strdupf("%s: missing value (expected an integer from %ld to %ld)", what, min, max);
		return -1;
	}
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end) {
		*err = ig_strdupf("%s: '%s' is not an integer", what, s);
		return -1;
	}
	if (v < min || v > max) {
		*err = ig_strdupf("%s: %ld is out of range (%ld..%ld)", what, v, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

int ig_parse_double(const char *what, const char *s, double min, double max, double *out, char **err)
{
	char *end;
	double v;

	if (!s || !*s) {
		*err = ig_strdupf("%s: missing value (expected a number from %g to %g)", what, min, max);
		return -1;
	}
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v)) {
		*err = ig_strdupf("%s: '%s' is not a number", what, s);
		return -1;
	}
	if (v < min || v > max) {
		*err = ig_strdupf("%s: %g is out of range (%g..%g)", what, v, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

int ig_parse_hostport(const char *what, const char *s, char **host, int *port, char **err)
{
	const char *colon, *hstart = s, *hend;
	long p;
	char *perr = NULL;

	if (!s || !*s) {
		*err = ig_strdupf("%s: missing value (expected HOST:PORT)", what);
		return -1;
	}
	if (s[0] == '[') {
		const char *rb = strchr(s, ']');
		if (!rb || rb[1] != ':') {
			*err = ig_strdupf("%s: '%s' is not HOST:PORT", what, s);
			return -1;
		}
		hstart = s + 1;
		hend = rb;
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon) {
			*err = ig_strdupf("%s: '%s' is not HOST:PORT (no port)", what, s);
			return -1;
		}
		hend = colon;
	}
	if (ig_parse_long("port", colon + 1, 0, 65535, &p, &perr) < 0) {
		*err = ig_strdupf("%s: '%s' has a bad port (%s)", what, s, perr);
		free(perr);
		return -1;
	}
	if (hend == hstart)
		*host = strdup("0.0.0.0");
	else
		*host = strndup(hstart, (size_t)(hend - hstart));
	*port = (int)p;
	return 0;
}

static __thread uint64_t rng_state;

void ig_rand_seed(uint64_t seed) { rng_state = seed ? seed : 0x9E3779B97F4A7C15ull; }

uint64_t ig_rand_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

double ig_rand_next_unit(uint64_t *state) { return (double)(ig_rand_next(state) >> 11) / 9007199254740992.0; }

/* The kernel's random bytes (getrandom, /dev/urandom if the kernel is older
 * than 3.17). Returns 0, or -1 with errno. */
static int kernel_bytes(void *out, size_t n)
{
	unsigned char *p = out;
	while (n > 0) {
		ssize_t got = getrandom(p, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0 && errno == ENOSYS) {
			FILE *f = fopen("/dev/urandom", "rb");
			size_t r = f ? fread(p, 1, n, f) : 0;
			if (f)
				fclose(f);
			if (r != n) {
				errno = EIO;
				return -1;
			}
			return 0;
		}
		if (got <= 0)
			return -1;
		p += got;
		n -= (size_t)got;
	}
	return 0;
}

int ig_secret_bytes(void *out, size_t n) { return kernel_bytes(out, n); }

uint64_t ig_secret64(void)
{
	uint64_t k;
	if (kernel_bytes(&k, sizeof(k)) < 0) {
		/* Linux has had getrandom since 3.17: a process with neither it
		 * nor /dev/urandom has nothing to key its tables with. */
		fprintf(stderr, "no random bytes from the kernel (getrandom, /dev/urandom): %s\n", strerror(errno));
		abort();
	}
	return k;
}

uint64_t ig_rand_u64(void)
{
	if (!rng_state)
		ig_rand_seed(ig_secret64());
	return ig_rand_next(&rng_state);
}

uint64_t ig_rand_below(uint64_t n) { return ig_rand_u64() % n; }

/* Ids come from the kernel too, a page at a time per thread (a request id
 * costs one getrandom call in 64): an id tells nothing about the splitmix
 * state above nor about any secret (X-Request-Id once gave away the batch
 * runner's secret, issue 46). A forked child starts a page of its own. */
static __thread unsigned char id_pool[1024];
static __thread size_t id_left;
static pthread_once_t id_once = PTHREAD_ONCE_INIT;

static void id_forked(void) { id_left = 0; }

static void id_init(void) { pthread_atfork(NULL, NULL, id_forked); }

void ig_random_bytes(void *out, size_t n)
{
	unsigned char *p = out;
	pthread_once(&id_once, id_init);
	while (n > 0) {
		if (id_left == 0) {
			if (kernel_bytes(id_pool, sizeof(id_pool)) < 0) {
				fprintf(stderr, "no random bytes from the kernel (getrandom, /dev/urandom): %s\n",
					strerror(errno));
				abort();
			}
			id_left = sizeof(id_pool);
		}
		size_t k = n < id_left ? n : id_left;
		memcpy(p, id_pool + sizeof(id_pool) - id_left, k);
		/* used bytes are not kept: a later read of the pool shows only ids to come */
		memset(id_pool + sizeof(id_pool) - id_left, 0, k);
		id_left -= k;
		p += k;
		n -= k;
	}
}

double ig_rand_unit(void) { return (double)(ig_rand_u64() >> 11) / 9007199254740992.0; }

uint64_t ig_hash64_more(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

uint64_t ig_hash64(const void *p, size_t n, uint64_t seed)
{
	return ig_hash64_more(0xcbf29ce484222325ull ^ seed, p, n);
}

static void to_hex(char *out, const unsigned char *b, size_t hexlen)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < hexlen; i++)
		out[i] = hex[(b[i / 2] >> (i % 2 ? 0 : 4)) & 15];
	out[hexlen] = '\0';
}

void ig_random_hex(char *out, size_t hexlen)
{
	unsigned char b[64];
	for (size_t done = 0; done < hexlen;) { /* 128 hex characters at a time */
		size_t k = hexlen - done < 128 ? hexlen - done : 128;
		ig_random_bytes(b, (k + 1) / 2);
		to_hex(out + done, b, k);
		done += k;
	}
	out[hexlen] = '\0';
}

int ig_secret_hex(char *out, size_t hexlen)
{
	unsigned char b[64];
	for (size_t done = 0; done < hexlen;) {
		size_t k = hexlen - done < 128 ? hexlen - done : 128;
		if (kernel_bytes(b, (k + 1) / 2) < 0)
			return -1;
		to_hex(out + done, b, k);
		done += k;
	}
	out[hexlen] = '\0';
	return 0;
}

char *ig_parse_base_url(const char *what, const char *u, char **err)
{
	if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0) {
		*err = ig_strdupf("%s: '%s' does not start with http:// or https://", what, u);
		return NULL;
	}
	char *s = strdup(u);
	if (!s) {
		*err = strdup("out of memory");
		return NULL;
	}
	size_t n = strlen(s);
	while (n > 0 && s[n - 1] == '/')
		s[--n] = '\0';
	if (n >= 3 && strcmp(s + n - 3, "/v1") == 0)
		s[n - 3] = '\0';
	return s;
}

int ig_write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0) /* nothing written and no error: do not spin */
				errno = EIO;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int ig_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}
