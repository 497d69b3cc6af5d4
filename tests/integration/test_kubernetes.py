"""The Kubernetes manifests in etc/kubernetes, checked without a cluster or
kubectl: parsed as YAML (python3-yaml), with the structure Kubernetes
requires (apiVersion/kind/name, selectors that match their pods, probes and
Service ports that name a container port, volumes that exist, resources),
the gateway's ConfigMap validated by `infergate --check-config`, and the
commands of the bulk Jobs run for real on loopback: every shard script of
the Indexed Job against a gateway and simulators, SIGTERM passed on and
resumed, then the merge Job's command."""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile

from harness import (BUILDDIR, SRCDIR, binary, http, need_binary, run, start, start_gateway,
                     start_sims, test, wait_until)

try:
    import yaml
except ImportError:            # Debian: apt-get install python3-yaml
    yaml = None

KDIR = os.path.join(SRCDIR, "etc", "kubernetes")
API = {"Service": "v1", "ConfigMap": "v1", "PersistentVolumeClaim": "v1", "Pod": "v1",
       "Deployment": "apps/v1", "Job": "batch/v1"}
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def docs():
    """Every document of every etc/kubernetes/*.yaml, with its file name."""
    if yaml is None:
        raise AssertionError("python3-yaml is not installed (apt-get install -y python3-yaml)")
    out = []
    for name in sorted(os.listdir(KDIR)):
        if name.endswith((".yaml", ".yml")):
            with open(os.path.join(KDIR, name)) as f:
                for d in yaml.safe_load_all(f):
                    if d is not None:
                        out.append((name, d))
    assert out, f"no manifests in {KDIR}"
    return out


def one(kind, name=None):
    found = [d for _, d in docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [d["metadata"]["name"] for d in found])
    return found[0]


def pod_specs():
    """(kind/name, pod spec) of every workload."""
    for _, d in docs():
        if d["kind"] == "Pod":
            yield f"Pod/{d['metadata']['name']}", d["spec"]
        elif d["kind"] in ("Deployment", "Job"):
            yield f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"]


def infergate_pod_specs():
    """pod_specs() but Redis's (12-redis.yaml runs Redis's own image)."""
    return [(w, ps) for w, ps in pod_specs() if w != "Deployment/infergate-redis"]


def quantity(q):
    """A Kubernetes quantity ("500m", "2", "256Mi", "2Gi") as a number."""
    q = str(q)
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", q)
    assert m and (m.group(2) in units or m.group(2) == ""), f"not a quantity: {q!r}"
    return float(m.group(1)) * units.get(m.group(2), 1)


def container_port(container, port):
    """The containerPort a probe or targetPort names (by name or number), or None."""
    for p in container.get("ports", []):
        if port == p.get("name") or port == p["containerPort"]:
            return p["containerPort"]
    return None


def gateway_config():
    cm = one("ConfigMap", "infergate-config")
    return json.loads(cm["data"]["infergate.json"])


def shard_job():
    jobs = [d for _, d in docs() if d["kind"] == "Job" and d["spec"].get("completionMode") == "Indexed"]
    assert len(jobs) == 1, jobs
    return jobs[0]


def merge_job():
    jobs = [d for _, d in docs() if d["kind"] == "Job" and d["spec"].get("completionMode") != "Indexed"]
    assert len(jobs) == 1, jobs
    return jobs[0]


def shard_script(job):
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["/bin/sh", "-c"], c["command"]
    return c, c["args"][0]


SHARD_FLAG = re.compile(r'--shard\s+"?\$(?:\{|\()JOB_COMPLETION_INDEX(?:\}|\))/(\d+)"?')


# ------------------------------------------------------------------ structure

@test
def every_document_has_api_version_kind_and_name():
    seen = set()
    for fname, d in docs():
        kind = d.get("kind")
        assert kind in API, f"{fname}: unexpected kind {kind!r}"
        assert d.get("apiVersion") == API[kind], f"{fname}: {kind} needs apiVersion {API[kind]}"
        name = d.get("metadata", {}).get("name")
        assert isinstance(name, str) and DNS_LABEL.match(name), f"{fname}: bad metadata.name {name!r}"
        assert (kind, name) not in seen, f"{fname}: {kind}/{name} defined twice"
        seen.add((kind, name))
        for k, v in d["metadata"].get("labels", {}).items():
            assert isinstance(v, str) and len(v) <= 63, f"{fname}: label {k}={v!r} must be a short string"
        assert "spec" in d or "data" in d, f"{fname}: {kind}/{name} has neither spec nor data"
    kinds = {k for k, _ in seen}
    assert kinds == set(API), f"missing kinds: {set(API) - kinds}"


