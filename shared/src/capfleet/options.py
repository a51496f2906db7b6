"""Who an operator is and how it was started: its Identity (the names that keep its marks apart from the
other operators') and its command-line Options, each flag with a `CAPFLEET_*` variable for container images.
`capfleet.runtime` starts an operator from them.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from capfleet import ownership

HANDLED_KEY = "last-handled-configuration"


@dataclass(frozen=True)
class Identity:
    """Names that keep one operator's marks on shared objects apart from another's, and the annotations on
    its own objects whose changes need not wake its reconcile (`quiet_marks`): those it writes itself, and
    those it reads elsewhere but never decides on."""

    name: str
    quiet_marks: tuple[str, ...] = ()
    quiet_fields: tuple[tuple[str, ...], ...] = ()
    """Fields (paths such as ("spec", "hypervisorName")) that only its reconcile sets, once, and follows in
    the same pass: their writes need not wake it either."""

    on_engine: bool = False
    """Whether the operator's objects are reconciled by `capfleet.controller` (which then owns `finalizer`)
    rather than by kopf's change handlers."""

    @property
    def finalizer(self) -> str:
        return f"{self.name}.capfleet.dev/finalizer"

    @property
    def kopf_finalizer(self) -> str:
        """The finalizer kopf manages: `finalizer` for an operator on kopf's change handlers; for one on
        the engine a name no object carries, as kopf takes its finalizer off any object none of its
        handlers needs it on, and would otherwise fight the engine over the engine's."""
        return f"{self.name}.capfleet.dev/kopf" if self.on_engine else self.finalizer

    @property
    def annotation_prefix(self) -> str:
        return f"{self.name}.capfleet.dev"

    @property
    def released_annotation(self) -> str:
        """Written through kopf when a deletion handler is done (`runtime.releases_at_once`)."""
        return f"{self.annotation_prefix}/released-at"

    @property
    def peering_name(self) -> str:
        return f"capfleet-{self.name}"

    @property
    def field_manager(self) -> str:
        return f"capfleet-{self.name}"


@dataclass(frozen=True)
class Options:
    """Command-line flags, each with an environment variable for container images."""

    namespaces: tuple[str, ...] = ()
    health_address: str = "0.0.0.0:9440"
    metrics_address: str = "127.0.0.1:8080"
    metrics_secure_address: str = ""
    metrics_cert_dir: str | None = None
    log_format: str = "plain"
    verbose: bool = False
    standalone: bool = False
    kubeconfig: str | None = None
    leader_elect: bool = False
    leader_election_namespace: str | None = None
    leader_label: bool = False
    watch_filter: str = ""

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces

    @property
    def peering(self) -> bool:
        """Whether kopf's own peering is used: not under leader election, where only the holder runs."""
        return not (self.standalone or self.leader_elect)

    def shard_name(self, identity: Identity) -> str:
        """The name of this shard's Lease and kopf peering: `capfleet-<operator>`, and `-<watch filter>`
        for a shard, so each shard elects its own leader."""
        return f"{identity.peering_name}-{self.watch_filter}" if self.watch_filter else identity.peering_name

    def label_selector(self) -> str | None:
        """What the shard's watches ask the API server for: objects labelled with its watch filter."""
        return f"{ownership.WATCH_FILTER_LABEL}={self.watch_filter}" if self.watch_filter else None


def parse_options(argv: Sequence[str], environ: Mapping[str, str]) -> Options:
    """Options from flags, falling back to `CAPFLEET_*` variables, then to the defaults."""
    defaults = Options()
    env_namespaces = tuple(ns for ns in environ.get("CAPFLEET_NAMESPACES", "").split(",") if ns)
    parser = argparse.ArgumentParser(description="A capfleet operator.")
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        dest="namespaces",
        default=None,
        help="watch only this namespace (repeatable); all namespaces when omitted",
    )
    addresses = (
        (
            "--health-address",
            "CAPFLEET_HEALTH_ADDRESS",
            defaults.health_address,
            "the liveness endpoint (/healthz)",
        ),
        (
            "--metrics-address",
            "CAPFLEET_METRICS_ADDRESS",
            defaults.metrics_address,
            "plain /metrics; keep it on loopback",
        ),
        (
            "--metrics-secure-address",
            "CAPFLEET_METRICS_SECURE_ADDRESS",
            defaults.metrics_secure_address,
            "/metrics over HTTPS for the callers RBAC allows; off when empty",
        ),
    )
    for flag, variable, default, what in addresses:
        parser.add_argument(flag, default=environ.get(variable, default), help=f"host:port of {what}")
    parser.add_argument(
        "--metrics-cert-dir",
        default=environ.get("CAPFLEET_METRICS_CERT_DIR") or None,
        help="directory with tls.crt and tls.key for the secure endpoint; a self-signed pair when omitted",
    )
    parser.add_argument(
        "--log-format",
        choices=["plain", "json"],
        default=environ.get("CAPFLEET_LOG_FORMAT", defaults.log_format),
    )
    parser.add_argument(
        "--verbose", "-v", action="store_true", default=environ.get("CAPFLEET_VERBOSE", "") in {"1", "true"}
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        default=environ.get("CAPFLEET_STANDALONE", "") in {"1", "true"},
        help="do not coordinate with other instances through a kopf peering object",
    )
    parser.add_argument("--kubeconfig", default=environ.get("KUBECONFIG") or None)
    parser.add_argument(
        "--leader-elect",
        action="store_true",
        default=environ.get("CAPFLEET_LEADER_ELECT", "") in {"1", "true"},
        help="act only while holding the Lease capfleet-<operator>[-<watch filter>]; other replicas stand by",
    )
    parser.add_argument(
        "--leader-election-namespace",
        default=environ.get("CAPFLEET_LEADER_ELECTION_NAMESPACE") or environ.get("POD_NAMESPACE") or None,
        help="namespace of the Lease; the pod's own when omitted",
    )
    parser.add_argument(
        "--watch-filter",
        default=environ.get("CAPFLEET_WATCH_FILTER", ""),
        help=f"serve only objects labelled {ownership.WATCH_FILTER_LABEL}=<this value> (a shard, as in "
        "Cluster API's --watch-filter); every object when empty",
    )
    parser.add_argument(
        "--leader-label",
        action="store_true",
        default=environ.get("CAPFLEET_LEADER_LABEL", "") in {"1", "true"},
        help="while leading, label this replica's pod (POD_NAME) capfleet.dev/leader=true",
    )
    args = parser.parse_args(list(argv))
    return Options(
        namespaces=tuple(args.namespaces or env_namespaces),
        health_address=args.health_address,
        metrics_address=args.metrics_address,
        metrics_secure_address=args.metrics_secure_address,
        metrics_cert_dir=args.metrics_cert_dir,
        log_format=args.log_format,
        verbose=args.verbose,
        standalone=args.standalone,
        kubeconfig=args.kubeconfig,
        leader_elect=args.leader_elect,
        leader_election_namespace=args.leader_election_namespace,
        leader_label=args.leader_label,
        watch_filter=args.watch_filter,
    )


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)
