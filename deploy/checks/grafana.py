"""The Grafana dashboard: valid JSON on a datasource variable, querying only metrics the binary
exposes, and every metric docs/operations.md lists."""

import json
import re

from . import paths

METRIC = re.compile(r"\breplaygate_[a-z0-9_]+")
HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")


def documented_metrics():
    """The metric names docs/operations.md's `## Metrics` section lists, in order."""
    text = paths.OPERATIONS_DOC.read_text()
    match = re.search(r"^## Metrics\n(.*?)(?=^#{1,3} |\Z)", text, re.MULTILINE | re.DOTALL)
    if not match:
        return []
    return list(dict.fromkeys(METRIC.findall(match.group(1))))


def _queries(dashboard):
    """(where, PromQL) of every panel target and every query variable."""
    out = []
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            out.append((f"panel {panel.get('title')!r}", target.get("expr", "")))
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        if variable.get("type") == "query":
            out.append((f"variable {variable['name']}", query or ""))
    return out


def check(report, families):
    """`families`: the scraped {name: kind}, or None when the binary could not be scraped."""
    report.section("Grafana dashboard (deploy/grafana/replaygate.json)")
    try:
        dashboard = json.loads(paths.DASHBOARD.read_text())
    except json.JSONDecodeError as error:
        report.expect(False, "the dashboard is valid JSON", str(error))
        return
    report.expect(True, "the dashboard is valid JSON")
    variables = {v["name"]: v for v in dashboard.get("templating", {}).get("list", [])}
    source = variables.get("datasource", {})
    report.expect(source.get("type") == "datasource" and source.get("query") == "prometheus",
                  "a Prometheus datasource variable $datasource")
    panels = [p for p in dashboard.get("panels", []) if p.get("type") != "row"]
    ids = [p.get("id") for p in dashboard.get("panels", [])]
    report.equal(len(ids), len(set(ids)), "panel ids are unique")
    unbound = [p.get("title") for p in panels
               if p.get("datasource", {}).get("uid") != "${datasource}"
               or any(t.get("datasource", {}).get("uid") != "${datasource}"
                      for t in p.get("targets", []))]
    report.equal(unbound, [], "every panel and query uses $datasource")
    queries = _queries(dashboard)
    report.expect(all(expr for _, expr in queries), "every panel has a query")
    used = {name for _, expr in queries for name in METRIC.findall(expr)}
    histograms = [(where, expr) for where, expr in queries if "_bucket" in expr]
    report.expect(all("histogram_quantile(" in expr and re.search(r"by \([^)]*\ble\b", expr)
                      for _, expr in histograms),
                  "histogram buckets are read with histogram_quantile over le")

    listed = documented_metrics()
    report.expect(listed, "docs/operations.md's Metrics section lists metric names")
    queried_families = {HISTOGRAM_SERIES.sub("", name) for name in used}
    missing = [name for name in listed if name not in queried_families]
    report.equal(missing, [], "every metric docs/operations.md lists has a panel")

    if families is None:
        report.expect(False, "the dashboard's metrics are checked against a scrape",
                      "no scrape: the binary did not serve (see above)")
        return
    from .live import series_names
    exposed = series_names(families)
    unknown = sorted(name for name in used if name not in exposed)
    report.equal(unknown, [], "every metric the dashboard queries is exposed at /metrics")
    not_exposed = [name for name in listed if name not in families]
    report.equal(not_exposed, [], "every metric docs/operations.md lists is exposed at /metrics")
