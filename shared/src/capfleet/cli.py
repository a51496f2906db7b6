"""`capfleet`: the fleet in a terminal, and the one-off tools an administrator runs.

    capfleet describe cluster NAME [-n NAMESPACE] [-o json|yaml]
        the Cluster and everything it owns, with conditions (or those objects as a List)
    capfleet get vms|hypervisors|servers|quotas [-n NAMESPACE | -A] [-l SELECTOR] [-o wide|json|yaml]
    capfleet netbox-setup --url URL [--check]       make a NetBox ready for capfleet (the `netbox` extra)

Every `describe` and `get` also takes `--kubeconfig FILE`, `--context NAME` and `--color auto|always|never`.

Installed as `capfleet` and as `kubectl-capfleet`, so `kubectl capfleet get vms` works as a kubectl
plugin, and follows kubectl's conventions: `-n` defaults to the namespace of the kubeconfig's context
(else `default`), `-l` is a label selector the API server applies, `-o json|yaml` prints the objects as a
kubectl List. It reads through the Kubernetes API with the caller's kubeconfig (`--kubeconfig`, else
`KUBECONFIG`, else ~/.kube/config), so RBAC decides what it may show; it never reads a Secret. Tables are
coloured when standard output is a terminal and NO_COLOR is unset or empty (`--color always|never` to
choose); JSON and YAML never are.

Exit status: 0 shown, 1 the named cluster does not exist, 2 bad arguments, an unusable kubeconfig, or the
API server refused or could not be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import yaml
from kubernetes_asyncio.config.config_exception import ConfigException

from capfleet import resources, tables, tree
from capfleet.api import kinds
from capfleet.kube import Kube, KubeError, Obj
from capfleet.resources import Resource

FIELD_MANAGER = "capfleet-cli"
# ANSI colours by row health (tables.health) and condition mark (tree.conditions_text).
PAINT = {"good": "32", "bad": "31", "busy": "33"}
MARKS = {"✓": "32", "✗": "31", "!": "33", "?": "33"}
STRUCTURED = ("json", "yaml")
DEFAULT_NAMESPACE = "default"
NETBOX_MISSING = (
    "capfleet netbox-setup needs the `netbox` extra (pynetbox, requests): install capfleet[netbox], "
    "e.g. `uv tool install --force './shared[netbox]'`"
)

# What `get` lists, by its argument: the objects its table has a row for, and `-o json|yaml` prints.
LISTED: dict[str, Resource] = {
    "vms": kinds.LIBVIRT_VM.resource,
    "hypervisors": kinds.HYPERVISOR.resource,
    "servers": kinds.BAREMETAL_INSTANCE.resource,
    "quotas": kinds.VM_QUOTA.resource,
}

Cell = Callable[[Mapping[str, Any]], str]
Column = tuple[str, Cell]


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str]) -> list[Path]:
    """The files kubectl reads: `--kubeconfig`, else each file of KUBECONFIG, else ~/.kube/config."""
    if flag:
        return [Path(flag).expanduser()]
    listed = [Path(p).expanduser() for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [Path("~/.kube/config").expanduser()]


class KubeconfigError(Exception):
    """A kubeconfig file that cannot be read or parsed."""


def read_kubeconfigs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The files that exist, parsed: kubectl skips a missing file of KUBECONFIG, and so does the client
    this connects with; an empty file counts as no file."""
    documents = []
    for path in paths:
        if not path.is_file():
            continue
        try:
            document = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as error:
            raise KubeconfigError(f"{path}: {error}") from error
        if isinstance(document, dict):
            documents.append(document)
    return documents


