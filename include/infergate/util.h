/* Small helpers every program needs: clocks, numbers and addresses from
 * flags, randomness for jitter and tie-breaking, ids. */
#ifndef IG_UTIL_H
#define IG_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

/* The object that holds `ptr` in its field `member` (a callback handed a
 * pointer to an embedded struct finds its owner). */
#define IG_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Monotonic clock in milliseconds / microseconds / nanoseconds. */
uint64_t ig_now_ms(void);
uint64_t ig_now_us(void);
uint64_t ig_now_ns(void);
/* Wall clock, seconds since the epoch. */
int64_t ig_wall_s(void);
/* Wall clock as "2026-12-02T08:29:36.123Z". */
void ig_iso_time(char *out, size_t n);

/* Parses a whole string as a base-10 integer within [min, max].
 * Returns 0, or -1 with *err set (malloc'd) naming `what` and the value. */
int ig_parse_long(const char *what, const char *s, long min, long max, long *out, char **err);
/* Same for a finite double within [min, max]. */
int ig_parse_double(const char *what, const char *s, double min, double max, double *out, char **err);
/* Parses "HOST:PORT" (HOST may be empty = 0.0.0.0, or "[v6]"). Port 0..65535.
 * Returns 0 with *host malloc'd, or -1 with *err set. */
int ig_parse_hostport(const char *what, const char *s, char **host, int *port, char **err);
/* Writes the whole buffer to fd (again after EINTR and short writes).
 * Returns 0 or -1 (errno set; EIO when write() wrote nothing). */
int ig_write_all(int fd, const char *p, size_t n);
/* A server's base URL as the clients take it: http:// or https://, no
 * trailing slashes, no trailing /v1 (the paths add it). Returns it
 * malloc'd, or NULL with *err naming `what` and the value. */
char *ig_parse_base_url(const char *what, const char *u, char **err);

/* Raises the open-file soft limit to the hard one, or to `want` when the
 * hard limit is lower and the process may raise it (root). Returns the
 * soft limit now in effect (1024 when it cannot be read). */
long ig_raise_nofile(long want);

/* malloc'd printf; aborts on out of memory (used only for messages). */
char *ig_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Room for one more element in an array of *cap elements of `size` bytes
 * holding n: v itself while n < *cap, else v grown to twice (at least
 * `first`) with *cap updated. Returns the array, or NULL when out of memory
 * (v and *cap unchanged). */
void *ig_grow(void *v, size_t *cap, size_t n, size_t size, size_t first);

/* The one pseudo-random generator of the tree: splitmix64. Every state
 * gives a well-mixed output, so nearby seeds (prompt hashes that differ in
 * one byte) still give unrelated sequences. ig_rand_next advances a state of
 * the caller's (reproducible runs: texts, corpora); ig_rand_u64 and the rest
 * use a per-thread state seeded from the kernel unless ig_rand_seed is
 * called (jitter, tie-breaking). Predictable from its outputs: never for
 * ids or secrets (ig_random_hex, ig_secret_bytes below). */
uint64_t ig_rand_next(uint64_t *state);
/* Uniform in [0, 1) from a caller's state. */
double ig_rand_next_unit(uint64_t *state);
void ig_rand_seed(uint64_t seed);
uint64_t ig_rand_u64(void);
/* Uniform in [0, n). n > 0. */
uint64_t ig_rand_below(uint64_t n);
/* A secret for keying hash tables against crafted input: from the kernel
 * (getrandom). Aborts when the kernel gives none (no Linux since 3.17). */
uint64_t ig_secret64(void);
/* n bytes of a secret from the kernel (getrandom, unbuffered). Returns 0,
 * or -1 with errno. */
int ig_secret_bytes(void *out, size_t n);
/* n random bytes for ids: the kernel's, drawn a page at a time per thread.
 * Aborts when the kernel gives none. */
void ig_random_bytes(void *out, size_t n);
double ig_rand_unit(void);

/* 64-bit FNV-1a: a stable, fast, non-cryptographic hash (for seeding only). */
uint64_t ig_hash64(const void *p, size_t n, uint64_t seed);
/* The same hash carried on over n more bytes: ig_hash64(a + b, seed) is
 * ig_hash64_more(ig_hash64(a, seed), b). */
uint64_t ig_hash64_more(uint64_t h, const void *p, size_t n);

/* Starts a thread with every signal blocked: signals are the main loop's
 * (the gateway's reactor 0 reads them from a signalfd; a thread started
 * with SIGTERM open took it and the process died of it, exit 143, with
 * tracing on). Returns 0, or pthread_create's error number. */
int ig_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* Writes a random id of `hexlen` hex characters (+ NUL) into out, from
 * ig_random_bytes: unpredictable, and telling nothing of other ids or of
 * any secret. */
void ig_random_hex(char *out, size_t hexlen);
/* The same for a secret (ig_secret_bytes). Returns 0, or -1 with errno. */
int ig_secret_hex(char *out, size_t hexlen);

#endif
