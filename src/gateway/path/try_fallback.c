/* Model fallbacks: an exchange that dispatch refuses at once because its
 * model has no backend up or its queue is full goes to the model's next
 * fallback (model_fallbacks) that its key may use, its body naming that
 * model. Unlike the strategies of strategy.h it is asked at dispatch's
 * refusal of the first attempt, not at an attempt's end (proxy.c's
 * admit). Not here: the list of fallbacks (conf.c), what a key may use
 * (keyset.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "keys/keyset.h"
#include "path/exchange.h"

typedef enum ig_dispatch_result (*fallback_submit_fn)(struct ig_gw *gw, struct ig_waiter *w);

/* ig_try_fallback with dispatch's submit as a parameter (the unit test
 * scripts dispatch's answers). */
static bool fallback_with(struct ig_req *req, fallback_submit_fn submit)
{
	struct ig_gw *gw = req->gw;
	struct ig_waiter *w = &req->wait;
	const char *model = req->adm.model;
	for (size_t i = 0; req->refused_code && (strcmp(req->refused_code, "no_healthy_backend") == 0 ||
						 strcmp(req->refused_code, "queue_full") == 0); i++) {
		const char *fb = ig_conf_fallback(gw->cfg, model, i);
		if (!fb)
			return false;
		if (req->adm.key && req->adm.key->ent && !ig_keyset_model_allowed(req->adm.key->ent, fb, NULL))
			continue; /* its key may not use that model */
		json_t *root = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, NULL);
		char *text = NULL;
		struct ig_model *m = ig_sched_get(&gw->sched, &gw->fleet, fb);
		if (!json_is_object(root) || json_object_set_new(root, "model", json_string(fb)) < 0 || !m ||
		    !(text = json_dumps(root, JSON_COMPACT))) {
			json_decref(root);
			return false;
		}
		json_decref(root);
		ig_buf_reset(&req->body);
		ig_buf_append(&req->body, text, strlen(text));
		free(text);
		free(req->fallback);
		req->fallback = strdup(fb);
		ig_sched_hold(m);
		ig_sched_release(&gw->sched, w->m);
		w->m = m;
		w->model = req->fallback ? req->fallback : fb;
		ig_log_info("request %s: model '%s' has no backend free (%s); it runs on '%s' (model_fallbacks)",
			    req->request_id, model, req->refused_code, fb);
		free(req->err_body);
		req->err_body = NULL;
		req->err_status = 0;
		req->refused_code = NULL;
		if (submit(gw, w) != IG_DISPATCH_FAILED)
			return true;
	}
	return false;
}

/* model_fallbacks: a request refused because no backend of its model is up
 * (503 no_healthy_backend) or its model's queue is full (429 queue_full)
 * runs on the model's next fallback that its key may use, its body naming
 * that model; X-Infergate-Fallback says so. Returns true when it was
 * placed there (started or queued); false leaves the last refusal. */
bool ig_try_fallback(struct ig_req *req)
{
	return fallback_with(req, ig_dispatch_submit);
}
