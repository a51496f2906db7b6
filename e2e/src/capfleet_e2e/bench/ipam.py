"""`make bench-ipam`: ipam-address against the reference Go IPAM provider, 1,000 claims from one pool each.

On one real control plane, first capfleet's ipam-address (`python -m ipam_address`, a HybridIPPool) and then
sigs.k8s.io/cluster-api-ipam-provider-in-cluster (an InClusterIPPool with the same addresses, prefix and
gateway) each allocate every claim of a burst, in a namespace of their own. It prints one row per provider
and the capfleet/reference ratio, and writes the same to _artifacts/bench-ipam.json. A duplicate address,
a claim left unbound, or a provider that fails exits non-zero.

    python -m capfleet_e2e.bench.ipam [--claims 1000] [--only capfleet|reference] [--concurrency 50]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capfleet.api.kinds import IPAM_GROUP, VERSION
from capfleet_e2e.bench.measure import ScenarioResult, format_table, ratios, report
from capfleet_e2e.bench.reference import MODULE, ensure_reference, install_reference_crds, reference_argv
from capfleet_e2e.bench.reference import VERSION as REFERENCE_VERSION
from capfleet_e2e.bench.scenario import AuditTail, Provider, run_scenario
from capfleet_e2e.controlplane import ControlPlane
from capfleet_e2e.kubebin import repo_root

POOL_NAME = "bench"
MAX_CLAIMS = 2**14 - 3  # a /18 without its network, broadcast and gateway addresses


def pool_spec(claims: int) -> dict[str, Any]:
    """The same pool for both providers: the smallest prefix from /22 down whose addresses, without the
    network, broadcast and gateway ones, hold every claim (1,021 in a /22)."""
    prefix = 22
    while 2 ** (32 - prefix) - 3 < claims:
        prefix -= 1
    return {"addresses": [f"10.10.0.0/{prefix}"], "prefix": prefix, "gateway": "10.10.0.1"}


def capfleet_provider(spec: dict[str, Any]) -> Provider:
    def argv(kubeconfig: Path, health: int, metrics: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "ipam_address",
            "--standalone",
            f"--kubeconfig={kubeconfig}",
            "--namespace=bench-capfleet",
            f"--health-address=127.0.0.1:{health}",
            f"--metrics-address=127.0.0.1:{metrics}",
        ]

    pool = {
        "apiVersion": f"{IPAM_GROUP}/{VERSION}",
        "kind": "HybridIPPool",
        "metadata": {"name": POOL_NAME, "namespace": "bench-capfleet"},
        "spec": spec,
    }
    return Provider("capfleet", "ipam-address (python -m ipam_address)", "bench-capfleet", pool, argv)


def reference_provider(binary: Path, spec: dict[str, Any]) -> Provider:
    def argv(kubeconfig: Path, health: int, metrics: int) -> list[str]:
        return reference_argv(binary, kubeconfig, "bench-reference", health, metrics)

    pool = {
        "apiVersion": "ipam.cluster.x-k8s.io/v1alpha2",
        "kind": "InClusterIPPool",
        "metadata": {"name": POOL_NAME, "namespace": "bench-reference"},
        "spec": spec,
    }
    return Provider("reference", f"{MODULE}@{REFERENCE_VERSION}", "bench-reference", pool, argv)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m capfleet_e2e.bench.ipam", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--claims", type=int, default=1000, help=f"claims per provider (at most {MAX_CLAIMS:,})"
    )
    parser.add_argument("--only", choices=["capfleet", "reference"], help="run one side only")
    parser.add_argument("--concurrency", type=int, default=50, help="claim creations in flight at once")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds until every claim is bound")
    parser.add_argument(
        "--output", type=Path, default=repo_root() / "_artifacts" / "bench-ipam.json", help="JSON report"
    )
    args = parser.parse_args(list(argv))
    if not 1 <= args.claims <= MAX_CLAIMS:
        parser.error(f"--claims must be between 1 and {MAX_CLAIMS} (the largest pool's free addresses)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spec = pool_spec(args.claims)
    providers: list[Provider] = []
    if args.only in (None, "capfleet"):
        providers.append(capfleet_provider(spec))
    if args.only in (None, "reference"):
        providers.append(reference_provider(ensure_reference(), spec))
    results: list[ScenarioResult] = []
    scratch = Path(tempfile.mkdtemp(prefix="capfleet-bench-"))
    try:
        with ControlPlane() as cp:
            print(f"control plane up in {cp.startup_seconds:.1f}s; logs in {cp.log_dir}", flush=True)
            if any(p.name == "reference" for p in providers):
                install_reference_crds(cp.kubectl)
            tail = AuditTail(cp)
            tail.read()
            for provider in providers:
                side = provider.name
                print(
                    f"{side}: {args.claims} claims from one pool with {provider.description} ...", flush=True
                )
                result = run_scenario(
                    cp, tail, provider, args.claims, args.concurrency, args.timeout, scratch
                )
                results.append(result)
                print(f"{side}: {'ok' if result.ok else 'FAILED'}", flush=True)
            log_dir = str(cp.log_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    by_name = {r.name: r for r in results}
    ratio = ratios(by_name["capfleet"], by_name["reference"]) if len(by_name) == 2 else None
    print()
    print(format_table(results, ratio))
    for r in results:
        print(f"\n{r.name}: {r.provider}; requests by verb {r.requests_by_verb}; user agents {r.user_agents}")
        for problem in ([r.error] if r.error else []) + r.problems[:20]:
            print(f"  {r.name}: {problem.splitlines()[0]}")  # in full in the JSON; logs in log_dir
    meta = {"claims": args.claims, "concurrency": args.concurrency, "pool": spec, "log_dir": log_dir}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report(results, ratio, **meta), indent=2) + "\n")
    print(f"\nwritten to {args.output}")
    return 0 if results and all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
