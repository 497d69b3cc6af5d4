/* Unit tests for the process's bootstrap (src/gateway/core/boot.c): what an
 * operator sees when the gateway starts: the listen and admin ports bound
 * (a busy port refused with its cause), the Files and Batch stores and the
 * gateway's own socket made in data_dir (only its user may open it; gone
 * after the stop), a data_dir too long for that socket and a bad key file
 * refused with the file named; and a failed start released cleanly. */
#include "config.h"
#include <arpa/inet.h>
#include <check.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "core/boot.h"
#include "core/conf_parts.h"
#include "gateway.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "../../check_main.h"

/* The modules' rows and checks, as main.c registers them. */
__attribute__((constructor)) static void register_table(void)
{
	if (ig_conf_parts_register() < 0)
		abort();
}

static char dir[64];
static int saved_err = -1;
static char errpath[128];

static void make_dir(void)
{
	snprintf(dir, sizeof(dir), "/tmp/ig-test-boot-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	ig_log_set_level(IG_LOG_ERROR);
}

static void remove_dir(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* stderr (the log) into a file until logged() */
static void capture(void)
{
	snprintf(errpath, sizeof(errpath), "%s/stderr", dir);
	int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	saved_err = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	close(fd);
}

static const char *logged(void)
{
	static char buf[4096];
	dup2(saved_err, STDERR_FILENO);
	close(saved_err);
	FILE *f = fopen(errpath, "r");
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int port_of(int fd)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	return ntohs(a.sin_port);
}

static void conf_of(struct ig_conf *cfg, int argc, char **argv)
{
	char *err = NULL;
	ck_assert_msg(ig_conf_from_args(cfg, argc, argv, &err) == 0, "%s", err);
}

START_TEST(ports_stores_and_the_own_socket)
{
	make_dir();
	char data[128];
	snprintf(data, sizeof(data), "%s/data", dir);
	ck_assert_int_eq(mkdir(data, 0700), 0);
	char *argv[] = {"infergate", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.2:0", "--backend",
			"http://127.0.0.1:30001", "--workers", "1", "--data-dir", data};
	struct ig_conf cfg;
	conf_of(&cfg, sizeof(argv) / sizeof(argv[0]), argv);
	struct ig_gw gw;
	ck_assert_int_eq(ig_boot_init(&gw, &cfg), 0);
	ck_assert_int_ge(gw.listen_fd, 0);
	ck_assert_int_ge(gw.admin_fd, 0);
	struct sockaddr_in adm;
	socklen_t alen = sizeof(adm);
	ck_assert_int_eq(getsockname(gw.admin_fd, (struct sockaddr *)&adm, &alen), 0);
	ck_assert_uint_eq(ntohl(adm.sin_addr.s_addr), 0x7f000002); /* the admin API on its own address */
	/* a client can connect */
	int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port_of(gw.listen_fd)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	ck_assert_int_eq(connect(c, (struct sockaddr *)&to, sizeof(to)), 0);
	close(c);

	/* the stores and the gateway's own socket, only its user's */
	struct stat st;
	char p[256];
	snprintf(p, sizeof(p), "%s/files", data);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	snprintf(p, sizeof(p), "%s/batches", data);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_ptr_nonnull(gw.files);
	ck_assert_ptr_nonnull(gw.batches);
	ck_assert_int_eq(stat(gw.self_path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_int_eq(st.st_mode & 077, 0);
	char self[256];
	snprintf(self, sizeof(self), "%s", gw.self_path);
	ck_assert_uint_eq(gw.fleet.n, 1);

	ig_boot_free(&gw);
	ck_assert_int_eq(gw.listen_fd, -1);
	ck_assert_int_ne(stat(self, &st), 0); /* gone after the stop */
	ig_conf_free(&cfg);
	remove_dir();
}
END_TEST

START_TEST(a_busy_port_is_refused_with_its_cause)
{
	make_dir();
	int busy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	ck_assert_int_eq(bind(busy, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(busy, 4), 0);
	char listen_at[64];
	snprintf(listen_at, sizeof(listen_at), "127.0.0.1:%d", port_of(busy));
	char *argv[] = {"infergate", "--listen", listen_at, "--backend", "http://127.0.0.1:30001", "--workers", "1"};
	struct ig_conf cfg;
	conf_of(&cfg, sizeof(argv) / sizeof(argv[0]), argv);
	struct ig_gw gw;
	capture();
	ck_assert_int_eq(ig_boot_init(&gw, &cfg), -1);
	ig_boot_free(&gw); /* released either way */
	char want[128];
	snprintf(want, sizeof(want), "listen: cannot bind %s: Address already in use", listen_at);
	ck_assert_ptr_nonnull(strstr(logged(), want));
	close(busy);
	ig_conf_free(&cfg);
	remove_dir();
}
END_TEST

START_TEST(bad_files_are_named)
{
	make_dir();
	/* a data_dir too long for a Unix socket's path */
	char data[200];
	int n = snprintf(data, sizeof(data), "%s/", dir);
	memset(data + n, 'd', 110);
	data[n + 110] = '\0';
	ck_assert_int_eq(mkdir(data, 0700), 0);
	char *argv[] = {"infergate", "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:30001", "--workers", "1",
			"--data-dir", data};
	struct ig_conf cfg;
	conf_of(&cfg, sizeof(argv) / sizeof(argv[0]), argv);
	struct ig_gw gw;
	capture();
	ck_assert_int_eq(ig_boot_init(&gw, &cfg), -1);
	ig_boot_free(&gw);
	ck_assert_ptr_nonnull(strstr(logged(), "is too long for the gateway's own socket in it"));
	ig_conf_free(&cfg);

	/* a key file that holds no key */
	char keys[128];
	snprintf(keys, sizeof(keys), "%s/api.keys", dir);
	FILE *f = fopen(keys, "w");
	fputs("not-a-hash\n", f);
	fclose(f);
	char *argv2[] = {"infergate", "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:30001", "--workers", "1",
			 "--api-keys-file", keys};
	conf_of(&cfg, sizeof(argv2) / sizeof(argv2[0]), argv2);
	capture();
	ck_assert_int_eq(ig_boot_init(&gw, &cfg), -1);
	ig_boot_free(&gw);
	const char *said = logged();
	ck_assert_msg(strstr(said, keys) != NULL, "%s", said);
	ck_assert_int_eq(gw.listen_fd, -1); /* nothing was bound */
	ig_conf_free(&cfg);
	remove_dir();
}
END_TEST

IG_CHECK_MAIN("boot", ports_stores_and_the_own_socket, a_busy_port_is_refused_with_its_cause, bad_files_are_named)
