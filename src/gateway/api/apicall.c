/* An API call's connection and life (apicall.h). */
#include "config.h"
#include <stdio.h>

#include "api/apicall.h"
#include "gateway.h"
#include "net/rx.h"

void ig_api_call_init(struct ig_api_call *c, struct ig_call ops, struct ig_gw *gw, struct MHD_Connection *conn,
		      const char *url, const char *method, const char *owner)
{
	c->call = ops;
	c->gw = gw;
	c->conn = conn;
	c->rx = ig_rx_self ? ig_rx_self : ig_gw_home(gw);
	snprintf(c->owner, sizeof(c->owner), "%s", owner);
	snprintf(c->method, sizeof(c->method), "%s", method);
	snprintf(c->url, sizeof(c->url), "%s", url);
	c->jobs = 0;
	c->suspended = c->gone = false;
}

void ig_api_call_suspend(struct ig_api_call *c)
{
	MHD_suspend_connection(c->conn);
	c->suspended = true;
}

bool ig_api_call_job_done(struct ig_api_call *c, bool resume)
{
	c->jobs--;
	if (c->gone)
		return c->jobs == 0;
	if (resume && c->suspended) {
		c->suspended = false;
		MHD_resume_connection(c->conn);
		ig_httpd_resumed(c->rx, c->conn);
	}
	return false;
}

bool ig_api_call_completed(struct ig_api_call *c)
{
	c->conn = NULL;
	c->gone = true;
	return c->jobs == 0;
}