@test
def gateway_deployment_selector_probes_ports_and_service():
    dep = one("Deployment", "infergate")
    spec, tpl = dep["spec"], dep["spec"]["template"]
    labels = tpl["metadata"]["labels"]
    sel = spec["selector"]["matchLabels"]
    assert sel and all(labels.get(k) == v for k, v in sel.items()), (sel, labels)
    (c,) = tpl["spec"]["containers"]
    ready, live = c["readinessProbe"], c["livenessProbe"]
    assert ready["httpGet"]["path"] == "/health", ready
    assert container_port(c, ready["httpGet"]["port"]) is not None, "readiness probe port is no container port"
    # /health is 503 while no backend is up: a liveness probe on it would
    # restart every gateway during a backend outage
    assert live.get("httpGet", {}).get("path") != "/health", live
    live_port = (live.get("httpGet") or live.get("tcpSocket"))["port"]
    assert container_port(c, live_port) is not None, "liveness probe port is no container port"
    port = container_port(c, "http")
    assert port == int(gateway_config()["listen"].rsplit(":", 1)[1]), "the config listens elsewhere"
    assert gateway_config()["listen"].startswith("0.0.0.0:"), "a pod must listen on all addresses"
    assert c["command"][1:3] == ["--config", "/etc/infergate/infergate.json"], c["command"]
    # each replica names itself after its pod in the cluster: names must differ among live gateways
    assert c["command"][3:] == ["--cluster-name", "$(POD_NAME)"], c["command"]
    env = {e["name"]: e for e in c.get("env", [])}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name", env
    # the Service reaches those pods on that port
    svc = one("Service", "infergate")
    assert svc["spec"].get("clusterIP") != "None"
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), svc["spec"]["selector"]
    for p in svc["spec"]["ports"]:
        assert container_port(c, p["targetPort"]) == port, p
    # shutdown_grace_s must fit in the pod's grace period
    assert tpl["spec"]["terminationGracePeriodSeconds"] > gateway_config().get("shutdown_grace_s", 30)


@test
def the_replicas_share_a_redis_the_config_names():
    # the ConfigMap's cluster.redis_url names the Redis Service and its port, and the
    # Deployment's replicas (2) each get a name of their own (above)
    url = gateway_config()["cluster"]["redis_url"]
    m = re.fullmatch(r"redis://([\w.-]+):(\d+)/(\d+)", url)
    assert m, url
    svc = one("Service", m.group(1))
    assert any(p["port"] == int(m.group(2)) for p in svc["spec"]["ports"]), svc["spec"]["ports"]
    dep = one("Deployment", m.group(1))
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert "--save" in c["command"] and "--appendonly" in c["command"], c["command"]   # soft state only
    assert one("Deployment", "infergate")["spec"]["replicas"] >= 2


@test
def every_container_has_resource_requests_and_limits():
    for what, ps in pod_specs():
        for c in ps["containers"]:
            r = c.get("resources", {})
            req, lim = r.get("requests", {}), r.get("limits", {})
            assert "cpu" in req and "memory" in req, f"{what}/{c['name']}: requests need cpu and memory"
            assert "memory" in lim, f"{what}/{c['name']}: no memory limit"
            for k in lim:
                assert quantity(lim[k]) >= quantity(req.get(k, 0)), f"{what}/{c['name']}: {k} limit < request"
            assert c.get("image"), f"{what}/{c['name']}: no image"


