"""Where things are in the repository, and the tools the checks run."""

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
REPO_CONFIG = REPO / "proxy.toml"
SYSTEMD_CONFIG = DEPLOY / "systemd" / "proxy.toml"
SYSTEMD_UNIT = DEPLOY / "systemd" / "replaygate.service"
DOCKER_CONFIG = DEPLOY / "docker" / "proxy.toml"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
HEALTHCHECK = DEPLOY / "docker" / "healthcheck"
KUBERNETES = DEPLOY / "kubernetes"
KUBERNETES_CONFIG = KUBERNETES / "proxy.toml"
KUBERNETES_TLS = DEPLOY / "kubernetes-tls"
KUBERNETES_TLS_CONFIG = KUBERNETES_TLS / "proxy.toml"
DASHBOARD = DEPLOY / "grafana" / "replaygate.json"
OPERATIONS_DOC = REPO / "docs" / "operations.md"

#: The Secret holding the provider keys, and the keys it may hold (proxy.toml's bearer_env names).
PROVIDER_KEYS_SECRET = "replaygate-provider-keys"


def read_toml(path):
    with open(path, "rb") as file:
        return tomllib.load(file)


def tool(name):
    """The path of `name` on PATH, or None."""
    return shutil.which(name)


def build_binary():
    """Builds the replaygate binary as `cargo build` does (the same target directory, so an
    earlier `cargo test` leaves nothing to do) and returns its path."""
    out = subprocess.run(
        ["cargo", "build", "--locked", "--bin", "replaygate",
         "--message-format=json-render-diagnostics"],
        cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    for line in out.splitlines():
        message = json.loads(line)
        if (message.get("reason") == "compiler-artifact"
                and message["target"]["name"] == "replaygate"
                and message.get("executable")):
            return message["executable"]
    raise RuntimeError("cargo build printed no replaygate executable")


def clean_env():
    """The environment for running the binary: no config or key variables of the caller."""
    env = dict(os.environ)
    for name in ("REPLAYGATE_CONFIG", "RUST_LOG", "OPENAI_API_KEY", "AWS_BEARER_TOKEN_BEDROCK"):
        env.pop(name, None)
    return env
