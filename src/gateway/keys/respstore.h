/* Which backend holds each stored response of OpenAI's Responses API, so
 * that a follow-up naming it (previous_response_id) reaches the server that
 * keeps it: SGLang and vLLM store responses in their own memory. Bounded
 * (a fixed table of fingerprints, no id kept) and expiring; an entry lost
 * to either only means the follow-up is routed like any request and its
 * backend decides. Not here: reading ids from answers (proxy.c) or routing
 * (router.c). */
#ifndef IG_RESPSTORE_H
#define IG_RESPSTORE_H

#include <stddef.h>
#include <stdint.h>

#define IG_RESPSTORE_SLOTS 65536          /* responses remembered at most */
#define IG_RESPSTORE_TTL_MS (24ull * 3600 * 1000)

struct ig_respstore;

/* NULL: out of memory. */
struct ig_respstore *ig_respstore_new(void);
void ig_respstore_free(struct ig_respstore *r);
/* The response id (n bytes) is held by that backend from now on; owner:
 * which key stored it (ig_respstore_owner), 0 none. */
void ig_respstore_put(struct ig_respstore *r, const char *id, size_t n, int backend, uint32_t owner,
		      uint64_t now_ms);
/* Its backend's id, or -1 when not remembered (never seen, expired,
 * evicted, or stored by another owner). */
int ig_respstore_get(const struct ig_respstore *r, const char *id, size_t n, uint32_t owner, uint64_t now_ms);
/* The owner of a key's stored responses: its digest (hex) fingerprinted,
 * never 0; "" (no key) is 0. */
uint32_t ig_respstore_owner(const char *key_hex);
size_t ig_respstore_bytes(const struct ig_respstore *r);

#endif
