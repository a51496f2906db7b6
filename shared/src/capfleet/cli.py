"""`capfleet`: the fleet in a terminal, and the one-off tools an administrator runs.

    capfleet describe cluster NAME [-n NAMESPACE]   the Cluster and everything it owns, with conditions
    capfleet get vms|hypervisors|servers|quotas [-n NAMESPACE | -A]
    capfleet netbox-setup --url URL [--check]       make a NetBox ready for capfleet

Installed as `capfleet` and as `kubectl-capfleet`, so `kubectl capfleet get vms` works as a kubectl
plugin. It reads through the Kubernetes API with the caller's kubeconfig (`KUBECONFIG`, `--kubeconfig`),
so RBAC decides what it may show; it never reads a Secret. Colour when standard output is a terminal
(`--color always|never` to choose).

Exit status: 0 shown, 1 the named cluster does not exist, 2 bad arguments or the API refused.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from capfleet import netboxsetup, resources, tables, tree
from capfleet.api import kinds
from capfleet.kube import Kube, KubeError

FIELD_MANAGER = "capfleet-cli"
# ANSI colours by row health (tables.health) and condition mark (tree.conditions_text).
PAINT = {"good": "32", "bad": "31", "busy": "33"}
MARKS = {"✓": "32", "✗": "31", "!": "33", "?": "33"}


def colour_wanted(choice: str, out: TextIO) -> bool:
    return choice == "always" or (choice == "auto" and out.isatty())


def paint_tree(text: str) -> str:
    """The tree with each condition line coloured by its mark."""
    lines = []
    for line in text.splitlines():
        stripped = line.lstrip("│ ")
        colour = MARKS.get(stripped[:1])
        lines.append(
            f"{line[: len(line) - len(stripped)]}\033[{colour}m{stripped}\033[0m" if colour else line
        )
    return "\n".join(lines)


async def describe_cluster(kube: Kube, namespace: str, name: str) -> str | None:
    """The tree, or None when there is no such Cluster."""
    if await kube.get(resources.CAPI_CLUSTERS, name, namespace) is None:
        return None
    return await tree.cluster_tree(kube, namespace, name)


async def table_of(kube: Kube, what: str, namespace: str | None) -> tables.Table:
    now = datetime.datetime.now(datetime.UTC)
    if what == "vms":
        return tables.vms(await kube.list(kinds.LIBVIRT_VM.resource, namespace), now)
    if what == "hypervisors":
        placed = await kube.list(kinds.LIBVIRT_VM.resource)
        return tables.hypervisors(await kube.list(kinds.HYPERVISOR.resource), placed)
    if what == "servers":
        instances = await kube.list(kinds.BAREMETAL_INSTANCE.resource, namespace)
        devices = await kube.list(kinds.NETBOX_DEVICE.resource, namespace)
        return tables.servers(instances, devices, now)
    return tables.quotas(await kube.list(kinds.VM_QUOTA.resource, namespace))


async def show(args: argparse.Namespace, out: TextIO) -> int:
    colour = colour_wanted(args.color, out)
    async with Kube.connect(FIELD_MANAGER, args.kubeconfig) as kube:
        if args.command == "describe":
            text = await describe_cluster(kube, args.namespace, args.name)
            if text is None:
                print(f"capfleet: no Cluster {args.namespace}/{args.name}", file=sys.stderr)
                return 1
            print(paint_tree(text) if colour else text, file=out)
            return 0
        namespace = None if args.all_namespaces else args.namespace
        table = await table_of(kube, args.what, namespace)
        print(tables.render(table, PAINT if colour else None), file=out)
        return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="capfleet", description="capfleet's command-line tools")
    commands = top.add_subparsers(dest="command", required=True)
    netboxsetup.add_parser(commands)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    common.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    common.add_argument("-n", "--namespace", default="default")
    describe = commands.add_parser("describe", parents=[common], help="a cluster as the tree of its objects")
    describe.add_argument("kind", choices=("cluster",))
    describe.add_argument("name")
    get = commands.add_parser("get", parents=[common], help="VMs, hypervisors, servers or quotas as a table")
    get.add_argument("what", choices=("vms", "hypervisors", "servers", "quotas"))
    get.add_argument("-A", "--all-namespaces", action="store_true")
    return top


def main(argv: Sequence[str] | None = None, out: Any = None) -> int:
    arguments = parser()
    args = arguments.parse_args(argv)
    if args.command == "netbox-setup":
        return netboxsetup.run(args, arguments)
    try:
        return asyncio.run(show(args, out or sys.stdout))
    except KubeError as error:
        print(f"capfleet: the API server refused: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
