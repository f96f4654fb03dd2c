"""The container image, built with podman and exercised without a container runtime.

No registry need be reachable: the runtime stage's base is a Debian made here with debootstrap
and imported into podman once (kept by its name for later runs), and the Dockerfile's `build`
stage is replaced by the binary already built (`--build-context build=DIR`). `podman run` needs
an OCI runtime that many CI machines cannot start, so the image is exercised from its mounted
filesystem: `chroot --userspec` runs the image's own binary, as the image's user, on the image's
libc, config and state directory. See deploy/docker/README.md.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path
from typing import NamedTuple

from . import docker, live, paths

#: Where the image's config is written for the check (moved to loopback ports), in the image.
CHECK_DIR = "/run/replaygate-deploy-check"

#: A replayed OpenAI web-search item for a model the image's config routes to Bedrock (the
#: README's first example): refused with `namespaced` before anything is sent upstream.
FOREIGN = json.dumps({
    "model": "openai.gpt-oss-120b",
    "input": [{"type": "message", "role": "user", "content": "Latest APAC sales?"},
              {"type": "openai:web_search_call", "id": "ws_001", "status": "completed",
               "action": {"type": "search", "query": "apac sales report"}}],
}).encode()

JSON = {"content-type": "application/json"}


def _podman(*args, timeout=120):
    """podman ARGS; (exit code, stdout, stderr), 124 when it took longer than `timeout`."""
    try:
        run = subprocess.run([paths.tool("podman"), *args], capture_output=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"podman {args[0]}: no end within {timeout} s"
    return run.returncode, run.stdout.decode("utf-8", "replace").strip(), \
        run.stderr.decode("utf-8", "replace").strip()


def _os_release():
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return {}
    return dict(line.split("=", 1) for line in lines if "=" in line)


def _release(dockerfile_base):
    """The Debian release of the local base: this machine's when it runs Debian (the binary was
    linked with its glibc), else the one the Dockerfile's base names (debian:RELEASE-slim)."""
    release = _os_release()
    if release.get("ID") == "debian" and release.get("VERSION_CODENAME"):
        return release["VERSION_CODENAME"].strip('"')
    return dockerfile_base.split(":", 1)[1].split("-", 1)[0]


def _dockerfile_arg(name):
    for word, args in docker.instructions(paths.DOCKERFILE.read_text()):
        if word == "ARG" and args.startswith(f"{name}="):
            return args.split("=", 1)[1]
    return None


