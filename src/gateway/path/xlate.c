/* Anthropic's Messages API over a chat-only backend (xlate.h). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/anthropic.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/util.h"
#include "path/exchange.h"
#include "path/xlate.h"

#define CHAT_PATH "/v1/chat/completions"

bool ig_xlate_wanted(const struct ig_req *req)
{
	const struct ig_route *rt = ig_gw_route(req->gw->cfg, req->adm.route_idx);
	return req->gw->cfg->anthropic_translate && (rt->flags & IG_RT_ANTHROPIC) && (rt->flags & IG_RT_OUTPUT) &&
	       !req->adm.resp_id;
}

int ig_xlate_request(struct ig_req *req)
{
	struct ig_relay *r = &req->relay;
	json_t *body = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, NULL);
	char *err = NULL;
	json_t *chat = body ? ig_anth_to_chat(body, IG_ANTH_MESSAGES, &err) : NULL;
	char *text = chat ? json_dumps(chat, JSON_COMPACT) : NULL;
	char *path = text ? strdup(CHAT_PATH) : NULL;
	if (!path) {
		if (err)
			ig_xch_set_error(req, 400, "invalid_request_error", "%s", err);
		else
			ig_xch_set_error(req, body ? 500 : 400, body ? "internal_error" : "invalid_request_error",
					 body ? "out of memory" : "the body is not JSON");
		free(err);
		free(text);
		json_decref(chat);
		json_decref(body);
		return -1;
	}
	/* What the answer needs: its stop sequences (a stop string the backend
	 * names is a stop_sequence only when the request asked for it) and
	 * the model the client named. */
	json_t *stop = json_object_get(body, "stop_sequences");
	const char *model = req->adm.alias ? req->adm.alias : req->adm.model;
	r->xlate_stop = json_is_array(stop) ? json_incref(stop) : NULL;
	if (!(r->xlate_model = strdup(model ? model : "")))
		abort();
	r->xlate_input = req->adm.prompt_estimate; /* message_start's, when the backend's first chunk has none */
	r->xlate = true; /* a stream's translator is made with each attempt (relay.c) */
	ig_buf_reset(&req->body);
	if (ig_buf_append(&req->body, text, strlen(text)) < 0)
		abort();
	free(req->adm.up_path);
	req->adm.up_path = path;
	free(text);
	json_decref(chat);
	json_decref(body);
	return 0;
}

char *ig_xlate_answer(const struct ig_relay *r, unsigned status, const char *body, size_t len)
{
	if (status < 200 || status >= 300)
		return ig_anth_error_from_backend(status, body, len);
	json_t *completion = json_loadb(body ? body : "", len, 0, NULL);
	char *err = NULL;
	json_t *msg = completion ? ig_anth_from_chat(completion, r->xlate_stop, &err) : NULL;
	char *out;
	if (msg) {
		out = json_dumps(msg, JSON_COMPACT);
	} else { /* the backend's 2xx was no chat completion: its fault, said as Anthropic says it */
		char *why = ig_strdupf("the backend's answer is not a chat completion (%s)",
				       err ? err : "not JSON");
		out = ig_anth_error_json(502, "api_error", why);
		free(why);
	}
	free(err);
	json_decref(msg);
	json_decref(completion);
	return out;
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag xlate_rows[] = {
	{.name = "--anthropic-translate", .key = "anthropic.translate", .type = IG_FLAG_SWITCH,
	 .off = IG_CONF_OFF(anthropic_translate), .def = "false",
	 .help = "Anthropic's Messages API (/v1/messages) is sent to the backends as chat completions and the "
		 "answers translated back (streamed too: text, tools, stop reasons, usage), for backends that serve "
		 "no /v1/messages of their own; the access log says \"translated\". Off: forwarded as it came "
		 "(SGLang and vLLM serve it)"},
};
const struct ig_conf_part ig_xlate_conf = IG_CONF_PART(xlate_rows);
