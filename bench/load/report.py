#!/usr/bin/env python3
"""Turns the load run's results into a markdown section: `report.py RESULTS_DIR`.

RESULTS_DIR holds meta.json (written by bench/load/run) and one oha JSON report per target,
body size and kind (`TARGET-SIZE-saturation.json`, `TARGET-SIZE-latency.json`, and with LiteLLM
measured `TARGET-SIZE-latency-litellm.json` for the others at LiteLLM's rate); a growing-session
target ("-session") has the session generator's JSON instead (`TARGET-SIZE-session.json`,
examples/session_load.rs). The targets are those meta.json lists (a run limited by LOAD_TARGETS
has fewer): the comparison with nginx covers the targets of it that were measured (LiteLLM and
the repository's default configuration among them), the ledger's table each ledger target beside
replaygate with the ledger off, on the same bodies, the sessions' table each session target
beside nginx on the same sessions, and the TLS table nginx and replaygate serving HTTPS beside
themselves in clear.
"""

import json
import sys
from pathlib import Path

TARGETS = ["direct", "nginx", "replaygate", "replaygate-info", "default", "ungated", "hyper",
           "litellm"]
# "ungated" (the proxy without the gate) and "hyper" (a bare hyper proxy) are measured at
# saturation only; LiteLLM's latency at its own, lower rate has a table of its own, with these
# beside it.
SATURATION_ONLY = {"ungated", "hyper"}
LATENCY_TARGETS = TARGETS[:5]
PEER_TARGETS = TARGETS[:4]
LEDGER_TARGETS = ["ledger-memory", "ledger-embedded", "ledger-redis"]
SESSION_TARGETS = ["nginx-session", "default-session", "replaygate-session"]
TLS_TARGETS = ["nginx-tls", "replaygate-tls"]
NAMES = {"direct": "direct", "nginx": "nginx", "replaygate": "replaygate",
         "replaygate-info": "replaygate (info)", "default": "default", "ungated": "gate off",
         "hyper": "bare hyper", "ledger-memory": "memory", "ledger-embedded": "embedded",
         "ledger-redis": "redis", "litellm": "LiteLLM", "nginx-tls": "nginx, TLS",
         "replaygate-tls": "replaygate, TLS"}
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


def name(target):
    if target.endswith("-session"):
        base = target.removesuffix("-session")
        return NAMES.get(base, base) + (", ledger off" if base == "replaygate" else "")
    base = target.removesuffix("-cont")
    return NAMES.get(base, base) + (" (cont.)" if target.endswith("-cont") else "")


def classic(meta, sizes, rps, lat):
    """The comparison with nginx: the targets of it that were measured."""
    measured = set(meta["targets"])
    present = [t for t in TARGETS if t in measured]
    if not present:
        return []
    out = [
        f"Saturation throughput, requests/s ({meta['connections']} connections, {meta['seconds']} s):",
        "",
    ]
    head, cells = ["body"], []
    for t in present:
        head.append(name(t))
        if t == "replaygate" and "nginx" in measured:
            head.append("vs nginx")
        if t == "replaygate" and "direct" in measured:
            head.append("vs direct")
        if t not in ("direct", "nginx", "replaygate", "litellm") and "nginx" in measured:
            head.append("vs nginx")
        if t == "litellm" and "replaygate" in measured:
            head.append("replaygate vs LiteLLM")
    out += ["| " + " | ".join(head) + " |", "| --- " + "| ---: " * (len(head) - 1) + "|"]
    for s in sizes:
        row = [SIZES.get(s, str(s))]
        for t in present:
            r = rps[(t, s)]
            row.append(f"{r:,.0f}")
            if t == "replaygate" and "nginx" in measured:
                row.append(f"**{r / rps[('nginx', s)]:.2f}x**")
            if t == "replaygate" and "direct" in measured:
                row.append(f"{r / rps[('direct', s)]:.2f}x")
            if t not in ("direct", "nginx", "replaygate", "litellm") and "nginx" in measured:
                versus = f"{r / rps[('nginx', s)]:.2f}x"
                row.append(f"**{versus}**" if t == "default" else versus)
            if t == "litellm" and "replaygate" in measured:
                row.append(f"**{rps[('replaygate', s)] / r:.1f}x**")
        out.append("| " + " | ".join(row) + " |")
    if "default" in measured and "default" in meta["rss_mib"]:
        out += ["", f"default's peak RSS (VmHWM over the whole run, every body size it served, "
                f"growing sessions among them where measured): {meta['rss_mib']['default']} MiB."]
    timed = [t for t in LATENCY_TARGETS if t in measured]
    if timed:
        with_direct = "direct" in measured and any(t.startswith("replaygate") for t in timed)
        out += ["", "Latency at a fixed rate with `--latency-correction`, p50 / p99 in ms"
                + ("; *added* is replaygate's p99 minus direct's:" if with_direct else ":"), ""]
        head = ["body", "rate/s"]
        for t in timed:
            head.append(name(t))
            if with_direct and t.startswith("replaygate"):
                head.append("added p99")
        out += ["| " + " | ".join(head) + " |", "| --- " + "| ---: " * (len(head) - 1) + "|"]
        for s in sizes:
            p = {t: lat[(t, s)]["latencyPercentiles"] for t in timed}
            row = [SIZES.get(s, str(s)), f"{meta['rates'][str(s)]:,}"]
            for t in timed:
                row.append(f"{ms(p[t]['p50'])} / {ms(p[t]['p99'])}")
                if with_direct and t.startswith("replaygate"):
                    row.append(ms(p[t]["p99"] - p["direct"]["p99"]))
            out.append("| " + " | ".join(row) + " |")
    return out


