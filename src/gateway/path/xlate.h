/* Anthropic's Messages API over a backend that serves only OpenAI's chat
 * completions (anthropic.translate): the request's body becomes a chat
 * request sent to /v1/chat/completions, and the answer comes back as a
 * Message or as Anthropic's stream events. The translation itself is the
 * library's (include/infergate/anthropic.h, shared with infergate-sim);
 * here is where the exchange calls it. Off by default: SGLang and vLLM
 * serve /v1/messages themselves, and an answer the gateway made up from
 * another route is said in the access log ("translated": true).
 *
 * Threads: as the exchange's (exchange.h): the request's rewrite under the
 * lock at admission, the answer's in the relay (relay.c, the lock let go)
 * and at the end (proxy.c's respond). */
#ifndef IG_XLATE_H
#define IG_XLATE_H

#include <stdbool.h>
#include <stddef.h>

struct ig_req;
struct ig_relay;

/* Whether req, admitted, goes to its backend translated: an Anthropic
 * Messages request (not count_tokens) with anthropic.translate on. */
bool ig_xlate_wanted(const struct ig_req *req);
/* Rewrites req's body into the chat request and its upstream path, and
 * sets its relay to translate the answer. Returns 0, or -1 with req's
 * error set (400 invalid_request_error naming the field, or 500). */
int ig_xlate_request(struct ig_req *req);
/* The whole answer of a non-streamed translated request: a chat completion
 * (status 2xx) as a Message, an error in Anthropic's shape, malloc'd. */
char *ig_xlate_answer(const struct ig_relay *r, unsigned status, const char *body, size_t len);

#endif