def ensure_base(report, release):
    """The local base image's name, made with debootstrap unless podman already holds it;
    None when it could not be made."""
    name = f"localhost/debian-base:{release}"
    if _podman("image", "exists", name)[0] == 0:
        report.expect(True, f"local base {name}: already made (podman rmi it to remake)")
        return name
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="replaygate-base-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        try:
            run = subprocess.run([paths.tool("debootstrap"), "--variant=minbase", release,
                                  str(rootfs)], capture_output=True, text=True, timeout=900)
            ok, output = run.returncode == 0, (run.stdout + run.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            ok, output = False, "no end within 900 s"
        if not report.expect(ok, f"debootstrap --variant=minbase {release}", output):
            return None
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        try:
            imported = subprocess.run([paths.tool("podman"), "import", "-", name],
                                      stdin=tar.stdout, capture_output=True, text=True,
                                      timeout=600)
        finally:
            tar.stdout.close()
            tar.wait()
    return name if report.expect(
        imported.returncode == 0 and tar.returncode == 0,
        f"local base {name}: debootstrap and podman import in "
        f"{time.monotonic() - started:.0f} s", imported.stderr[-2000:]) else None


def build(report, binary, base, tag):
    """podman build of deploy/docker/Dockerfile from `base`, with `binary` standing in for
    the build stage. True when it built."""
    with tempfile.TemporaryDirectory(prefix="replaygate-binary-") as context:
        target = Path(context) / "usr" / "local" / "bin"
        target.mkdir(parents=True)
        shutil.copy2(binary, target / "replaygate")
        started = time.monotonic()
        # Chroot isolation: RUN steps without an OCI runtime (crun refuses hybrid cgroups, and
        # runtimes may not set their rlimits on these machines). Docker format keeps HEALTHCHECK.
        code, out, err = _podman(
            "build", "--isolation", "chroot", "--format", "docker",
            "--build-arg", f"BASE={base}", "--build-context", f"build={context}",
            "-f", str(paths.DOCKERFILE), "-t", tag, str(paths.REPO), timeout=900)
    return report.expect(code == 0, f"podman build --build-arg BASE={base} "
                         f"--build-context build=(the built binary) in "
                         f"{time.monotonic() - started:.0f} s", (out + "\n" + err)[-3000:])


def _user(root, spec):
    """(uid, gid) of the image's USER `spec` (NAME or UID, optionally :GROUP) by the image's
    /etc/passwd and /etc/group; None when the image does not know it."""
    user, _, group = spec.partition(":")
    entries = [line.split(":") for line in (root / "etc/passwd").read_text().splitlines()
               if line.count(":") >= 6]
    match = [e for e in entries if user in (e[0], e[2])]
    if not match:
        return None
    uid, gid = int(match[0][2]), int(match[0][3])
    if group:
        groups = [line.split(":") for line in (root / "etc/group").read_text().splitlines()
                  if line.count(":") >= 3]
        named = [g for g in groups if group in (g[0], g[2])]
        if not named:
            return None
        gid = int(named[0][2])
    return uid, gid


def _ids(pid):
    """(real uid, real gid) of a running process."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    field = {line.split(":")[0]: line.split()[1] for line in status if ":" in line}
    return int(field["Uid"]), int(field["Gid"])


def _files(directory):
    return sorted(p for p in Path(directory).rglob("*") if p.is_file())


class Mounted(NamedTuple):
    """The image's filesystem and how its own binary is run there."""

    #: How Serving enters it: chroot as the image's user, with the image's environment.
    inside: live.Inside
    #: The image's entrypoint (the binary, as seen inside).
    entry: list
    uid: int
    gid: int
    #: The state directory, as the image's config names it and as seen from here.
    state_path: str
    state_dir: Path
    #: The image's HEALTHCHECK test, ["CMD", program, addr, path].
    healthcheck: list


def exercise(report, root, config, tmp):
    """Runs the image mounted at `root` by its own entrypoint, user, environment and config."""
    user = _user(root, config["User"])
    if not report.expect(user, f"USER {config['User']} is in the image's /etc/passwd"):
        return
    uid, gid = user
    report.expect(uid != 0 and gid != 0, f"the image runs as {uid}:{gid}, not root")
    env = dict(item.split("=", 1) for item in config["Env"])
    chroot = [paths.tool("chroot"), f"--userspec={uid}:{gid}", f"--groups={gid}", str(root)]
    entry = config["Entrypoint"]

    check = subprocess.run(chroot + entry + ["config", "check"], env=env, capture_output=True,
                           text=True, timeout=60)
    report.expect(check.returncode == 0 and check.stdout.startswith("config ok"),
                  f"`config check` of the image's REPLAYGATE_CONFIG "
                  f"({env.get('REPLAYGATE_CONFIG')})", check.stdout + check.stderr)
    config_text = (root / env["REPLAYGATE_CONFIG"].lstrip("/")).read_text()
    state = tomllib.loads(config_text)["state"]
    report.equal(state.get("backend"), "embedded", "the image's config keeps an embedded store")
    state_dir = root / state["path"].lstrip("/")
    report.expect(state_dir.is_dir() and state_dir.stat().st_uid == uid,
                  f"the state directory {state['path']} belongs to {uid}")
    report.expect(not _files(state_dir), f"{state['path']} starts empty", f"{_files(state_dir)}")

    # The image's config, moved to loopback ports and local providers, written into the image.
    check_dir = root / CHECK_DIR.lstrip("/")
    check_dir.mkdir(parents=True, exist_ok=True)
    check_dir.chmod(0o755)
    inside = live.Inside(chroot, check_dir / "proxy.toml", f"{CHECK_DIR}/proxy.toml", env)
    image = Mounted(inside, entry, uid, gid, state["path"], state_dir,
                    config.get("Healthcheck", {}).get("Test", []))
    provider = live.FakeProvider()
    try:
        if _first_run(report, image, config_text, tmp, provider.url):
            _second_run(report, image, config_text, tmp, provider.url)
    finally:
        provider.close()


def _first_run(report, image, config_text, tmp, provider_url):
    """Serves, refuses, records; True when it served."""
    serving, healthy = live.serve(image.entry[0], config_text, tmp, provider_url, image.inside)
    try:
        if not report.expect(healthy, "serve (in the image, as its user): /healthz answers 200",
                             serving.output()):
            return False
        report.equal(_ids(serving.process.pid), (image.uid, image.gid),
                     "the server runs as the image's user")
        report.equal(live.http("GET", serving.url("/readyz"))[0], 200,
                     "/readyz answers 200 (the embedded store opened)")
        test = image.healthcheck
        if report.expect(test[:1] == ["CMD"] and len(test) == 4,
                         "the image keeps its HEALTHCHECK (docker format)", f"{test}"):
            run = subprocess.run(
                image.inside.command + [test[1], f"127.0.0.1:{serving.admin}", test[3]],
                env=image.inside.env, capture_output=True, text=True, timeout=10)
            report.equal(run.returncode, 0, "the image's health check passes (the image's bash)")
        status, body = live.http("POST", serving.url("/v1/responses", admin=False), FOREIGN, JSON)
        report.expect(status == 422 and '"code":"namespaced"' in body
                      and "provider `bedrock` does not accept" in body,
                      "an openai:web_search_call item for openai.gpt-oss-120b: 422 namespaced",
                      f"{status} {body[:500]}")
        status, body = live.http("POST", serving.url("/v1/responses", admin=False),
                                 json.dumps({"model": "gpt-5", "input": "hi"}).encode(), JSON)
        report.equal(status, 200, "a request for gpt-5 is answered by the (fake) openai provider")
        files = _files(image.state_dir)
        report.expect(files and all(f.stat().st_uid == image.uid for f in files),
                      f"the store's files are in {image.state_path} and belong to {image.uid} "
                      f"({len(files)} files)", f"{[(str(f), f.stat().st_uid) for f in files]}")
        return True
    finally:
        report.equal(serving.stop(), 0, "SIGTERM: serve exits 0")


def _second_run(report, image, config_text, tmp, provider_url):
    """A restart on the same directory finds what the first run recorded."""
    serving, healthy = live.serve(image.entry[0], config_text, tmp, provider_url, image.inside)
    try:
        if not report.expect(healthy, "serve again on the same state directory",
                             serving.output()):
            return
        again = json.dumps({"model": "openai.gpt-oss-120b", "input": "and now?",
                            "previous_response_id": json.loads(live.ANSWER)["id"]}).encode()
        status, body = live.http("POST", serving.url("/v1/responses", admin=False), again, JSON)
        report.expect(status == 422 and '"code":"foreign_previous_response"' in body,
                      "after the restart the ledger still knows the openai response: "
                      "422 foreign_previous_response for bedrock", f"{status} {body[:500]}")
    finally:
        report.equal(serving.stop(), 0, "SIGTERM: serve exits 0")


def check(report, binary):
    report.section("the container image (podman build from a local Debian, run by chroot)")
    missing = [tool for tool in ("podman", "debootstrap", "chroot") if paths.tool(tool) is None]
    if missing:
        report.skip("build and run the image",
                    f"{', '.join(missing)} not installed (Debian: podman debootstrap)")
        return
    if os.geteuid() != 0:
        report.skip("build and run the image", "needs root (debootstrap, podman mount, chroot)")
        return
    dockerfile_base = _dockerfile_arg("BASE") or ""
    if not report.expect(re.fullmatch(r"debian:[a-z]+-slim", dockerfile_base),
                         "the Dockerfile's BASE argument defaults to a public Debian slim image",
                         f"ARG BASE={dockerfile_base}"):
        return
    base = ensure_base(report, _release(dockerfile_base))
    if base is None:
        return
    tag = f"localhost/replaygate:deploy-check-{os.getpid()}"
    container = mounted = None
    try:
        if not build(report, binary, base, tag):
            return
        code, out, err = _podman("image", "inspect", "--format", "json", tag)
        if not report.expect(code == 0, "podman image inspect", err):
            return
        inspected = json.loads(out)[0]
        config = dict(inspected["Config"], Healthcheck=inspected.get("Healthcheck") or {})
        code, container, err = _podman("create", tag)
        if not report.expect(code == 0, "podman create", err):
            container = None
            return
        code, mounted, err = _podman("mount", container)
        if not report.expect(code == 0, "podman mount", err):
            mounted = None
            return
        with tempfile.TemporaryDirectory(prefix="replaygate-image-") as tmp:
            exercise(report, Path(mounted), config, tmp)
    finally:
        if mounted:
            _podman("umount", container)
        if container:
            _podman("rm", "--volumes", "--force", container)
        _podman("rmi", "--force", tag)
