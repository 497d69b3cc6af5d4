/* infergate-sim: startup. The flags are read and checked first (conf.c):
 * a bad one exits 2 before anything listens. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "conf.h"
#include "engine.h"
#include "reactor.h"
#include "server.h"

int main(int argc, char **argv)
{
	struct sim_conf conf;
	struct sim sim;
	char *err = NULL;
	int rc;

	ig_log_set_ident("infergate-sim");
	rc = sim_conf_from_args(&conf, argc, argv, &err);
	if (rc != 0) {
		if (rc < 0) {
			fprintf(stderr, "infergate-sim: %s\nTry 'infergate-sim --help'.\n", err);
			free(err);
		}
		sim_conf_free(&conf);
		return rc < 0 ? 2 : 0;
	}
	ig_log_set_level((enum ig_log_level)conf.log_level);

	rc = 1;
	memset(&sim, 0, sizeof(sim));
	sim.conf = &conf;
	sim.epfd = sim.signal_fd = -1;
	sim_server_init(&sim);
	if (sim_engine_init(&sim.eng, &conf) == 0 && sim_reactor_init(&sim) == 0)
		rc = sim_reactor_run(&sim);
	sim_reactor_free(&sim);
	sim_engine_free(&sim.eng);
	free(sim.stored);
	sim_conf_free(&conf);
	return rc;
}
