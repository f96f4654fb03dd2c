"""The systemd unit: `systemd-analyze verify` on a copy that runs the built binary, its
exposure score, and agreement with deploy/systemd/proxy.toml."""

import subprocess
import tempfile
from pathlib import Path

from . import paths

INSTALLED_BINARY = "/usr/local/bin/replaygate"
#: `systemd-analyze security` prints an exposure from 0 (locked down) to 10, "OK" up to 2.9; its
#: --threshold counts tenths. The unit scores 1.4 (systemd 252); fail above 2.0.
EXPOSURE_THRESHOLD = 20


def _directives(text):
    """The [Service] section's directives, each with every value it was given (in order)."""
    section, out = None, {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def check(report, binary):
    report.section("systemd unit (deploy/systemd/replaygate.service)")
    text = paths.SYSTEMD_UNIT.read_text()
    service = _directives(text)

    def one(key):
        return (service.get(key) or [None])[-1]

    report.equal(one("NoNewPrivileges"), "yes", "NoNewPrivileges=yes")
    report.equal(one("ProtectSystem"), "strict", "ProtectSystem=strict")
    report.expect(one("DynamicUser") == "yes" or one("User") not in (None, "root", "0"),
                  "a dynamic or named non-root user")
    report.expect(one("ExecReload") is not None and "-HUP $MAINPID" in one("ExecReload"),
                  "ExecReload sends SIGHUP to the main process", f"{one('ExecReload')}")
    state = paths.read_toml(paths.SYSTEMD_CONFIG)["state"]
    report.equal(state.get("path"), f"/var/lib/{one('StateDirectory')}",
                 "[state] path is the unit's StateDirectory (writable under ProtectSystem=strict)")
    report.expect("--config /etc/replaygate/proxy.toml" in (one("ExecStart") or ""),
                  "ExecStart serves /etc/replaygate/proxy.toml (deploy/systemd/proxy.toml)")
    grace_s = paths.read_toml(paths.SYSTEMD_CONFIG).get("server", {}).get(
        "shutdown_grace_ms", 30000) / 1000
    report.expect(int(one("TimeoutStopSec") or 90) > grace_s,
                  "TimeoutStopSec outlasts shutdown_grace_ms")

    analyze = paths.tool("systemd-analyze")
    if analyze is None:
        report.skip("systemd-analyze verify", "systemd-analyze is not installed (Debian: systemd)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        unit = Path(tmp) / "replaygate.service"
        unit.write_text(text.replace(INSTALLED_BINARY, str(binary)))
        run = subprocess.run([analyze, "verify", str(unit)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60)
        # It warns about unknown or misspelt directives and still exits 0: no output is clean.
        report.expect(run.returncode == 0 and not run.stdout.strip(),
                      "systemd-analyze verify: exit 0, no warnings",
                      f"exit {run.returncode}: {run.stdout.strip()}")
        run = subprocess.run([analyze, "security", "--offline=yes",
                              f"--threshold={EXPOSURE_THRESHOLD}", str(unit)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60)
        score = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
        report.expect(run.returncode == 0,
                      f"systemd-analyze security: exposure at most {EXPOSURE_THRESHOLD / 10}",
                      score)