def merge_kubeconfigs(documents: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the files say together, for the fields read here, by kubectl's rule: the first file that sets
    current-context wins, and the first to define a context of a given name."""
    current: str | None = None
    contexts: dict[str, Any] = {}
    for document in documents:
        current = current or document.get("current-context") or None
        for entry in document.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name"):
                contexts.setdefault(str(entry["name"]), entry)
    return {"current-context": current, "contexts": list(contexts.values())}


def context_namespace(kubeconfig: Mapping[str, Any], context: str | None) -> str:
    """The namespace of `context` (by default the current one), else `default`, as kubectl's `-n`."""
    name = context or kubeconfig.get("current-context")
    for entry in kubeconfig.get("contexts") or []:
        if entry.get("name") == name:
            return str((entry.get("context") or {}).get("namespace") or DEFAULT_NAMESPACE)
    return DEFAULT_NAMESPACE


def chosen_namespace(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The namespace to show, None for all of them (`get -A`)."""
    if getattr(args, "all_namespaces", False):
        return None
    if args.namespace:
        return str(args.namespace)
    documents = read_kubeconfigs(kubeconfig_paths(args.kubeconfig, environ))
    return context_namespace(merge_kubeconfigs(documents), args.context)


def colour_wanted(choice: str, out: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """`always` and `never` are the person's word; `auto` colours a terminal unless NO_COLOR is set to
    anything but the empty string (https://no-color.org)."""
    if choice != "auto":
        return choice == "always"
    return not (os.environ if environ is None else environ).get("NO_COLOR") and out.isatty()


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


def shown(obj: Mapping[str, Any], resource: Resource) -> Obj:
    """An object as `kubectl get -o yaml` prints it: with its apiVersion and kind (a list's items may
    lack them), without metadata.managedFields (kubectl hides them too: bookkeeping, not state)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {"apiVersion": resource.api_version, "kind": resource.kind, **obj, "metadata": meta}


def render_list(items: Iterable[Mapping[str, Any]], output: str) -> str:
    """The objects as a kubectl List, in JSON (kubectl's four-space indent) or YAML, in the API's key
    order so apiVersion, kind and metadata come first."""
    document = {"apiVersion": "v1", "kind": "List", "items": list(items)}
    if output == "json":
        return json.dumps(document, indent=4, ensure_ascii=False)
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True).rstrip("\n")


def owned_tree(objects: Sequence[Mapping[str, Any]], root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`root` and everything it owns, transitively, in the order `capfleet describe` prints them: an
    object's owner is its controller reference, else its first ownerReference (tree.cluster_tree's rule).
    An ownership loop, which the API server does not forbid, is walked once."""
    children: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for obj in objects:
        refs = obj["metadata"].get("ownerReferences") or []
        parent = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
        if parent is not None:
            children[str(parent["uid"])].append(obj)
    found: list[Mapping[str, Any]] = []
    seen: set[str] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        uid = str(obj["metadata"].get("uid"))
        if uid in seen:
            continue
        seen.add(uid)
        found.append(obj)
        kids = children.get(uid, [])
        stack.extend(sorted(kids, key=lambda o: (o.get("kind", ""), o["metadata"]["name"]), reverse=True))
    return found


def at(*path: str) -> Cell:
    """A cell with the value at `path` in the object, `-` when it is not set."""

    def cell(obj: Mapping[str, Any]) -> str:
        value: Any = obj
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        return "-" if value is None or value == "" else str(value)

    return cell


def joined(values: Iterable[Any]) -> str:
    return ",".join(str(v) for v in values if v) or "-"


def macs(obj: Mapping[str, Any]) -> str:
    """Each NIC's MAC address, in the spec's order."""
    return joined(nic.get("macAddress") for nic in (obj.get("spec") or {}).get("interfaces") or [])


def addresses(obj: Mapping[str, Any]) -> str:
    """The NICs' static addresses without their prefix length; `-` for DHCP, whose lease no object
    records."""
    nics = (obj.get("spec") or {}).get("interfaces") or []
    return joined(str(a).split("/")[0] for nic in nics for a in nic.get("addresses") or [])


def attempts(obj: Mapping[str, Any]) -> str:
    """Deployments tried of those allowed (`1/3`)."""
    tried = (obj.get("status") or {}).get("provisioningAttempts") or 0
    allowed = (obj.get("spec") or {}).get("maxProvisioningAttempts")
    return f"{tried}/{allowed}" if allowed else str(tried)


def reserved(obj: Mapping[str, Any]) -> str:
    """What the hypervisor keeps for itself, out of the VMs' reach."""
    kept = (obj.get("spec") or {}).get("reserved") or {}
    return f"{kept.get('vcpus', 0)} vCPUs, {tables.mib(kept.get('memoryMiB', 0))}"


def quota_left(obj: Mapping[str, Any]) -> str:
    """What each limit of a quota leaves for more VMs; `-` when it limits nothing."""
    hard = (obj.get("spec") or {}).get("hard") or {}
    used = (obj.get("status") or {}).get("used") or {}
    shows: dict[str, Callable[[int], str]] = {
        "vcpus": lambda v: f"{v} vCPUs",
        "memoryMiB": tables.mib,
        "storageGiB": lambda v: f"{v} GiB disk",
        "vms": lambda v: f"{v} VMs",
    }
    left = [show(max(0, int(hard[k]) - int(used.get(k, 0)))) for k, show in shows.items() if k in hard]
    return ", ".join(left) or "-"


def wide_columns(what: str, now: datetime.datetime) -> tuple[Column, ...]:
    """The columns `-o wide` adds to `get what`'s table: where a machine is on the network and how it is
    reached, which the default table leaves out to fit a terminal."""

    def age(obj: Mapping[str, Any]) -> str:
        return tables.age(obj["metadata"].get("creationTimestamp"), now)

    return {
        "vms": (
            ("MAC", macs),
            ("IP", addresses),
            ("DOMAIN", at("status", "domainName")),
            ("FAILURE DOMAIN", at("spec", "failureDomain")),
        ),
        "hypervisors": (
            ("USER", at("spec", "connection", "user")),
            ("STORAGE POOL", at("spec", "storagePool")),
            ("RESERVED", reserved),
            ("LIBVIRT", at("status", "libvirtVersion")),
            ("QEMU", at("status", "qemuVersion")),
            ("AGE", age),
        ),
        "servers": (
            ("BOOT MAC", at("spec", "bootMACAddress")),
            ("IP", addresses),
            ("PROVIDER ID", at("spec", "providerID")),
            ("ATTEMPTS", attempts),
            ("OWNER", lambda obj: tables.owner_text(obj["metadata"])),
        ),
        "quotas": (("LEFT", quota_left), ("AGE", age)),
    }[what]


def widen(
    table: tables.Table, objects: Iterable[Mapping[str, Any]], columns: Sequence[Column]
) -> tables.Table:
    """The table with `columns` added, each row's cells read from the object the row shows: rows are
    matched by namespace and name, since the table orders its rows itself."""
    by_name = {(str(o["metadata"].get("namespace", "")), str(o["metadata"]["name"])): o for o in objects}
    name_at = table.header.index("NAME")
    namespace_at = table.header.index("NAMESPACE") if "NAMESPACE" in table.header else None
    rows = []
    for row in table.rows:
        obj = by_name[("" if namespace_at is None else row[namespace_at], row[name_at])]
        rows.append((*row, *(cell(obj) for _, cell in columns)))
    return tables.Table((*table.header, *(title for title, _ in columns)), rows, table.health)


async def describe_cluster(kube: Kube, namespace: str, name: str) -> str | None:
    """The tree, or None when there is no such Cluster."""
    if await kube.get(resources.CAPI_CLUSTERS, name, namespace) is None:
        return None
    return await tree.cluster_tree(kube, namespace, name)


async def cluster_objects(kube: Kube, namespace: str, name: str) -> list[Mapping[str, Any]] | None:
    """The Cluster and the objects of its tree, or None when there is no such Cluster."""
    listed = [shown(obj, r) for r in tree.SHOWN for obj in await kube.list(r, namespace)]
    root = next((o for o in listed if o["kind"] == "Cluster" and o["metadata"]["name"] == name), None)
    return None if root is None else owned_tree(listed, root)


async def listed_table(
    kube: Kube, what: str, namespace: str | None, selector: str | None
) -> tuple[list[Obj], tables.Table]:
    """The objects `get what` shows (the selector picks among them) and their table. The objects a table
    reads beside them (the VMs a hypervisor counts, a server's NetBox device) are not filtered: a
    selector chooses rows, not what a row says."""
    now = datetime.datetime.now(datetime.UTC)
    objects = await kube.list(LISTED[what], namespace, label_selector=selector)
    if what == "vms":
        return objects, tables.vms(objects, now)
    if what == "hypervisors":
        return objects, tables.hypervisors(objects, await kube.list(kinds.LIBVIRT_VM.resource))
    if what == "servers":
        devices = await kube.list(kinds.NETBOX_DEVICE.resource, namespace)
        return objects, tables.servers(objects, devices, now)
    return objects, tables.quotas(objects)


async def describe(kube: Kube, args: argparse.Namespace, namespace: str, out: TextIO, colour: bool) -> int:
    text: str | None
    if args.output:
        found = await cluster_objects(kube, namespace, args.name)
        text = None if found is None else render_list(found, args.output)
    else:
        text = await describe_cluster(kube, namespace, args.name)
        text = paint_tree(text) if text is not None and colour else text
    if text is None:
        print(f"capfleet: no Cluster {namespace}/{args.name}", file=sys.stderr)
        return 1
    print(text, file=out)
    return 0


def nothing_found(resource: Resource, namespace: str | None) -> str:
    """kubectl's word for an empty table, on standard error: a script reading the table reads nothing."""
    where = f" in {namespace} namespace" if namespace is not None and resource.namespaced else ""
    return f"No resources found{where}."


async def get(kube: Kube, args: argparse.Namespace, namespace: str | None, out: TextIO, colour: bool) -> int:
    objects, table = await listed_table(kube, args.what, namespace, args.selector)
    if args.output in STRUCTURED:
        print(render_list((shown(o, LISTED[args.what]) for o in objects), args.output), file=out)
        return 0
    if not objects:
        print(nothing_found(LISTED[args.what], namespace), file=sys.stderr)
        return 0
    if args.output == "wide":
        table = widen(table, objects, wide_columns(args.what, datetime.datetime.now(datetime.UTC)))
    print(tables.render(table, PAINT if colour else None), file=out)
    return 0


async def show(args: argparse.Namespace, out: TextIO, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    namespace = chosen_namespace(args, environ)
    colour = args.output not in STRUCTURED and colour_wanted(args.color, out, environ)
    async with Kube.connect(FIELD_MANAGER, args.kubeconfig, context=args.context) as kube:
        if args.command == "describe":
            assert namespace is not None  # describe has no -A
            return await describe(kube, args, namespace, out, colour)
        return await get(kube, args, namespace, out, colour)


def program_name(argv0: str) -> str:
    """`kubectl capfleet` when kubectl runs this as its plugin, so usage lines read as typed."""
    return "kubectl capfleet" if Path(argv0).name == "kubectl-capfleet" else "capfleet"


def netbox_setup() -> ModuleType | None:
    """capfleet.netboxsetup, or None where the `netbox` extra is not installed: a plain install of the CLI
    (`uv tool install`) still describes and gets, and says what netbox-setup needs."""
    try:
        from capfleet import netboxsetup
    except ModuleNotFoundError as missing:
        if missing.name not in {"pynetbox", "requests"}:
            raise
        return None
    return netboxsetup


def add_netbox_setup(commands: Any) -> None:
    setup = netbox_setup()
    if setup is not None:
        setup.add_parser(commands)
        return
    stub = commands.add_parser(
        "netbox-setup", help="make a NetBox ready for capfleet (needs the netbox extra)"
    )
    stub.set_defaults(netbox_missing=True)


def parser(prog: str = "capfleet") -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=prog, description="capfleet's command-line tools")
    commands = top.add_subparsers(dest="command", required=True)
    add_netbox_setup(commands)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, then ~/.kube/config)")
    common.add_argument("--context", help="kubeconfig context (default: its current context)")
    common.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="auto: on a terminal, unless NO_COLOR",
    )
    common.add_argument(
        "-n", "--namespace", help="namespace (default: the context's namespace, else default)"
    )
    describe = commands.add_parser("describe", parents=[common], help="a cluster as the tree of its objects")
    describe.add_argument("kind", choices=("cluster",))
    describe.add_argument("name")
    describe.add_argument("-o", "--output", choices=STRUCTURED, help="the Cluster and its tree as a List")
    get = commands.add_parser("get", parents=[common], help="VMs, hypervisors, servers or quotas as a table")
    get.add_argument("what", choices=tuple(LISTED))
    get.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    get.add_argument("-l", "--selector", help="label selector, as kubectl's (app=web,tier!=db)")
    get.add_argument(
        "-o", "--output", choices=("wide", *STRUCTURED), help="wide: more columns; json, yaml: a List"
    )
    return top


def main(argv: Sequence[str] | None = None, out: Any = None) -> int:
    arguments = parser(program_name(sys.argv[0]))
    # Known arguments first: without the netbox extra, netbox-setup's own flags are unknown here.
    args, unknown = arguments.parse_known_args(argv)
    if getattr(args, "netbox_missing", False):
        print(NETBOX_MISSING, file=sys.stderr)
        return 2
    if unknown:
        arguments.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "netbox-setup":
        setup = netbox_setup()
        assert setup is not None  # else the stub answered above
        return int(setup.run(args, arguments))
    try:
        return asyncio.run(show(args, out or sys.stdout))
    except KubeError as error:
        # Status 0 is no answer at all (a timeout, a refused connection): not the API server's refusal.
        said = "the API server refused" if error.status else "cannot reach the API server"
        print(f"capfleet: {said}: {error}", file=sys.stderr)
    except (KubeconfigError, ConfigException) as error:
        print(f"capfleet: cannot use the kubeconfig: {error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
