"""The built binary serving the deployed configs on loopback: the probes' paths answer as the
manifests expect, the container's health check works, SIGHUP reloads, SIGTERM drains, and
/metrics is scraped for the dashboard's check."""

import json
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import NamedTuple

from . import paths

#: A body the gate refuses for Bedrock (an OpenAI-only item), answered without any upstream.
FOREIGN = (b'{"model":"m","input":[{"role":"user","content":"hi"},'
           b'{"type":"openai:web_search_call","id":"ws_1","status":"completed"}]}')

#: A body the gate allows, declaring a tool whose `city` must be a string.
WITH_TOOL = json.dumps({
    "model": "m", "input": "the weather in Paris?",
    "tools": [{"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
}).encode()

#: The fake provider's answer: a call whose arguments do not fit that tool's schema, and the
#: usage it reports (so the usage families have series to scrape).
ANSWER = json.dumps({
    "id": "resp_deploy_check_0001", "object": "response", "status": "completed", "model": "m",
    "output": [{"type": "function_call", "id": "fc_deploy_check_0001",
                "call_id": "call_deploy_check_0001", "name": "get_weather",
                "arguments": "{\"city\": 5}", "status": "completed"}],
    "usage": {"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0},
              "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0}},
}).encode()

# Loopback only, and never through a proxy from the environment.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FakeProvider:
    """A provider on a loopback port answering every POST with ANSWER."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(ANSWER)))
                self.end_headers()
                self.wfile.write(ANSWER)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=5):
    """(status, body text); status 0 when nothing answered."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _HTTP.open(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def _replace_one(text, pattern, replacement):
    new, count = re.subn(pattern, replacement, text, flags=re.MULTILINE)
    if count != 1:
        raise ValueError(f"{pattern!r} matched {count} times")
    return new


class Serving:
    """`replaygate serve` of a deployed config, moved to free loopback ports.

    `inside` runs it in another root filesystem (the container image's check): an Inside naming
    the command that enters it, where the config is written and how the binary sees that file,
    and the environment the binary gets; by default the binary runs here with the config in
    `tmp`."""

    def __init__(self, binary, config_text, tmp, openai_url=None, attempt=0, inside=None):
        self.proxy = free_port()
        self.admin = free_port()
        text = _replace_one(config_text, r'^listen = "0\.0\.0\.0:8080"$',
                            f'listen = "127.0.0.1:{self.proxy}"')
        text = _replace_one(text, r'^listen = "0\.0\.0\.0:9090"$',
                            f'listen = "127.0.0.1:{self.admin}"')
        # Loopback only: the openai provider is `openai_url`, every other one a closed local
        # port, so the keys below are never sent anywhere else.
        if openai_url:
            text = _replace_one(text, r'(?<=^\[providers\.openai\]\nbase_url = )".*"$',
                                f'"{openai_url}"')
        text, providers = re.subn(r'^base_url = "https://.*"$',
                                  'base_url = "http://127.0.0.1:1/v1"', text, flags=re.MULTILINE)
        if providers == 0:
            raise ValueError("the config names no base_url")
        env = dict(inside.env) if inside else paths.clean_env()
        env["OPENAI_API_KEY"] = env["AWS_BEARER_TOKEN_BEDROCK"] = "deploy-check"
        config = inside.config_file if inside else Path(tmp) / "proxy.toml"
        config.write_text(text)
        config.chmod(0o644)
        seen_as = inside.config_seen_as if inside else str(config)
        prefix = list(inside.command) if inside else []
        self.log = open(Path(tmp) / f"serve-{attempt}.log", "w+")
        self.process = subprocess.Popen(
            prefix + [binary, "serve", "--config", seen_as], env=env,
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
        )

    def url(self, path, admin=True):
        return f"http://127.0.0.1:{self.admin if admin else self.proxy}{path}"

    def wait_healthy(self, seconds=30):
        """True once /healthz answers 200; False when the process exits or time runs out."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            if http("GET", self.url("/healthz"), timeout=1)[0] == 200:
                return True
            time.sleep(0.1)
        return False

    def output(self):
        self.log.seek(0)
        return self.log.read()[-2000:]

    def stop(self, seconds=45):
        """SIGTERM, then the exit code (None when it had to be killed)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return None
        finally:
            self.log.close()


class Inside(NamedTuple):
    """Where Serving runs the binary when not here: see Serving."""

    #: The command that runs the rest in the other root, e.g. chroot --userspec=U:G ROOT.
    command: list
    #: This machine's path of the config file to write, inside that root.
    config_file: Path
    #: The same file as the binary sees it.
    config_seen_as: str
    #: The binary's whole environment (the image's, not this process's).
    env: dict


def serve(binary, config_text, tmp, openai_url=None, inside=None):
    """A healthy Serving, or the last one that was not. A port found free may be taken before
    the binary binds it: such a start is tried again on other ports, up to three times."""
    for attempt in range(3):
        serving = Serving(binary, config_text, tmp, openai_url, attempt, inside)
        healthy = serving.wait_healthy()
        if healthy or "in use" not in serving.output():
            return serving, healthy
        serving.stop()
    return serving, healthy


def _accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def start_redis(tmp):
    """(process, port) of a redis-server on a free loopback port that accepts connections."""
    for _ in range(3):
        port = free_port()
        redis = subprocess.Popen(
            [paths.tool("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", tmp, "--loglevel", "warning"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        started = poll(lambda: redis.poll() is not None or _accepts(port), 5)  # noqa: B023
        if started and redis.poll() is None:
            return redis, port
        if redis.poll() is None:
            redis.kill()
        redis.wait()
    raise RuntimeError("redis-server did not start on a free loopback port")


def poll(condition, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def parse_metrics(text):
    """{name: kind} of every metric family, by the names queries use: a counter's with its
    `_total`, a histogram's base name (its series add _bucket, _sum, _count)."""
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            if kind == "counter" and not name.endswith("_total"):
                name += "_total"
            families[name] = kind
    return families


def series_names(families):
    """Every series name a query may use."""
    names = set()
    for name, kind in families.items():
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif kind == "info":
            names.add(f"{name}_info")
        else:
            names.add(name)
    return names


def check_container_config(report, binary):
    """Serves deploy/docker/proxy.toml (state in a temporary directory); returns the scraped
    metric families, or None."""
    report.section("serving deploy/docker/proxy.toml on loopback")
    with tempfile.TemporaryDirectory() as tmp:
        text = _replace_one(paths.DOCKER_CONFIG.read_text(), r'^path = "/var/lib/replaygate"$',
                            f'path = "{Path(tmp) / "state"}"')
        provider = FakeProvider()
        serving, healthy = serve(binary, text, tmp, openai_url=provider.url)
        try:
            if not report.expect(healthy, "/healthz answers 200 on the admin port",
                                 serving.output()):
                return None
            report.equal(http("GET", serving.url("/readyz"))[0], 200,
                         "/readyz answers 200 (config loaded, state backend answers)")
            healthcheck = [
                (f"127.0.0.1:{serving.admin}", "/healthz", 0, "passes on the admin port"),
                (f"127.0.0.1:{serving.admin}", "/no-such-path", 1, "fails on another status"),
                (f"127.0.0.1:{free_port()}", "/healthz", 1, "fails where nothing listens"),
            ]
            for addr, path, code, what in healthcheck:
                run = subprocess.run([str(paths.HEALTHCHECK), addr, path], capture_output=True,
                                     text=True, timeout=10)
                report.equal(run.returncode, code, f"the image's health check {what}")

            json_type = {"content-type": "application/json"}
            status, _ = http("POST", serving.url("/bedrock/v1/responses", admin=False), FOREIGN,
                             json_type)
            report.equal(status, 422, "a foreign item to bedrock is refused")
            status, _ = http("POST", serving.url("/openai/v1/responses", admin=False), WITH_TOOL,
                             json_type)
            report.equal(status, 200, "an allowed request is answered by the (fake) provider")
            status, _ = http("POST", serving.url("/bedrock/v1/responses", admin=False), WITH_TOOL,
                             json_type)
            report.equal(status, 502, "a provider that refuses connections: 502")
            status, metrics = http("GET", serving.url("/metrics"))
            report.equal(status, 200, "GET /metrics answers 200")
            report.expect(
                re.search(r'^replaygate_requests_total\{[^}]*decision="rejected"[^}]*\} 1(\.0)?$',
                          metrics, re.MULTILINE),
                "the refusal is counted in replaygate_requests_total{decision=\"rejected\"}",
                "\n".join(l for l in metrics.splitlines() if "requests_total" in l),
            )
            families = parse_metrics(metrics)

            serving.process.send_signal(signal.SIGHUP)
            reloaded = poll(lambda: re.search(
                r'^replaygate_config_reloads_total\{result="ok"\} 1(\.0)?$',
                http("GET", serving.url("/metrics"))[1], re.MULTILINE), 10)
            report.expect(reloaded, "SIGHUP (ExecReload) reloads: "
                          "config_reloads_total{result=\"ok\"} 1", serving.output())
            report.expect(serving.process.poll() is None and
                          http("GET", serving.url("/healthz"))[0] == 200,
                          "still serving after the reload")
            return families
        finally:
            code = serving.stop()
            provider.close()
            report.equal(code, 0, "SIGTERM: serve exits 0 within 45 s")


def check_cluster_config(report, binary):
    """Serves deploy/kubernetes/proxy.toml against a Redis of its own: /readyz follows Redis."""
    report.section("serving deploy/kubernetes/proxy.toml with a Redis on loopback")
    if paths.tool("redis-server") is None:
        report.skip("/readyz follows Redis", "redis-server is not installed (Debian: redis-server)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        redis, redis_port = start_redis(tmp)
        try:
            text = _replace_one(paths.KUBERNETES_CONFIG.read_text(),
                                r'^url = "redis://replaygate-redis:6379"$',
                                f'url = "redis://127.0.0.1:{redis_port}"')
            serving, healthy = serve(binary, text, tmp)
            try:
                if not report.expect(healthy, "/healthz answers 200",
                                     serving.output()):
                    return
                report.expect(poll(lambda: http("GET", serving.url("/readyz"))[0] == 200, 15),
                              "/readyz answers 200 while Redis answers")
                redis.terminate()
                redis.wait(timeout=10)
                report.expect(poll(lambda: http("GET", serving.url("/readyz"))[0] == 503, 15),
                              "/readyz answers 503 once Redis is gone (the pod leaves the Service)")
                report.equal(http("GET", serving.url("/healthz"))[0], 200,
                             "/healthz stays 200 (the liveness probe does not restart the pod)")
            finally:
                report.equal(serving.stop(), 0, "SIGTERM: serve exits 0")
        finally:
            if redis.poll() is None:
                redis.kill()
            redis.wait()