def tls(meta, sizes, rps, lat):
    """nginx and replaygate serving HTTPS on the same certificate, beside themselves in clear."""
    measured = set(meta["targets"])
    if not set(TLS_TARGETS) <= measured:
        return []
    clear = {"nginx", "replaygate"} <= measured
    out = [
        "TLS: nginx and replaygate (warn) serving HTTPS on the same certificate (ECDSA P-256, "
        "TLS 1.3 as oha negotiates it, HTTP/1.1 keep-alive: few handshakes, the records' "
        "encryption), saturation throughput in requests/s, and p50 / p99 in ms at the fixed "
        "rate; *TLS vs clear* is each one's throughput with TLS over its own without:",
        "",
        "| body | nginx, TLS | replaygate, TLS | replaygate vs nginx, TLS"
        + (" | replaygate vs nginx, clear | nginx TLS vs clear | replaygate TLS vs clear" if clear else "")
        + " | p50 / p99 nginx, TLS | p50 / p99 replaygate, TLS |",
        "| --- " + "| ---: " * (8 if clear else 5) + "|",
    ]
    for s in sizes:
        n, r = rps[("nginx-tls", s)], rps[("replaygate-tls", s)]
        row = [SIZES.get(s, str(s)), f"{n:,.0f}", f"{r:,.0f}", f"**{r / n:.2f}x**"]
        if clear:
            nc, rc = rps[("nginx", s)], rps[("replaygate", s)]
            row += [f"{rc / nc:.2f}x", f"{n / nc:.2f}x", f"{r / rc:.2f}x"]
        for t in TLS_TARGETS:
            p = lat[(t, s)]["latencyPercentiles"]
            row.append(f"{ms(p['p50'])} / {ms(p['p99'])}")
        out.append("| " + " | ".join(row) + " |")
    return out


def peer(meta, sizes, rps, lat, low):
    """LiteLLM's latency at its rate, beside the others measured again at that rate."""
    if "litellm" not in meta["targets"]:
        return []
    timed = [t for t in PEER_TARGETS if t in meta["targets"]] + ["litellm"]
    rate = meta["litellm_rate"]
    under = all(rate < rps[("litellm", s)] for s in sizes)
    where = ("under its saturation throughput above" if under else
             "not under its saturation throughput above, so its figures include a queue")
    out = [f"Latency at LiteLLM's rate ({rate:,}/s for every body, {where}), each target at "
           "that same rate with `--latency-correction`, p50 / p99 in ms:", ""]
    head = ["body", "rate/s"] + [name(t) for t in timed]
    out += ["| " + " | ".join(head) + " |", "| --- " + "| ---: " * (len(head) - 1) + "|"]
    for s in sizes:
        row = [SIZES.get(s, str(s)), f"{rate:,}"]
        for t in timed:
            p = (lat if t == "litellm" else low)[(t, s)]["latencyPercentiles"]
            row.append(f"{ms(p['p50'])} / {ms(p['p99'])}")
        out.append("| " + " | ".join(row) + " |")
    return out


