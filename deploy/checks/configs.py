"""The deployed configs: each is the repository's proxy.toml but for a few keys, and each loads."""

import copy
import subprocess
import tempfile
from pathlib import Path

from . import paths

#: Per deployed config, the keys (dotted) that may differ from the repository's proxy.toml.
ALLOWED_CHANGES = {
    paths.SYSTEMD_CONFIG: ["admin.listen", "state.path"],
    paths.DOCKER_CONFIG: ["server.listen", "admin.listen", "state.path"],
    paths.KUBERNETES_CONFIG: [
        "server.listen", "admin.listen", "log.format", "state.backend", "state.path", "state.max_disk_bytes", "state.url",
    ],
    paths.KUBERNETES_TLS_CONFIG: [
        "server.listen", "admin.listen", "log.format", "state.backend", "state.path", "state.max_disk_bytes", "state.url",
        "server.watch_config", "server.tls_cert_file", "server.tls_key_file",
    ],
}

#: What `config check` says of each config's state.
STATE_SUMMARY = {
    paths.SYSTEMD_CONFIG: "state embedded in /var/lib/replaygate,",
    paths.DOCKER_CONFIG: "state embedded in /var/lib/replaygate,",
    paths.KUBERNETES_CONFIG: "state in redis at replaygate-redis:6379,",
    paths.KUBERNETES_TLS_CONFIG: "state in redis at replaygate-redis:6379,",
}


def _lookup(table, dotted):
    node = table
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _assign(table, dotted, value):
    *parents, key = dotted.split(".")
    node = table
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(key, None)
    else:
        node[key] = value


def _changed(repo, deployed, keys):
    """`repo` with the given keys as `deployed` has them: equal to `deployed` exactly when
    nothing else differs."""
    expected = copy.deepcopy(repo)
    for dotted in keys:
        _assign(expected, dotted, _lookup(deployed, dotted))
    return expected


def _differences(a, b, prefix=""):
    keys = sorted(set(a) | set(b)) if isinstance(a, dict) and isinstance(b, dict) else []
    if not keys:
        return [prefix or "(top)"] if a != b else []
    out = []
    for key in keys:
        out += _differences(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else key)
    return out


def check_sources(report):
    """Every deployed config differs from the repository's only in its allowed keys, with the
    listen addresses each deployment needs."""
    report.section("deployed configs follow the repository's proxy.toml")
    repo = paths.read_toml(paths.REPO_CONFIG)
    for path, keys in ALLOWED_CHANGES.items():
        name = path.relative_to(paths.REPO)
        deployed = paths.read_toml(path)
        expected = _changed(repo, deployed, keys)
        report.expect(
            deployed == expected,
            f"{name} differs from proxy.toml only in {', '.join(keys)}",
            "also differs in " + ", ".join(_differences(deployed, expected)),
        )
    systemd = paths.read_toml(paths.SYSTEMD_CONFIG)
    report.expect(
        str(_lookup(systemd, "admin.listen") or "").startswith("127.0.0.1:"),
        "the systemd config's admin listener is on loopback",
    )
    for path in (paths.DOCKER_CONFIG, paths.KUBERNETES_CONFIG):
        config = paths.read_toml(path)
        for key in ("server.listen", "admin.listen"):
            report.expect(
                str(_lookup(config, key) or "").startswith("0.0.0.0:"),
                f"{path.relative_to(paths.REPO)} {key} is on every interface",
                f"got {_lookup(config, key)!r}",
            )
    kube = paths.read_toml(paths.KUBERNETES_CONFIG)
    report.equal(_lookup(kube, "state.backend"), "redis",
                 "the Kubernetes replicas share their state in Redis")


def check_loadable(report, binary):
    """`replaygate config check` accepts every config under deploy/."""
    report.section("replaygate config check on every config under deploy/")
    configs = sorted(paths.DEPLOY.rglob("*.toml"))
    report.expect(set(ALLOWED_CHANGES) <= set(configs), "the deployed configs are there")
    for path in configs:
        name = path.relative_to(paths.REPO)
        with tempfile.TemporaryDirectory() as tmp:
            checked = _with_tls_files(report, path, Path(tmp))
            if checked is None:
                continue
            run = subprocess.run(
                [binary, "config", "check", "--config", str(checked)],
                env=paths.clean_env(), capture_output=True, text=True, timeout=60,
            )
        if not report.expect(run.returncode == 0, f"config check {name}",
                             f"exit {run.returncode}: {run.stderr.strip()}"):
            continue
        if path in STATE_SUMMARY:
            report.expect(STATE_SUMMARY[path] in run.stdout,
                          f"{name}: {STATE_SUMMARY[path].rstrip(',')}", run.stdout.strip())


def _with_tls_files(report, path, tmp):
    """`path`, or when it names TLS files (which exist only where it is deployed) a copy in `tmp`
    naming a certificate and key made there with openssl; None (reported) without openssl."""
    server = paths.read_toml(path).get("server", {})
    cert, key = server.get("tls_cert_file"), server.get("tls_key_file")
    if cert is None:
        return path
    openssl = paths.tool("openssl")
    name = path.relative_to(paths.REPO)
    if openssl is None:
        report.skip(f"config check {name}", "openssl is not installed (it makes a certificate)")
        return None
    made_cert, made_key = tmp / "tls.crt", tmp / "tls.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-subj", "/CN=replaygate", "-days", "2", "-keyout", str(made_key), "-out", str(made_cert)],
        check=True, capture_output=True, timeout=60,
    )
    made_key.chmod(0o600)
    text = path.read_text().replace(f'"{cert}"', f'"{made_cert}"').replace(f'"{key}"', f'"{made_key}"')
    copy_path = tmp / "proxy.toml"
    copy_path.write_text(text)
    return copy_path
