"""The Debian package, installed for real into / and run as its unit runs it.

Builds the package from this tree with etc/build-deb.sh (or takes the one
named by $IG_DEB), then: lintian finds no error; `dpkg -i` installs it;
seven infergate-sim and the gateway run as infergate-sim@.service and
infergate.service would (their ExecStart lines, read from the installed unit
files, as the unit's user: systemd is not PID 1 here); 1,000 prompts go
through /usr/bin/infergate-bulk with a reload (the unit's ExecReload line)
in the middle, none failing; `dpkg -r` leaves only the conffile; `dpkg -P`
leaves nothing. The package is purged (and the user it made removed) when
the test ends, pass or fail, so the machine is left as it was found.

Needs root (it installs into /); as anyone else it says so and skips. The
package build takes a minute or two on 2 cores (DEB_BUILD_OPTIONS=nocheck:
`make check` runs the unit tests already); set IG_DEB to a built .deb to
skip it.
"""

import atexit
import glob
import json
import os
import pwd
import grp
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time

from harness import SRCDIR, Skip, http_json, free_port, run, start, test, wait_listening, wait_until

PKG = "infergate"
UNIT_DIRS = ["/lib/systemd/system", "/usr/lib/systemd/system"]
CONFIG = "/etc/infergate/infergate.json"
SIMS = 7
PROMPTS = 1000


def sh(*args, check=True, timeout=600, env=None):
    """Runs a command; (exit code, stdout + stderr). check: fail on nonzero."""
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                       env=env)
    out = p.stdout + p.stderr
    assert not check or p.returncode == 0, f"{' '.join(map(str, args))}: exit {p.returncode}\n{out[-4000:]}"
    return p.returncode, out


def installed():
    rc, out = sh("dpkg-query", "-W", "-f=${Status}", PKG, check=False)
    return rc == 0 and "installed" in out and "not-installed" not in out


def config_files_remain():
    rc, out = sh("dpkg-query", "-W", "-f=${Status}", PKG, check=False)
    return rc == 0 and "config-files" in out