def ledger(meta, sizes, rps, lat):
    """Each ledger target beside replaygate with the ledger off, on the same bodies."""
    measured = meta["targets"]
    pairs = []  # (ledger off, [ledger targets]) for plain and continuation bodies
    for suffix in ("", "-cont"):
        on = [t + suffix for t in LEDGER_TARGETS if t + suffix in measured]
        if on:
            off = "replaygate" + suffix
            pairs.append((off if off in measured else None, on))
    if not pairs:
        return []
    out = [
        f"Ledger on and off, saturation throughput in requests/s ({meta['connections']} "
        f"connections, {meta['seconds']} s); *on / off* is the ledger target's throughput over "
        "replaygate's with the ledger off, on the same bodies; (cont.) marks the continuation "
        "bodies:",
        "",
    ]
    head = ["body"]
    for off, on in pairs:
        head.append(name(off) + ", ledger off" if off else "")
        for t in on:
            head += [name(t), "on / off"]
    head = [h for h in head if h]
    out += ["| " + " | ".join(head) + " |", "| --- " + "| ---: " * (len(head) - 1) + "|"]
    for s in sizes:
        row = [SIZES.get(s, str(s))]
        for off, on in pairs:
            if off:
                row.append(f"{rps[(off, s)]:,.0f}")
            for t in on:
                row.append(f"{rps[(t, s)]:,.0f}")
                row.append(f"**{rps[(t, s)] / rps[(off, s)]:.2f}x**" if off else "-")
        out.append("| " + " | ".join(row) + " |")
    out += ["", "Latency at the fixed rate with `--latency-correction`, p50 / p99 in ms:", ""]
    timed = [t for off, on in pairs for t in ([off] if off else []) + on]
    head = ["body", "rate/s"] + [name(t) + (", ledger off" if t.startswith("replaygate") else "")
                                 for t in timed]
    out += ["| " + " | ".join(head) + " |", "| --- " + "| ---: " * (len(head) - 1) + "|"]
    for s in sizes:
        row = [SIZES.get(s, str(s)), f"{meta['rates'][str(s)]:,}"]
        for t in timed:
            p = lat[(t, s)]["latencyPercentiles"]
            row.append(f"{ms(p['p50'])} / {ms(p['p99'])}")
        out.append("| " + " | ".join(row) + " |")
    return out


