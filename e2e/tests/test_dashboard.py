"""The Grafana dashboard (deploy/grafana/capfleet-dashboard.json) asks only for metrics the operators
really export: every metric name in every query is read from a running operator's /metrics."""

from __future__ import annotations

import json
import re

import pytest

from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.kubebin import repo_root

DASHBOARD = repo_root() / "deploy" / "grafana" / "capfleet-dashboard.json"
SUFFIXES = {
    "counter": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
    "info": ("_info",),
}


def queried_metrics() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs, "the dashboard has queries"
    return {name for expr in exprs for name in re.findall(r"\bcapfleet_[a-z_]+\b", expr)}


def exported(exposition: str) -> set[str]:
    """The sample names a /metrics text exposition offers, from its `# TYPE` lines (a counter's is already
    its sample name, `…_total`)."""
    names: set[str] = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", exposition, re.MULTILINE):
        names.update(name + suffix for suffix in SUFFIXES.get(kind, ("",)))
    return names


def test_the_dashboard_covers_what_users_ask_first() -> None:
    titles = " ".join(p["title"] for p in json.loads(DASHBOARD.read_text())["panels"])
    for topic in (
        "Machines by phase",
        "Step durations",
        "BMC errors",
        "NetBox errors",
        "IP pool usage",
        "provisioning",
        "Reconcile duration",
    ):
        assert topic in titles


@pytest.mark.integration
def test_every_query_names_a_metric_an_operator_exports(run_operator: RunOperator) -> None:
    operator = run_operator("ipam_address")
    offered = exported(operator.metrics())
    assert "capfleet_reconciles_total" in offered, sorted(offered)
    assert queried_metrics() - offered == set()