@test
def volumes_referenced_exist():
    cms = {d["metadata"]["name"]: d for _, d in docs() if d["kind"] == "ConfigMap"}
    pvcs = {d["metadata"]["name"]: d for _, d in docs() if d["kind"] == "PersistentVolumeClaim"}
    for what, ps in pod_specs():
        vols = {v["name"]: v for v in ps.get("volumes", [])}
        for c in ps["containers"]:
            for m in c.get("volumeMounts", []):
                assert m["name"] in vols, f"{what}: mount {m['name']} has no volume"
        for v in vols.values():
            if "configMap" in v:
                cm = cms.get(v["configMap"]["name"])
                assert cm, f"{what}: ConfigMap {v['configMap']['name']} is not defined"
                for item in v["configMap"].get("items", []):
                    assert item["key"] in cm["data"], f"{what}: {item['key']} not in the ConfigMap"
            elif "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in pvcs, f"{what}: no PVC {v}"
            else:
                raise AssertionError(f"{what}: unexpected volume {v}")
    # the config file is where the gateway is told to read it
    dep = one("Deployment", "infergate")["spec"]["template"]["spec"]
    m, data = dep["containers"][0]["volumeMounts"]
    (item,) = [v for v in dep["volumes"] if v["name"] == m["name"]][0]["configMap"]["items"]
    assert os.path.join(m["mountPath"], item["path"]) == "/etc/infergate/infergate.json"
    # the Files and Batch APIs' data_dir is one volume every replica mounts (batches move between them)
    (vol,) = [v for v in dep["volumes"] if v["name"] == data["name"]]
    assert pvcs[vol["persistentVolumeClaim"]["claimName"]]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert gateway_config()["data_dir"] == data["mountPath"], (gateway_config().get("data_dir"), data)
    # shards on several nodes write the one volume at once
    for pvc in pvcs.values():
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"], pvc["spec"]
        assert quantity(pvc["spec"]["resources"]["requests"]["storage"]) > 0


@test
def headless_service_and_discovery_config_agree():
    svc = one("Service", "sglang-headless")
    assert svc["spec"]["clusterIP"] == "None", "DNS must list every pod: a headless Service"
    (port,) = svc["spec"]["ports"]
    assert port["port"] == 30000, port
    cfg = gateway_config()
    disc = [b["discover"] for b in cfg["backends"] if isinstance(b, dict) and "discover" in b]
    assert disc == [f"http://sglang-headless:{port['port']}"], cfg["backends"]
    assert cfg["discover_interval_s"] == 10
    assert cfg["health"]["path"] == "/health"


@test
def configmap_passes_infergate_check_config():
    need_binary("infergate")
    cfg = gateway_config()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    try:
        # --check-config validates and prints; it opens no socket and resolves no name
        p = subprocess.run([binary("infergate"), "--check-config", "--config", f.name], capture_output=True,
                           text=True, timeout=10)
    finally:
        os.unlink(f.name)
    assert p.returncode == 0, (p.returncode, p.stderr)
    eff = json.loads(p.stdout)
    assert eff["listen"] == "0.0.0.0:8080"
    # the ConfigMap's discover entry names the headless Service, as the gateway reads it
    assert eff["backends"] == [{"discover": "http://sglang-headless:30000", "weight": 1, "max_inflight": 0}], \
        eff["backends"]
    assert eff["discover_interval_s"] == 10
    assert eff["load_source"] == "backend"