def has_user(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def has_group(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


# --------------------------------------------------------------- the package

_deb = None


def package():
    """The .deb under test: $IG_DEB, or built once from this tree."""
    global _deb
    if _deb:
        return _deb
    if "ASAN_OPTIONS" in os.environ:  # make check-asan: the package is built without sanitizers
        raise Skip("the package is built from the tree without sanitizers: the plain make check runs this")
    if os.environ.get("IG_DEB"):
        _deb = os.environ["IG_DEB"]
        assert os.path.isfile(_deb), f"IG_DEB={_deb}: no such file"
        return _deb
    for tool, pkg in (("dpkg-buildpackage", "dpkg-dev"), ("dh", "debhelper"), ("fakeroot", "fakeroot")):
        assert shutil.which(tool), f"{tool} not found: apt-get install -y {pkg}"
    out_dir = tempfile.mkdtemp(prefix="ig-deb-")
    atexit.register(shutil.rmtree, out_dir, True)
    env = dict(os.environ, DEB_BUILD_OPTIONS="nocheck")
    t0 = time.monotonic()
    rc, out = sh("sh", os.path.join(SRCDIR, "etc", "build-deb.sh"), out_dir, env=env, timeout=1200)
    print(f"# package built in {time.monotonic() - t0:.0f} s", flush=True)
    debs = glob.glob(os.path.join(out_dir, f"{PKG}_*.deb"))
    assert len(debs) == 1, f"build-deb.sh made {debs}:\n{out[-2000:]}"
    _deb = debs[0]
    return _deb


def deb_paths(deb):
    """The paths the package holds, as dpkg -L will list them."""
    rc, out = sh("dpkg-deb", "-c", deb)
    paths = set()
    for line in out.splitlines():
        name = line.split(None, 5)[5].split(" -> ")[0]
        name = "/" + name.lstrip("./").rstrip("/")
        if name != "/":
            paths.add(name)
    return paths


def unit_file(name):
    for d in UNIT_DIRS:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    raise AssertionError(f"the package installs no {name} (looked in {', '.join(UNIT_DIRS)})")


def unit_service(path):
    """The [Service] settings of a unit file: {key: [values in order]}."""
    out, section = {}, None
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            k, v = line.split("=", 1)
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def command(line, env, instance=None, mainpid=None):
    """An Exec*= line as systemd would run it: prefixes dropped, %i/%I,
    $MAINPID and Environment= variables substituted, words split."""
    line = line.lstrip("-@:+!")
    if instance is not None:
        line = line.replace("%i", instance).replace("%I", instance)
    line = line.replace("%%", "%")
    if mainpid is not None:
        env = dict(env, MAINPID=str(mainpid))
    line = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: env.get(m.group(1) or m.group(2), m.group(0)), line)
    return shlex.split(line)


def unit_env(svc):
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    for v in svc.get("Environment", []):
        for word in shlex.split(v):
            k, _, val = word.partition("=")
            env[k] = val
    return env


def as_user(svc, argv):
    """argv run as the unit's User=/Group= (root without one), by setpriv so
    that the pid is the program's own (ExecReload's $MAINPID)."""
    user = (svc.get("User") or ["root"])[-1]
    if svc.get("DynamicUser", ["no"])[-1] in ("yes", "true", "1") and user == "root":
        user = "nobody"
    if user == "root":
        return argv
    group = (svc.get("Group") or [grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name])[-1]
    return ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups", "--"] + argv


def start_unit(name, instance=None, port=None):
    """Starts a service from its installed unit file; returns the Proc."""
    svc = unit_service(unit_file(name))
    env = unit_env(svc)
    assert svc.get("ExecStart"), f"{name}: no ExecStart"
    for pre in svc.get("ExecStartPre", []):
        argv = command(pre, env, instance)
        rc, out = sh(*as_user(svc, argv), check=not pre.startswith("-"), env=env)
    argv = command(svc["ExecStart"][-1], env, instance)
    p = start(as_user(svc, argv), env=env, port=port, timeout=15)
    p.unit, p.svc, p.env = name, svc, env
    return p


def sim_instance(n):
    """The instance name of infergate-sim@.service that listens on
    127.0.0.1:3000N (the template may take N or the port)."""
    svc = unit_service(unit_file("infergate-sim@.service"))
    env = unit_env(svc)
    for inst in (str(n), f"3000{n}", f"127.0.0.1:3000{n}"):
        argv = command(svc["ExecStart"][-1], env, inst)
        if any(a.endswith(f"127.0.0.1:3000{n}") or a == f"3000{n}" for a in argv):
            return inst
    raise AssertionError(f"infergate-sim@.service: no instance name makes it listen on 127.0.0.1:3000{n}: "
                         f"{svc['ExecStart'][-1]}")


def port_free(port):
    import socket
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


# -------------------------------------------------------------------- the test

@test
def package_has_no_lintian_errors():
    if not shutil.which("lintian"):
        raise AssertionError("lintian not found: apt-get install -y lintian")
    deb = package()
    rc, out = sh("lintian", "--fail-on", "error", deb, check=False, timeout=300)
    errors = [line for line in out.splitlines() if line.startswith("E:")]
    assert rc == 0 and not errors, f"lintian exit {rc}:\n{out}"
    for line in out.splitlines():
        if line[:2] in ("W:", "I:"):
            print(f"# lintian: {line}", flush=True)


@test
def installed_package_serves_reloads_removes_and_purges():
    if os.geteuid() != 0:
        raise Skip("refuses to run: it installs the package into / (dpkg -i), so it needs root")
    assert shutil.which("setpriv"), "setpriv not found: apt-get install -y util-linux"
    if installed() or config_files_remain():
        raise Skip(f"the package {PKG} is already on this machine (dpkg -s {PKG}): "
                   "the test would replace it; purge it first")
    # the unit's instances are fixed ports: wait a while for a rehearsal on
    # them (etc/quickstart.sh demo) to end
    deadline = time.monotonic() + 60
    while True:
        busy = [30000 + n for n in range(1, SIMS + 1) if not port_free(30000 + n)]
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert not busy, f"ports {busy} are taken: the sims of infergate-sim@.service listen there"
    deb = package()
    user_before, group_before = has_user(PKG), has_group(PKG)
    paths = deb_paths(deb)
    before = {p for p in paths if os.path.lexists(p)}   # shared directories: /usr/bin, /etc ...
    # Empty, they are put back afterwards (`infergate --check-config` of a
    # config whose data_dir is /var/lib/infergate makes it); with files in
    # them, a purge would remove someone's files.
    empty_dirs = {}
    for d in ("/etc/infergate", "/var/lib/infergate"):
        if os.path.lexists(d):
            assert os.path.isdir(d) and not os.listdir(d), \
                f"{d} exists and is not empty, without the package: a purge would remove it"
            st = os.stat(d)
            empty_dirs[d] = (st.st_mode & 0o7777, st.st_uid, st.st_gid)
    before -= set(empty_dirs)
    procs = []
    try:
        # -- install (dependencies from the archive when some are missing)
        rc, out = sh("dpkg", "-i", deb, check=False, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if rc != 0:
            sh("apt-get", "install", "-f", "-y", "-q", env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        assert installed(), f"dpkg -i did not install {PKG}:\n{out}"
        listed = set(sh("dpkg", "-L", PKG)[1].splitlines()) - {"/."}
        with open(f"/var/lib/dpkg/info/{PKG}.conffiles") as f:
            conffiles = set(f.read().split())
        assert CONFIG in conffiles, f"{CONFIG} is not a conffile: {conffiles}"
        for prog in ("infergate", "infergate-bulk", "infergate-sim"):
            assert os.access(f"/usr/bin/{prog}", os.X_OK), f"/usr/bin/{prog} not installed"
        u = pwd.getpwnam(PKG)
        assert u.pw_dir == "/var/lib/infergate", u
        assert u.pw_shell in ("/usr/sbin/nologin", "/bin/false"), f"the user {PKG} has a shell: {u.pw_shell}"
        assert u.pw_uid < 1000, f"{PKG} is not a system user: uid {u.pw_uid}"
        st = os.stat("/var/lib/infergate")
        assert st.st_uid == u.pw_uid, "/var/lib/infergate is not owned by infergate"
        rc, out = sh("/usr/bin/infergate", "--config", CONFIG, "--check-config")
        # enabled for systemd (dh_installsystemd); started only where systemd runs
        assert glob.glob("/etc/systemd/system/*.wants/infergate.service"), \
            "infergate.service is not enabled after dpkg -i"
        pid1 = sh("ps", "-p", "1", "-o", "comm=")[1].strip()
        print(f"# installed; PID 1 is {pid1!r}: the units' commands are run by hand", flush=True)

        # -- the seven simulators and the gateway, as their units run them
        for n in range(1, SIMS + 1):
            procs.append(start_unit("infergate-sim@.service", sim_instance(n), port=30000 + n))
        gw_port = free_port()
        conf = {
            "listen": f"127.0.0.1:{gw_port}",
            "backends": [f"http://127.0.0.1:{30000 + n}" for n in range(1, SIMS + 1)],
            "policy": "least-loaded",
            "health": {"path": "/health", "interval_ms": 200, "timeout_ms": 2000, "rise": 1, "fall": 3},
        }
        with open(CONFIG, "w") as f:
            json.dump(conf, f, indent=2)
        if pid1 == "systemd":
            # never here (a container, PID 1 is not systemd); on a real host
            # dpkg -i started the service on 8080: stop it, run ours by hand
            sh("systemctl", "stop", "infergate.service", check=False)
        gw = start_unit("infergate.service", port=gw_port)
        procs.append(gw)
        assert gw.svc.get("User", ["root"])[-1] == PKG, f"infergate.service runs as {gw.svc.get('User')}"
        with open(f"/proc/{gw.pid}/status") as f:
            uid = int(re.search(r"^Uid:\s+(\d+)", f.read(), re.M).group(1))
        assert uid == u.pw_uid, f"the gateway runs as uid {uid}, not {PKG}'s {u.pw_uid}"
        url = f"http://127.0.0.1:{gw_port}"
        wait_until(lambda: len([b for b in http_json("GET", url + "/health/backends")[2]["backends"]
                                if b.get("state") == "up"]) == SIMS, timeout=20, what="seven backends up")

        # -- 1,000 prompts, a reload in the middle
        work = tempfile.mkdtemp(prefix="ig-deb-run-")
        os.chmod(work, 0o755)
        corpus, results = os.path.join(work, "corpus.jsonl"), os.path.join(work, "results.jsonl")
        sh("/usr/bin/infergate-bulk", "generate", "--count", PROMPTS, "--seed", 7, "--output", corpus)
        bulk = subprocess.Popen(["/usr/bin/infergate-bulk", "--input", corpus, "--output", results,
                                 "--url", url, "--model", "sim-model", "--progress-interval-s", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def done_lines():
            try:
                with open(results) as f:
                    return sum(1 for _ in f)
            except OSError:
                return 0
        wait_until(lambda: done_lines() >= PROMPTS // 5 or bulk.poll() is not None, timeout=60,
                   what="a fifth of the prompts answered")
        reload_at = done_lines()
        conf["policy"] = "round-robin"
        with open(CONFIG, "w") as f:
            json.dump(conf, f, indent=2)
        assert gw.svc.get("ExecReload"), "infergate.service has no ExecReload"
        sh(*command(gw.svc["ExecReload"][-1], gw.env, mainpid=gw.pid))
        out, _ = bulk.communicate(timeout=300)
        assert reload_at < PROMPTS, f"the run ended before the reload ({reload_at} lines): nothing tested"
        print(f"# reloaded after {reload_at} of {PROMPTS} results", flush=True)
        assert bulk.returncode == 0, f"infergate-bulk exit {bulk.returncode}:\n{out[-3000:]}"
        with open(results) as f:
            rows = [json.loads(line) for line in f]
        assert len(rows) == PROMPTS, f"{len(rows)} result lines, want {PROMPTS}"
        assert len({r["custom_id"] for r in rows}) == PROMPTS, "a prompt answered twice"
        failed = [r for r in rows if r.get("error") or (r.get("response") or {}).get("status_code") != 200]
        assert not failed, f"{len(failed)} failed requests, the first: {failed[0]}"
        errors = results[:-len(".jsonl")] + ".errors.jsonl"
        assert not os.path.exists(errors) or os.path.getsize(errors) == 0, open(errors).read()[:2000]
        log = gw.read_log()
        assert re.search(r"reload: configuration from \S+ applied .*policy round-robin", log), log[-3000:]
        shutil.rmtree(work, ignore_errors=True)
        for p in procs:
            p.stop()
        procs.clear()

        # -- remove: only the conffile (and its directory) stays
        sh("dpkg", "-r", PKG)
        assert config_files_remain(), "after dpkg -r the package is not in state config-files"
        keep = set(conffiles) | {os.path.dirname(c) for c in conffiles}
        left = sorted(p for p in listed if os.path.lexists(p) and p not in before and p not in keep)
        assert not left, f"dpkg -r left files of the package: {left}"
        assert os.path.exists(CONFIG), f"dpkg -r removed the conffile {CONFIG}"
        with open(CONFIG) as f:
            assert json.load(f)["listen"] == conf["listen"], "the edited conffile was not kept"

        print(f"# after dpkg -r: {sorted(p for p in listed if os.path.lexists(p) and p not in before)}",
              flush=True)

        # -- purge: nothing stays
        sh("dpkg", "-P", PKG)
        left = sorted(p for p in listed | {"/etc/infergate", "/var/lib/infergate"}
                      if os.path.lexists(p) and p not in before)
        assert not left, f"dpkg -P left: {left}"
        assert not glob.glob("/etc/systemd/system/*.wants/infergate.service"), "still enabled after purge"
        rc, out = sh("dpkg-query", "-W", PKG, check=False)
        assert rc != 0, f"dpkg still knows {PKG} after purge: {out}"
    finally:
        for p in procs:
            p.stop()
        if installed() or config_files_remain():
            sh("dpkg", "-P", PKG, check=False)
        # The package keeps its user on purge (debian/postrm says why); the
        # test made it, so the test removes it.
        if not user_before and has_user(PKG):
            sh("deluser", "--system", "--quiet", PKG, check=False)
        if not group_before and has_group(PKG):
            sh("delgroup", "--system", "--quiet", PKG, check=False)
        for d in ("/etc/infergate", "/var/lib/infergate"):
            if os.path.exists(d):
                shutil.rmtree(d, ignore_errors=True)
            if d in empty_dirs:
                mode, uid, gid = empty_dirs[d]
                os.mkdir(d)
                os.chown(d, uid, gid)
                os.chmod(d, mode)


if __name__ == "__main__":
    run()
