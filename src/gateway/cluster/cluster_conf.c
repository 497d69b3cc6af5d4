/* The cluster's settings (cluster.c) and their check: Redis's URL and
 * TLS files, this gateway's name.
 * Rows of the configuration table (conf.h), registered at boot by
 * conf_parts.c; a file of their own beside the module so that the module's
 * file can change apart (moved out of conf.c). */
#include "config.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/redis.h"
#include "net/redismsg.h"

static const struct ig_flag cluster_rows[] = {
	{.name = "--cluster-redis", .key = "cluster.redis_url", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(cluster_redis),
	 .def = "", .metavar = "URL",
	 .help = "several gateways as one: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], where they share "
		 "per-key limits, backends' slots, classes, stored responses, files and batches and see each "
		 "other; rediss:// for TLS (the cluster.redis_tls_* keys); empty = this gateway alone"},
	{.name = "--cluster-redis-tls-ca-file", .key = "cluster.redis_tls_ca_file", .type = IG_FLAG_STRING,
	 .off = IG_CONF_OFF(cluster_redis_tls_ca), .def = "", .metavar = "FILE",
	 .help = "rediss://: PEM CA certificates Redis's certificate is verified with (default: the system's); "
		 "its name is verified too (cluster.redis_tls_server_name)"},
	{.name = "--cluster-redis-tls-client-cert", .key = "cluster.redis_tls_client_cert", .type = IG_FLAG_STRING,
	 .off = IG_CONF_OFF(cluster_redis_tls_cert), .def = "", .metavar = "FILE",
	 .help = "rediss://: PEM client certificate shown to Redis (its tls-auth-clients), with "
		 "cluster.redis_tls_client_key"},
	{.name = "--cluster-redis-tls-client-key", .key = "cluster.redis_tls_client_key", .type = IG_FLAG_STRING,
	 .off = IG_CONF_OFF(cluster_redis_tls_key), .def = "", .metavar = "FILE",
	 .help = "rediss://: the PEM private key of cluster.redis_tls_client_cert"},
	{.name = "--cluster-redis-tls-server-name", .key = "cluster.redis_tls_server_name", .type = IG_FLAG_STRING,
	 .off = IG_CONF_OFF(cluster_redis_tls_name), .def = "", .metavar = "NAME",
	 .help = "rediss://: the DNS name or IP address Redis's certificate must carry, and the SNI sent "
		 "(default: the URL's host)"},
	{.name = "--cluster-name", .key = "cluster.name", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(cluster_name), .def = "",
	 .metavar = "NAME", .help = "this gateway's name among them, unique among the live ones (default: its "
		 "listen HOST:PORT, the machine's name for 0.0.0.0); letters, digits and . _ : - only"},
	{.name = "--cluster-sync-ms", .key = "cluster.sync_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(cluster_sync_ms),
	 .min = 10, .max = 60000, .def = "100", .metavar = "N",
	 .help = "how often a gateway tells Redis it is alive and reads who else is; one silent for 3 periods "
		 "has left"},
	{.name = "--cluster-lease-s", .key = "cluster.lease_s", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(cluster_lease_s),
	 .min = 1, .max = 3600, .def = "10", .metavar = "N",
	 .help = "a batch is run by the one gateway that holds its lease in Redis; a gateway that dies "
		 "loses it after N seconds, and another takes the batch over from its journal"},
};
const struct ig_conf_part ig_cluster_conf = IG_CONF_PART(cluster_rows);

/* rediss://: the files readable and going together, then loaded as the
 * connections will (a key that is not the certificate's, a CA file
 * OpenSSL refuses); the TLS keys without rediss:// are a mistake (the
 * link would be plain while the keys say it is not). */
static void check_redis_tls(const struct ig_conf *cfg, const struct ig_redis_url *u, struct ig_buf *errs)
{
	static const char *const names[3] = {"cluster.redis_tls_ca_file", "cluster.redis_tls_client_cert",
					    "cluster.redis_tls_client_key"};
	const char *given = NULL;
	if (*cfg->cluster_redis_tls_ca)
		given = names[0];
	else if (*cfg->cluster_redis_tls_cert)
		given = names[1];
	else if (*cfg->cluster_redis_tls_key)
		given = names[2];
	else if (*cfg->cluster_redis_tls_name)
		given = "cluster.redis_tls_server_name";
	if (!u->tls) {
		if (given)
			ig_flags_problem(errs, "%s: given with a redis:// URL, which is plain TCP (rediss:// is TLS)", given);
		return;
	}
	size_t n = strlen(cfg->cluster_redis_tls_name);
	if (n > 253 || strspn(cfg->cluster_redis_tls_name,
			      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-:") != n)
		ig_flags_problem(errs, "cluster.redis_tls_server_name: '%s' is not a DNS name or an IP address",
				 cfg->cluster_redis_tls_name);
	size_t before = errs->len;
	ig_conf_check_tls_files(errs, names, cfg->cluster_redis_tls_ca, cfg->cluster_redis_tls_cert, cfg->cluster_redis_tls_key);
	if (errs->len != before)
		return; /* said by key already */
	struct ig_redis_tls_files f = {cfg->cluster_redis_tls_ca, cfg->cluster_redis_tls_cert, cfg->cluster_redis_tls_key,
				       cfg->cluster_redis_tls_name};
	char *err = NULL;
	struct ig_redis_tls *t = ig_redis_tls_new(&f, u->host, &err);
	if (!t)
		ig_flags_problem(errs, "cluster.redis_url: TLS: %s", err);
	free(err);
	ig_redis_tls_free(t);
}

/* The cluster section: a URL Redis can be reached at, a name of the
 * allowed characters (the listen address when none is given). */
void ig_cluster_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	if (!*cfg->cluster_redis)
		return;
	struct ig_redis_url u;
	char *err = NULL;
	if (ig_redis_url_parse(cfg->cluster_redis, &u, &err) < 0) {
		ig_flags_problem(errs, "cluster.redis_url: %s", err);
		free(err);
	} else {
		check_redis_tls(cfg, &u, errs);
		ig_redis_url_free(&u);
	}
	if (!*cfg->cluster_name) {
		/* HOST:PORT, with the machine's name for a wildcard address
		 * (0.0.0.0:8080 would name every gateway alike) */
		char host[256] = "";
		const char *h = cfg->listen_host ? cfg->listen_host : "";
		if ((!*h || strcmp(h, "0.0.0.0") == 0 || strcmp(h, "::") == 0) && gethostname(host, sizeof(host) - 1) == 0)
			h = host;
		free(cfg->cluster_name);
		cfg->cluster_name = ig_strdupf("%s:%d", h, cfg->listen_port);
	}
	if (!ig_redismsg_name_ok(cfg->cluster_name, strlen(cfg->cluster_name))) /* as the others' names in Redis */
		ig_flags_problem(errs, "cluster.name: '%s' must be 1 to 64 letters, digits, '.', '_', ':' or '-'",
				 cfg->cluster_name);
}