def sessions(meta, runs):
    """The growing sessions: each session target beside nginx on the same sessions."""
    present = [t for t in SESSION_TARGETS if t in meta["targets"]]
    if not present:
        return []
    out = [
        f"Growing sessions (`examples/session_load.rs`, {meta['connections']} connections, "
        f"{meta['seconds']} s): each turn is sent after the answer to the one before and is its "
        "input plus the answer's output items and an output for each call, from a history of a "
        "quarter of the size goal to the first turn past it; *vs nginx* is the throughput over "
        "nginx's on the same sessions, the latency (p50 / p99 in ms) is at saturation, and "
        "*client CPU* is the generator's own CPU time over the run's:",
        "",
        "| size goal | target | requests/s | vs nginx | p50 / p99 | mean body | turns per session "
        "| client CPU |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in sorted({s for _, s in runs}):
        for t in present:
            r = runs[(t, s)]
            nginx = runs.get(("nginx-session", s))
            versus = (f"**{r['requests_per_s'] / nginx['requests_per_s']:.2f}x**"
                      if nginx and t != "nginx-session" else "-")
            cpu = r.get("client_cpu_s")
            out.append(
                f"| {SIZES.get(s, s)} | {name(t)} | {r['requests_per_s']:,.0f} | {versus} | "
                f"{r['latency_ms']['p50']:.2f} / {r['latency_ms']['p99']:.2f} | "
                f"{r['mean_body_bytes'] / 1024:,.1f} KiB | {r['turns_per_session']:.1f} | "
                + (f"{cpu / r['seconds']:.0%} |" if cpu is not None else "- |"))
    return out


def main():
    results = Path(sys.argv[1])
    meta = json.loads((results / "meta.json").read_text())
    sizes = sorted(int(s) for s in meta["rates"])
    targets = meta["targets"]
    fixed = [t for t in targets if not t.endswith("-session")]
    sat = {(t, s): load(results, t, s, "saturation") for t in fixed for s in sizes}
    lat = {(t, s): load(results, t, s, "latency") for t in fixed for s in sizes
           if t.removesuffix("-cont") not in SATURATION_ONLY}
    low = {(t, s): load(results, t, s, "latency-litellm") for t in fixed for s in sizes
           if "litellm" in targets and t in PEER_TARGETS}
    # Growing sessions are measured from 16 KiB to 256 KiB only.
    grown = {(t, s): load(results, t, s, "session") for t in targets for s in sizes
             if t.endswith("-session") and (results / f"{t}-{s}-session.json").exists()}
    rps = {k: answered(r) for k, r in sat.items()}

    described = [
        ("direct", "**direct** is the upstream alone (nginx answering a 1.4 KB Responses JSON)"),
        ("nginx", "**nginx** a pass-through reverse proxy in front of it (whole body buffered in "
         "memory before forwarding, keep-alive upstream pool, answer streamed)"),
        ("replaygate", '**replaygate** with `[log] level = "warn"`'),
        ("replaygate-info", "**replaygate (info)** with the default info-level access log "
         "written to a file"),
        ("default", "**default** replaygate with the repository's own `proxy.toml`, as users "
         f"run it ({meta.get('default_runs', '').split(': ', 1)[-1]}; every item gated), "
         "with only its listen and admin addresses, the openai provider's `base_url` and "
         "`auth` (the upstream, no key) and the state directory changed "
         "(`bench/load/default_config.py`), its log lines written to a file (two of them "
         "warnings at start: the file's Bedrock providers, which the run does not use, have no "
         "key in the environment)"),
        ("ungated", "**gate off** the warn-level replaygate on a path it forwards without gating "
         "(`/v1/chat/completions`, same body): what the proxy costs without the gate"),
        ("hyper", "**bare hyper** the least a proxy built on hyper does "
         "(`examples/bare_hyper_proxy.rs`: hyper's server and hyper-util's pooled client on one "
         "single-threaded runtime, the body read whole and sent on, the answer streamed, nothing "
         "else): the ceiling of replaygate's stack"),
        ("ledger-memory", "**memory** the warn-level replaygate with the ledger on and "
         '`[state] backend = "memory"`'),
        ("ledger-embedded", "**embedded** the same with the embedded store (an LSM tree, the "
         "records of each 20 ms in one batch, written to disk with an fdatasync every 0.5 s)"),
        ("ledger-redis", f"**redis** the same with a local redis-server {meta.get('redis', '')} "
         "(pinned with the proxies, no snapshots)"),
        ("nginx-tls", "**nginx, TLS** the same nginx serving HTTPS (`ssl_protocols TLSv1.2 "
         "TLSv1.3`)"),
        ("replaygate-tls", "**replaygate, TLS** the warn-level replaygate serving HTTPS "
         "(`[server] tls_cert_file`), on the same certificate"),
        ("litellm", f"**LiteLLM** the LiteLLM proxy {meta.get('litellm', '')} (`litellm[proxy]` "
         "from pip, one uvicorn worker, pinned with the proxies, no database, a master key "
         "checked on each request, log level ERROR) passing the same bodies on its "
         "`/v1/responses` route to the same upstream (model entry `openai/<model>` with "
         "`api_base` the upstream); it parses the request and answers with its own "
         "serialization of the upstream's response, not the upstream's bytes"),
    ]
    bases = {t.removesuffix("-cont").removesuffix("-session") for t in targets}
    parts = [text for t, text in described if t in bases]
    rss = ", ".join(f"{mib} MiB ({variant})" for variant, mib in meta["rss_mib"].items())
    out = [
        f"## Load, {meta['started']}",
        "",
        f"Commit `{meta['commit']}`"
        + (" (replaygate binary given with LOAD_BIN, not built by the run)" if meta.get("binary_given") else "")
        + f". {meta['cpu']}, {meta['cores']} cores, Linux {meta['kernel']}; "
        f"nginx {meta['nginx']}, oha {meta['oha']}, rustc {meta['rustc']}, replaygate release build. "
        f"Pinning: {meta['pinning']}. 1-minute load average {meta['load_before']} before the run, "
        f"{meta['load_after']} after. Produced by `{meta.get('command', 'bench/load/run')}` "
        f"({meta['seconds']} s per point, {meta['connections']} connections, HTTP/1.1 keep-alive; "
        "bodies from `bench/load/bodies.py`, each allowed for `openai` after a full check under "
        "the repository's `proxy.toml`).",
        "",
        "Targets: " + ", ".join(parts[:-1]) + (", and " if len(parts) > 1 else "") + parts[-1] + ". "
        "replaygate runs with the ledger off (`[ledger] enabled = false`) except in the ledger's "
        "targets and default, and with no item profile except in default. Each oha target gets "
        "the same body on every request, so after the first "
        "one every function call hits replaygate's memory of passed calls (`[gate] "
        "passed_calls_bytes`), as most of a replayed agent history does; the gate benchmark "
        "has the first-seen cost."
        + (" Every answer has the same ids (`LOAD_FIXED_IDS=1`): a ledger rewrites one record."
           if meta.get("fixed_ids") else
           " Every answer has new ids (a new response with new items and call ids, as a "
           "provider's answers have), so a ledger records a new entry each time.")
        + (" Targets marked (cont.) get the continuation bodies (`bodies.py --continue`): the "
           "turn after the upstream's answer, naming it as `previous_response_id`, so the "
           "ledger's lookups find it." if any(t.endswith("-cont") for t in targets) else ""),
        "",
    ]
    out += classic(meta, sizes, rps, lat)
    lite = peer(meta, sizes, rps, lat, low)
    if lite:
        out += [""] + lite
    lowered = [f"{SIZES.get(s, s)} at {meta['rates'][str(s)]}/s" for s in sizes if meta["rates"][str(s)] != 1000]
    if lowered:
        out += ["", f"Rates below 1,000/s ({', '.join(lowered)}): 1,000/s of those bodies is beyond "
                "replaygate's saturation throughput above, so latency there would measure a growing "
                "queue, not the proxy."]
    led = ledger(meta, sizes, rps, lat)
    if led:
        out += [""] + led
    grew = sessions(meta, grown)
    if grew:
        out += [""] + grew
    secured = tls(meta, sizes, rps, lat)
    if secured:
        out += [""] + secured
    warned = {v: n for v, n in meta.get("warnings", {}).items() if n}
    recorded = {v: r for v, r in meta.get("records", {}).items() if r["written"] or r["not_written"]}
    out += [
        "",
        ((f"replaygate peak RSS (VmHWM over the whole run): {rss}." if rss else "")
         + (f" LiteLLM peak RSS: {meta['litellm_rss_mib']} MiB." if meta.get("litellm_rss_mib") else "")
         + (" Warnings logged: " + ", ".join(f"{n:,} ({v})" for v, n in warned.items()) + "."
            if warned else "")
         + (" Ledger records written / not written (a full write queue refuses what the store "
            "cannot keep up with): " + ", ".join(f"{r['written']:,} / {r['not_written']:,} ({v})"
                                              for v, r in recorded.items()) + "."
            if recorded else "")).strip(),
    ]
    bad = [f"{t} {s} {kind}: {problems(r)}"
           for kind, runs in (("saturation", sat), ("latency", lat), ("latency at LiteLLM's rate", low))
           for (t, s), r in runs.items() if problems(r)]
    bad += [f"{t} {s}: {r['non_200'] + r['errors']}" for (t, s), r in grown.items()
            if r["non_200"] or r["errors"]]
    if bad:
        out.append("Non-200 answers or errors: " + ", ".join(bad) + ".")
    else:
        out.append("Every answer was 200 (requests cut off by a run's deadline are not counted).")
    print("\n".join(out))


if __name__ == "__main__":
    main()