@test
def indexed_job_shards_agree_with_merge():
    job = shard_job()
    spec = job["spec"]
    n = spec["completions"]
    assert isinstance(n, int) and n >= 1 and 1 <= spec["parallelism"] <= n, spec
    ps = spec["template"]["spec"]
    assert ps["restartPolicy"] == "Never", "podFailurePolicy needs restartPolicy Never"
    c, script = shard_script(job)
    for rule in spec.get("podFailurePolicy", {}).get("rules", []):
        if "onExitCodes" in rule:
            assert rule["onExitCodes"]["containerName"] == c["name"], rule
            assert rule["onExitCodes"]["values"] == [2], "only exit 2 (preflight) is hopeless"
    shard = SHARD_FLAG.findall(script)
    assert shard == [str(n)], f"--shard K/N with N = completions ({n}): {shard}"
    assert "--resume" in script, "a retried pod must continue its shard"
    assert re.search(r"--output \"\$out\.jsonl\"", script) and "out=/data/results/shard-${JOB_COMPLETION_INDEX}" in script
    url = {e["name"]: e["value"] for e in c["env"]}["INFERGATE_URL"]
    svc = one("Service", "infergate")
    assert url == f"http://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}", url
    assert "$(" not in script.replace("$(cat", ""), "no $(VAR): Kubernetes would expand it first"
    # the merge Job names the same N files and the same corpus
    m = merge_job()
    cmd = m["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:2] == ["infergate-bulk", "merge"], cmd
    assert cmd[cmd.index("--shards") + 1] == str(n), cmd
    assert cmd[cmd.index("--input") + 1] == "/data/corpus.jsonl" and "--input /data/corpus.jsonl" in script
    files = [a for a in cmd if a.startswith("/data/results/")]
    assert files == [f"/data/results/shard-{k}.jsonl" for k in range(n)], files
    assert m["spec"]["backoffLimit"] == 0
    assert m["spec"]["template"]["spec"]["restartPolicy"] == "Never"


@test
def containerfile_installs_the_debian_package_on_debian_12():
    with open(os.path.join(KDIR, "Containerfile")) as f:
        text = f.read()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert froms and all(re.search(r"debian:12", x) for x in froms), froms
    with open(os.path.join(SRCDIR, "etc", "quickstart.sh")) as f:
        quick = set(re.search(r'DEPS="([^"]*)"', f.read()).group(1).split())
    build_pkgs = re.search(r"install -y --no-install-recommends\s*\\\n(.*?)\n \&\&", text, re.S).group(1)
    pkgs = set(build_pkgs.replace("\\", " ").split())
    assert pkgs <= quick, f"build packages not in the quick start: {pkgs - quick}"
    with open(os.path.join(SRCDIR, "debian", "control")) as f:
        control = f.read()
    build_deps = re.search(r"^Build-Depends:(.*?)^\S", control, re.S | re.M).group(1)
    for dep in re.findall(r"([a-z0-9][a-z0-9.+-]+)", re.sub(r"\(.*?\)", "", build_deps)):
        dep = "debhelper" if dep == "debhelper-compat" else dep
        assert dep in pkgs, f"debian/control's Build-Depends {dep} is not installed by the Containerfile"
    # the package is built as `make deb` builds it, and installed with apt
    assert "etc/build-deb.sh" in text and re.search(r"apt-get install .*\n?.*infergate_\*\.deb", text)
    uid = re.search(r"^USER (\d+)", text, re.M).group(1)
    for what, ps in infergate_pod_specs():
        assert str(ps["securityContext"]["runAsUser"]) == uid, f"{what} runs as another user than the image"
    # etc/container/build-image.sh makes the same image without a registry
    with open(os.path.join(SRCDIR, "etc", "container", "build-image.sh")) as f:
        script = f.read()
    assert f"--change 'USER {uid}:{uid}'" in script and f"uid={uid}" in script
    image = re.search(r"image=\$\{2:-(\S+)\}", script).group(1)
    for what, ps in infergate_pod_specs():
        for c in ps["containers"]:
            assert c["image"] == image, f"{what}/{c['name']}: image {c['image']}, build-image.sh makes {image}"


# ------------------------------------------------------- the Jobs, run for real

def job_env(c, gw, k=None):
    env = dict(os.environ)
    env.update({e["name"]: on_loopback(e["value"], "", gw) for e in c.get("env", [])})
    env["PATH"] = BUILDDIR + os.pathsep + env["PATH"]
    if k is not None:
        env["JOB_COMPLETION_INDEX"] = str(k)
    return env


def on_loopback(text, data, gw):
    """The Service URL becomes the local gateway, /data a temp directory."""
    text = text.replace("http://infergate:8080", gw.url)
    return text.replace("/data", data) if data else text


@test
def shard_scripts_and_merge_command_run_on_loopback():
    """Runs the Indexed Job's script once per index (as the Job's pods would,
    at once) and then the merge Job's command, with /data a temp directory
    and the Service URL the local gateway."""
    need_binary("infergate")
    if not shutil.which("curl"):
        raise AssertionError("curl is not installed (apt-get install -y curl): the script waits for the gateway with it")
    job = shard_job()
    c, script = shard_script(job)
    n = job["spec"]["completions"]
    model = {e["name"]: e["value"] for e in c["env"]}["MODEL"]
    sims = start_sims(7, "--model", model, "--tokens-per-second", "0", "--ttft-ms", "0")
    gw = start_gateway(sims)
    data = tempfile.mkdtemp(prefix="ig-k8s-")
    try:
        subprocess.run([binary("infergate-bulk"), "generate", "--count", "2000", "--seed", "9", "--output",
                        os.path.join(data, "corpus.jsonl")], check=True, capture_output=True)
        body = on_loopback(script, data, gw)
        procs = [start(["/bin/sh", "-c", body], env=job_env(c, gw, k), stdout=subprocess.DEVNULL)
                 for k in range(n)]
        for k, p in enumerate(procs):
            assert p.wait(timeout=120) == 0, (k, p.returncode, p.read_log()[-1500:])
        for k in range(n):
            s = json.load(open(os.path.join(data, "results", f"shard-{k}.summary.json")))
            assert s["selected"] == 2000 // n and s["complete"] is True, (k, s)
        m = merge_job()["spec"]["template"]["spec"]["containers"][0]
        cmd = [on_loopback(a, data, gw) for a in m["command"]]
        p = subprocess.run(cmd, capture_output=True, text=True, env=job_env(m, gw), timeout=60)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        assert "exact: each of the 2000 ids" in p.stdout, p.stdout
        with open(os.path.join(data, "merged.jsonl")) as f:
            assert len({json.loads(line)["custom_id"] for line in f}) == 2000
        # the merge Job can be applied again (--force): same result
        p = subprocess.run(cmd, capture_output=True, text=True, env=job_env(m, gw), timeout=60)
        assert p.returncode == 0, p.stderr
    finally:
        shutil.rmtree(data, ignore_errors=True)


@test
def shard_script_passes_sigterm_on_and_the_retry_resumes():
    """Kubernetes stops a pod with SIGTERM to PID 1, here the shell: the
    script passes it to infergate-bulk, which lets its requests finish and
    exits 3 (the Job retries); the retry resumes and completes the shard."""
    need_binary("infergate")
    if not shutil.which("curl"):
        raise AssertionError("curl is not installed (apt-get install -y curl): the script waits for the gateway with it")
    job = shard_job()
    c, script = shard_script(job)
    model = {e["name"]: e["value"] for e in c["env"]}["MODEL"]
    # paced: 20 tokens at 200 tokens/s, 0.1 s per request
    sims = start_sims(7, "--model", model, "--tokens-per-second", "200", "--ttft-ms", "0",
                      "--output-tokens", "20")
    gw = start_gateway(sims)
    data = tempfile.mkdtemp(prefix="ig-k8s-")
    try:
        n = job["spec"]["completions"]
        subprocess.run([binary("infergate-bulk"), "generate", "--count", str(3000 * n), "--seed", "4", "--output",
                        os.path.join(data, "corpus.jsonl")], check=True, capture_output=True)
        body = on_loopback(script, data, gw)
        out = os.path.join(data, "results", "shard-0.jsonl")
        p = start(["/bin/sh", "-c", body], env=job_env(c, gw, 0), stdout=subprocess.DEVNULL)
        wait_until(lambda: p.poll() is not None or (os.path.exists(out) and os.path.getsize(out) > 50 * 400),
                   timeout=30, interval=0.01, what="shard 0 writing")
        os.kill(p.pid, signal.SIGTERM)          # the shell only, as the kubelet does with PID 1
        rc = p.wait(timeout=60)
        assert rc == 3, (rc, p.read_log()[-1500:])
        assert "stopping" in p.read_log() or "signal" in p.read_log(), p.read_log()[-1500:]
        with open(out) as f:
            before = sum(1 for _ in f)
        assert 0 < before < 3000, before
        p = start(["/bin/sh", "-c", body], env=job_env(c, gw, 0), stdout=subprocess.DEVNULL)
        assert p.wait(timeout=120) == 0, p.read_log()[-1500:]
        s = json.load(open(os.path.join(data, "results", "shard-0.summary.json")))
        assert s["resumed_ok"] == before and s["resumed_ok"] + s["ok"] == 3000, (before, s)
    finally:
        shutil.rmtree(data, ignore_errors=True)


run()
