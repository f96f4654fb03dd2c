#!/usr/bin/env python3
"""Turns the load run's results into a markdown section: `report.py RESULTS_DIR`.

RESULTS_DIR holds meta.json (written by bench/load/run) and one oha JSON report per target,
body size and kind (`TARGET-SIZE-saturation.json`, `TARGET-SIZE-latency.json`).
"""

import json
import sys
from pathlib import Path

TARGETS = ["direct", "nginx", "replaygate", "replaygate-info", "ungated"]
# "ungated" (the proxy without the gate) is measured at saturation only.
LATENCY_TARGETS = TARGETS[:4]
SIZES = {1024: "1 KiB", 16384: "16 KiB", 262144: "256 KiB", 1048576: "1 MiB"}


def load(results, target, size, kind):
    return json.loads((results / f"{target}-{size}-{kind}.json").read_text())


def answered(report):
    """Responses with status 200 per second of the run."""
    ok = report["statusCodeDistribution"].get("200", 0)
    return ok / report["summary"]["total"]


def problems(report):
    """Non-200 answers and errors, leaving out requests cut by the run's deadline."""
    bad = sum(n for code, n in report["statusCodeDistribution"].items() if code != "200")
    bad += sum(n for error, n in report["errorDistribution"].items() if "deadline" not in error)
    return bad


def ms(seconds):
    return f"{seconds * 1000:.2f}"


def main():
    results = Path(sys.argv[1])
    meta = json.loads((results / "meta.json").read_text())
    sizes = sorted(int(s) for s in meta["rates"])
    sat = {(t, s): load(results, t, s, "saturation") for t in TARGETS for s in sizes}
    lat = {(t, s): load(results, t, s, "latency") for t in LATENCY_TARGETS for s in sizes}
    rps = {k: answered(r) for k, r in sat.items()}

    out = [
        f"## Load, {meta['started']}",
        "",
        f"Commit `{meta['commit']}`. {meta['cpu']}, {meta['cores']} cores, Linux {meta['kernel']}; "
        f"nginx {meta['nginx']}, oha {meta['oha']}, rustc {meta['rustc']}, replaygate release build. "
        f"Pinning: {meta['pinning']}. 1-minute load average {meta['load_before']} before the run, "
        f"{meta['load_after']} after. Produced by `bench/load/run` "
        f"({meta['seconds']} s per point, {meta['connections']} connections, HTTP/1.1 keep-alive; "
        "bodies from `bench/load/bodies.py`, each allowed for `openai` after a full check).",
        "",
        "Targets: **direct** is the upstream alone (nginx answering a 1.4 KB Responses JSON), "
        "**nginx** a pass-through reverse proxy in front of it (whole body buffered in memory "
        "before forwarding, keep-alive upstream pool, answer streamed), **replaygate** with "
        '`[log] level = "warn"`, **replaygate (info)** with the default info-level access log '
        "written to a file, and **gate off** the warn-level replaygate on a path it forwards "
        "without gating (`/v1/chat/completions`, same body): what the proxy costs without the gate. "
        "Each target gets the same body on every request, so after the first "
        "one every function call hits replaygate's memory of passed calls (`[gate] "
        "passed_calls_bytes`), as most of a replayed agent history does; the gate benchmark below "
        "has the first-seen cost.",
        "",
        f"Saturation throughput, requests/s ({meta['connections']} connections, {meta['seconds']} s):",
        "",
        "| body | direct | nginx | replaygate | vs nginx | vs direct | replaygate (info) | vs nginx "
        "| gate off | vs nginx |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in sizes:
        d, n, r, i, u = (rps[(t, s)] for t in TARGETS)
        out.append(
            f"| {SIZES.get(s, s)} | {d:,.0f} | {n:,.0f} | {r:,.0f} | **{r / n:.2f}x** | {r / d:.2f}x "
            f"| {i:,.0f} | {i / n:.2f}x | {u:,.0f} | {u / n:.2f}x |"
        )
    out += [
        "",
        "Latency at a fixed rate with `--latency-correction`, p50 / p99 in ms; *added* is "
        "replaygate's p99 minus direct's:",
        "",
        "| body | rate/s | direct | nginx | replaygate | added p99 | replaygate (info) | added p99 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in sizes:
        p = {t: lat[(t, s)]["latencyPercentiles"] for t in LATENCY_TARGETS}
        cells = [f"{ms(p[t]['p50'])} / {ms(p[t]['p99'])}" for t in LATENCY_TARGETS]
        added = [ms(p[t]["p99"] - p["direct"]["p99"]) for t in ("replaygate", "replaygate-info")]
        out.append(
            f"| {SIZES.get(s, s)} | {meta['rates'][str(s)]:,} | {cells[0]} | {cells[1]} | {cells[2]} "
            f"| {added[0]} | {cells[3]} | {added[1]} |"
        )
    lowered = [f"{SIZES.get(s, s)} at {meta['rates'][str(s)]}/s" for s in sizes if meta["rates"][str(s)] != 1000]
    if lowered:
        out += ["", f"Rates below 1,000/s ({', '.join(lowered)}): 1,000/s of those bodies is beyond "
                "replaygate's saturation throughput above, so latency there would measure a growing "
                "queue, not the proxy."]
    out += [
        "",
        f"replaygate peak RSS (VmHWM over the whole run): {meta['rss_warn_mib']} MiB "
        f"(warn), {meta['rss_info_mib']} MiB (info).",
    ]
    bad = [f"{t} {s} {kind}: {problems(r)}" for kind, runs in (("saturation", sat), ("latency", lat))
           for (t, s), r in runs.items() if problems(r)]
    if bad:
        out.append("Non-200 answers or errors: " + ", ".join(bad) + ".")
    else:
        out.append("Every answer was 200 (requests cut off by a run's deadline are not counted).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
