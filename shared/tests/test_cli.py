"""`capfleet describe` and `capfleet get`: kubectl's conventions as pure functions (arguments, the
kubeconfig's namespace, colour, -o wide|json|yaml), then against a real API server, and `kubectl capfleet`
as a plugin.

No operator runs: the objects are written as the operators would leave them, so what is checked is what
the CLI reads and how it shows it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from capfleet import cli, resources, tables
from capfleet.api import kinds
from capfleet.kube import Kube
from capfleet_e2e.controlplane import Cluster
from capfleet_e2e.standins import paused_cluster

NOW = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)


class Terminal(io.StringIO):
    """Standard output as a terminal."""

    def isatty(self) -> bool:
        return True


def parse(*argv: str) -> argparse.Namespace:
    return cli.parser().parse_args(argv)


def test_get_takes_kubectls_flags() -> None:
    args = parse("get", "vms", "-o", "wide", "-l", "tier=cp,app!=x", "--context", "lab", "--kubeconfig", "k")
    assert (args.what, args.output, args.selector, args.context, args.kubeconfig) == (
        "vms",
        "wide",
        "tier=cp,app!=x",
        "lab",
        "k",
    )
    assert args.namespace is None  # resolved later, from the kubeconfig
    assert not args.all_namespaces
    long = parse("get", "quotas", "--output", "yaml", "--selector", "a=b", "--namespace", "team", "-A")
    assert (long.output, long.selector, long.namespace, long.all_namespaces) == ("yaml", "a=b", "team", True)
    assert parse("get", "servers").output is None  # the table


def test_describe_takes_json_or_yaml_but_no_wide(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("describe", "cluster", "c1", "-o", "json").output == "json"
    assert parse("describe", "cluster", "c1", "--context", "lab").context == "lab"
    with pytest.raises(SystemExit) as exit_:
        parse("describe", "cluster", "c1", "-o", "wide")
    assert exit_.value.code == 2
    with pytest.raises(SystemExit):
        parse("get", "vms", "-o", "name")
    assert "invalid choice" in capsys.readouterr().err


def test_unknown_arguments_are_refused_with_status_2() -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["get", "vms", "--bogus"])
    assert exit_.value.code == 2


def test_usage_reads_as_typed_under_kubectl() -> None:
    assert cli.program_name("/usr/local/bin/kubectl-capfleet") == "kubectl capfleet"
    assert cli.program_name("/home/me/.local/bin/capfleet") == "capfleet"
    assert cli.parser("kubectl capfleet").format_usage().startswith("usage: kubectl capfleet")


def test_without_the_netbox_extra_netbox_setup_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "netbox_setup", lambda: None)
    assert cli.main(["netbox-setup", "--url", "https://netbox.example.com", "--check"]) == 2
    assert "capfleet[netbox]" in capsys.readouterr().err
    assert parse("get", "vms").what == "vms"  # everything else is there


def context(name: str, namespace: str | None = None) -> dict[str, Any]:
    inner = {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})}
    return {"name": name, "context": inner}


def test_kubeconfig_files_are_the_flag_else_each_one_listed_else_the_home_one() -> None:
    assert cli.kubeconfig_paths("/x/kc", {"KUBECONFIG": "/a"}) == [Path("/x/kc")]
    both = f"/a{os.pathsep}{os.pathsep}/b"
    assert cli.kubeconfig_paths(None, {"KUBECONFIG": both}) == [Path("/a"), Path("/b")]
    assert cli.kubeconfig_paths(None, {}) == [Path.home() / ".kube" / "config"]


def test_the_first_file_to_name_a_current_context_or_define_a_context_wins() -> None:
    merged = cli.merge_kubeconfigs(
        [
            {"contexts": [context("lab", "team-a")]},
            {"current-context": "lab", "contexts": [context("lab", "ignored"), context("prod", "ops")]},
            {"current-context": "prod"},
        ]
    )
    assert merged["current-context"] == "lab"
    assert cli.context_namespace(merged, None) == "team-a"
    assert cli.context_namespace(merged, "prod") == "ops"


def test_a_context_without_a_namespace_or_no_context_means_default() -> None:
    kubeconfig = {"current-context": "lab", "contexts": [context("lab"), context("other", "x")]}
    assert cli.context_namespace(kubeconfig, None) == "default"
    assert cli.context_namespace(kubeconfig, "missing") == "default"
    assert cli.context_namespace({}, None) == "default"
    assert cli.context_namespace(cli.merge_kubeconfigs([]), None) == "default"


def write_kubeconfig(path: Path, current: str, *contexts: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"current-context": current, "contexts": list(contexts)}))
    return path


def namespace_of(*argv: str, environ: dict[str, str]) -> str | None:
    return cli.chosen_namespace(parse(*argv), environ)


def test_n_defaults_to_the_contexts_namespace(tmp_path: Path) -> None:
    kc = write_kubeconfig(tmp_path / "kc", "lab", context("lab", "team-a"), context("prod", "ops"))
    missing = tmp_path / "missing"
    environ = {"KUBECONFIG": f"{missing}{os.pathsep}{kc}"}  # a missing file is skipped, as kubectl does
    assert namespace_of("get", "vms", environ=environ) == "team-a"
    assert namespace_of("get", "vms", "--context", "prod", environ=environ) == "ops"
    assert namespace_of("describe", "cluster", "c1", "--kubeconfig", str(kc), environ={}) == "team-a"
    assert namespace_of("get", "vms", "-n", "mine", environ=environ) == "mine"
    assert namespace_of("get", "vms", "-A", environ=environ) is None
    assert namespace_of("get", "vms", "-A", "-n", "mine", environ=environ) is None
    assert namespace_of("get", "vms", environ={"KUBECONFIG": str(missing)}) == "default"
    (tmp_path / "empty").write_text("")
    assert namespace_of("get", "vms", "--kubeconfig", str(tmp_path / "empty"), environ={}) == "default"


def test_an_unreadable_kubeconfig_is_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kc").write_text("contexts: [unclosed")
    with pytest.raises(cli.KubeconfigError):
        cli.read_kubeconfigs([tmp_path / "kc"])
    assert cli.main(["get", "vms", "--kubeconfig", str(tmp_path / "kc")]) == 2
    assert "cannot use the kubeconfig" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("choice", "terminal", "no_color", "wanted"),
    [
        ("auto", True, None, True),
        ("auto", False, None, False),
        ("auto", True, "1", False),
        ("auto", True, "", True),  # set but empty: no-color.org counts it as unset
        ("always", False, "1", True),
        ("never", True, None, False),
    ],
)
def test_colour_on_a_terminal_unless_no_color(
    choice: str, terminal: bool, no_color: str | None, wanted: bool
) -> None:
    out = Terminal() if terminal else io.StringIO()
    environ = {} if no_color is None else {"NO_COLOR": no_color}
    assert cli.colour_wanted(choice, out, environ) is wanted


def vm(name: str, namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    meta = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "creationTimestamp": "2026-01-01T23:00:00Z",
        "managedFields": [{"manager": "libvirt-vm"}],
    }
    body = {"vcpus": 2, "memoryMiB": 2048, "disks": [{"name": "root", "sizeGiB": 20}], **spec}
    return {"metadata": meta, "spec": body, "status": {"domainName": f"{namespace}_{name}"}}


def test_a_listed_object_is_shown_with_its_kind_and_without_managed_fields() -> None:
    obj = cli.shown(vm("web"), kinds.LIBVIRT_VM.resource)
    assert list(obj)[:3] == ["apiVersion", "kind", "metadata"]
    assert obj["apiVersion"] == "libvirt.capfleet.dev/v1alpha1"
    assert obj["kind"] == "LibvirtVM"
    assert "managedFields" not in obj["metadata"]
    assert obj["metadata"]["name"] == "web"
    # An object that names its kind keeps it.
    assert cli.shown({"kind": "Cluster", "metadata": {}}, resources.CAPI_CLUSTERS)["kind"] == "Cluster"


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_are_a_kubectl_list(output: str) -> None:
    items = [cli.shown(vm("web"), kinds.LIBVIRT_VM.resource), cli.shown(vm("db"), kinds.LIBVIRT_VM.resource)]
    text = cli.render_list(items, output)
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert document == {"apiVersion": "v1", "kind": "List", "items": items}
    assert "\033[" not in text
    assert not text.endswith("\n")  # print adds the one newline
    assert cli.render_list([], output).count("items") == 1


def test_wide_adds_where_a_vm_is_on_the_network_to_the_row_of_each_vm() -> None:
    nic = {"macAddress": "52:54:00:00:00:01", "addresses": ["10.0.0.5/24", "10.0.0.6/24"]}
    dhcp = {"macAddress": "52:54:00:00:00:02"}
    web = vm("web", interfaces=[nic, dhcp], failureDomain="rack-1")
    db = vm("db")
    objects = [web, db]
    table = cli.widen(tables.vms(objects, NOW), objects, cli.wide_columns("vms", NOW))
    assert table.header[-4:] == ("MAC", "IP", "DOMAIN", "FAILURE DOMAIN")
    by_name = {row[1]: row[-4:] for row in table.rows}
    assert by_name["web"] == (
        "52:54:00:00:00:01,52:54:00:00:00:02",
        "10.0.0.5,10.0.0.6",
        "team-a_web",
        "rack-1",
    )
    assert by_name["db"] == ("-", "-", "team-a_db", "-")
    assert table.health == tables.vms(objects, NOW).health


def test_wide_matches_rows_by_namespace_and_name() -> None:
    objects = [vm("web", "b"), vm("web", "a")]
    table = cli.widen(tables.vms(objects, NOW), objects, cli.wide_columns("vms", NOW))
    assert [(row[0], row[-2]) for row in table.rows] == [("a", "a_web"), ("b", "b_web")]


def test_wide_hypervisors_servers_and_quotas() -> None:
    hv = {
        "metadata": {"name": "hv1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "connection": {"host": "hv1.lab", "user": "capfleet"},
            "storagePool": "default",
            "reserved": {"vcpus": 2, "memoryMiB": 4096},
        },
        "status": {"libvirtVersion": "9.0.0", "qemuVersion": "7.2.0"},
    }
    table = cli.widen(tables.hypervisors([hv], []), [hv], cli.wide_columns("hypervisors", NOW))
    assert table.rows[0][-6:] == ("capfleet", "default", "2 vCPUs, 4 GiB", "9.0.0", "7.2.0", "1d")

    owner = {"kind": "HybridMachine", "name": "w-0", "uid": "m", "controller": True}
    server = {
        "metadata": {"name": "s1", "namespace": "t", "ownerReferences": [owner]},
        "spec": {
            "bmc": {"address": "redfish://10.1.0.9/redfish/v1/Systems/1"},
            "bootMACAddress": "aa:bb:cc:dd:ee:ff",
            "interfaces": [{"macAddress": "aa:bb:cc:dd:ee:ff", "addresses": ["10.0.1.7/24"]}],
            "providerID": "baremetal://t/s1",
            "maxProvisioningAttempts": 3,
        },
        "status": {"provisioningAttempts": 1},
    }
    table = cli.widen(tables.servers([server], [], NOW), [server], cli.wide_columns("servers", NOW))
    assert table.header[-5:] == ("BOOT MAC", "IP", "PROVIDER ID", "ATTEMPTS", "OWNER")
    assert table.rows[0][-5:] == (
        "aa:bb:cc:dd:ee:ff",
        "10.0.1.7",
        "baremetal://t/s1",
        "1/3",
        "HybridMachine/w-0",
    )

    quota = {
        "metadata": {"name": "team", "namespace": "t", "creationTimestamp": "2026-01-01T12:00:00Z"},
        "spec": {"hard": {"vcpus": 8, "memoryMiB": 8192, "vms": 2}},
        "status": {"used": {"vcpus": 10, "memoryMiB": 2048, "vms": 1}},
    }
    table = cli.widen(tables.quotas([quota]), [quota], cli.wide_columns("quotas", NOW))
    assert table.rows[0][-2:] == ("0 vCPUs, 6 GiB, 1 VMs", "12h")
    unlimited = {**quota, "spec": {"hard": {}}}
    assert cli.quota_left(unlimited) == "-"


def owned(kind: str, name: str, *owners: tuple[str, bool]) -> dict[str, Any]:
    refs = [{"kind": "X", "name": "x", "uid": uid, "controller": controller} for uid, controller in owners]
    return {"kind": kind, "metadata": {"name": name, "uid": name, "ownerReferences": refs}}


def test_describe_lists_the_cluster_and_what_it_owns_in_the_trees_order() -> None:
    cluster = owned("Cluster", "c1")
    objects = [
        owned("Machine", "m-b", ("c1", True)),
        owned("Machine", "m-a", ("c1", True)),
        owned("LibvirtVM", "vm-a", ("other", False), ("m-a", True)),  # the controller is the owner
        owned("IPAddressClaim", "claim", ("m-a", False)),  # no controller: the first owner
        owned("Machine", "elsewhere", ("c2", True)),
        cluster,
        owned("Loop", "l1", ("l2", True)),
        owned("Loop", "l2", ("l1", True)),
    ]
    names = [o["metadata"]["name"] for o in cli.owned_tree(objects, cluster)]
    assert names == ["c1", "m-a", "claim", "vm-a", "m-b"]
    loop = [o["metadata"]["name"] for o in cli.owned_tree(objects, objects[-2])]
    assert loop == ["l1", "l2"]


class FakeKube:
    """What `get` and `describe` call of `Kube`, answering from a dict of objects by resource."""

    def __init__(self, objects: dict[resources.Resource, list[dict[str, Any]]]) -> None:
        self.objects = objects
        self.lists: list[tuple[str, str | None, str | None]] = []

    async def get(self, resource: resources.Resource, name: str, namespace: str | None = None) -> Any:
        found = [o for o in self.objects.get(resource, []) if o["metadata"]["name"] == name]
        return found[0] if found else None

    async def list(
        self, resource: resources.Resource, namespace: str | None = None, *, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        self.lists.append((resource.plural, namespace, label_selector))
        return [
            o for o in self.objects.get(resource, []) if namespace in (None, o["metadata"].get("namespace"))
        ]


@pytest.fixture
def fake_kube(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeKube, list[dict[str, Any]]]:
    """`Kube.connect` replaced: what it was asked to connect to, and a fake client with a VM in team-a."""
    kube = FakeKube({kinds.LIBVIRT_VM.resource: [vm("web")]})
    connected: list[dict[str, Any]] = []

    @asynccontextmanager
    async def connect(
        field_manager: str, kubeconfig: str | None, *, context: str | None
    ) -> AsyncIterator[Any]:
        connected.append({"kubeconfig": kubeconfig, "context": context})
        yield kube

    monkeypatch.setattr(Kube, "connect", connect)
    return kube, connected


async def shown_text(
    *argv: str, out: io.StringIO | None = None, environ: dict[str, str] | None = None
) -> str:
    out = out or io.StringIO()
    assert await cli.show(parse(*argv), out, environ or {}) == 0
    return out.getvalue()


async def test_get_passes_the_selector_and_context_and_prints_a_list(
    fake_kube: tuple[FakeKube, list[dict[str, Any]]], tmp_path: Path
) -> None:
    kube, connected = fake_kube
    kc = write_kubeconfig(tmp_path / "kc", "lab", context("lab", "team-a"))
    text = await shown_text(
        "get",
        "vms",
        "-l",
        "tier=cp",
        "-o",
        "json",
        "--color",
        "always",
        "--kubeconfig",
        str(kc),
        "--context",
        "lab",
    )
    assert connected == [{"kubeconfig": str(kc), "context": "lab"}]
    assert kube.lists == [("libvirtvms", "team-a", "tier=cp")]  # -n from the context
    document = json.loads(text)  # --color always colours tables, never JSON
    assert [(i["kind"], i["metadata"]["name"]) for i in document["items"]] == [("LibvirtVM", "web")]


async def test_get_hypervisors_selects_hypervisors_and_counts_every_vm(
    fake_kube: tuple[FakeKube, list[dict[str, Any]]],
) -> None:
    kube, _ = fake_kube
    await shown_text("get", "hypervisors", "-l", "rack=1", "-A")
    assert kube.lists == [("hypervisors", None, "rack=1"), ("libvirtvms", None, None)]


async def test_get_colours_a_terminal_unless_no_color(
    fake_kube: tuple[FakeKube, list[dict[str, Any]]],
) -> None:
    assert "\033[" in await shown_text("get", "vms", "-n", "team-a", out=Terminal())
    assert "\033[" not in await shown_text(
        "get", "vms", "-n", "team-a", out=Terminal(), environ={"NO_COLOR": "1"}
    )
    assert "\033[" in await shown_text(
        "get", "vms", "-n", "team-a", "--color", "always", environ={"NO_COLOR": "1"}
    )
    wide = await shown_text("get", "vms", "-n", "team-a", "-o", "wide")
    assert wide.splitlines()[0].split()[-3:] == ["DOMAIN", "FAILURE", "DOMAIN"]
    assert "team-a_web" in wide


async def test_an_empty_table_is_kubectls_word_on_standard_error(
    fake_kube: tuple[FakeKube, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert await shown_text("get", "vms", "-n", "team-b") == ""
    assert capsys.readouterr().err == "No resources found in team-b namespace.\n"
    assert await shown_text("get", "hypervisors", "-n", "team-b") == ""
    assert capsys.readouterr().err == "No resources found.\n"  # hypervisors are in no namespace
    assert json.loads(await shown_text("get", "quotas", "-A", "-o", "json"))["items"] == []
    assert capsys.readouterr().err == ""


async def test_describe_as_yaml_and_a_missing_cluster(
    fake_kube: tuple[FakeKube, list[dict[str, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    kube, _ = fake_kube
    cluster = {"metadata": {"name": "c1", "namespace": "team-a", "uid": "c1"}}
    machine = {
        "metadata": {
            "name": "m",
            "namespace": "team-a",
            "uid": "m",
            "ownerReferences": [{"kind": "Cluster", "name": "c1", "uid": "c1", "controller": True}],
        }
    }
    kube.objects[resources.CAPI_CLUSTERS] = [cluster]
    kube.objects[resources.CAPI_MACHINES] = [machine]
    document = yaml.safe_load(await shown_text("describe", "cluster", "c1", "-n", "team-a", "-o", "yaml"))
    assert document["kind"] == "List"
    assert [(i["kind"], i["metadata"]["name"]) for i in document["items"]] == [
        ("Cluster", "c1"),
        ("Machine", "m"),
    ]
    out = io.StringIO()
    assert await cli.show(parse("describe", "cluster", "nope", "-n", "team-a", "-o", "json"), out, {}) == 1
    assert "no Cluster team-a/nope" in capsys.readouterr().err
    assert out.getvalue() == ""


async def run(kubeconfig: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    args = cli.parser().parse_args([*argv, "--kubeconfig", str(kubeconfig), "--color", "never"])
    return await cli.show(args, out), out.getvalue()


async def make_cluster(kube: Kube, namespace: str) -> None:
    owner = await paused_cluster(kube, namespace, "c1")
    vm = {
        "apiVersion": kinds.LIBVIRT_VM.resource.api_version,
        "kind": "LibvirtVM",
        "metadata": {"name": "c1-cp-0", "ownerReferences": [owner]},
        "spec": {
            "vcpus": 2,
            "memoryMiB": 1024,
            "disks": [{"name": "root", "sizeGiB": 10}],
            "cloudInit": {"userDataSecretRef": {"name": "c1-cp-0"}},
        },
    }
    await kube.create(kinds.LIBVIRT_VM.resource, vm, namespace)
    status: dict[str, Any] = {
        "state": "running",
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "QuotaExceeded",
                "message": "Scheduled: VMQuota team: vCPUs 4 used + 2 asked > 4 allowed",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    }
    await kube.patch_status(kinds.LIBVIRT_VM.resource, "c1-cp-0", status, namespace)
    quota = {
        "apiVersion": kinds.VM_QUOTA.resource.api_version,
        "kind": "VMQuota",
        "metadata": {"name": "team"},
        "spec": {"hard": {"vcpus": 4}},
    }
    await kube.create(kinds.VM_QUOTA.resource, quota, namespace)


@pytest.mark.integration
async def test_describe_and_get_show_the_objects_and_why_they_wait(
    kube: Kube, namespace: str, kubeconfig: Path
) -> None:
    await make_cluster(kube, namespace)
    code, text = await run(kubeconfig, "describe", "cluster", "c1", "-n", namespace)
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == "Cluster c1"
    assert any(
        line.endswith("LibvirtVM c1-cp-0  hypervisor=None  domain=None  state=running") for line in lines
    )
    assert any(
        "✗ Ready: QuotaExceeded: Scheduled: VMQuota team: vCPUs 4 used + 2 asked > 4 allowed" in line
        for line in lines
    )

    code, text = await run(kubeconfig, "get", "vms", "-n", namespace)
    assert code == 0
    header, row = text.splitlines()
    assert header.split()[:3] == ["NAMESPACE", "NAME", "VCPUS"]
    assert row.split()[:2] == [namespace, "c1-cp-0"]
    assert "QuotaExceeded" in row
    assert "Cluster/c1" in row

    code, text = await run(kubeconfig, "get", "quotas", "-n", namespace)
    assert text.splitlines()[1].split() == [namespace, "team", "0", "/", "4", "-", "-", "-"]

    code, _ = await run(kubeconfig, "describe", "cluster", "nope", "-n", namespace)
    assert code == 1


@pytest.mark.integration
async def test_kubectl_runs_it_as_a_plugin(
    kube: Kube, namespace: str, kubeconfig: Path, control_plane: Cluster
) -> None:
    await make_cluster(kube, namespace)
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "kubectl-capfleet").exists()
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(kubeconfig)}
    kubectl = control_plane.kubectl.binary
    done = await asyncio.to_thread(
        subprocess.run,
        [str(kubectl), "capfleet", "get", "vms", "-n", namespace],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "c1-cp-0" in done.stdout
    assert "\033[" not in done.stdout  # not a terminal: no colour


def with_namespace(kubeconfig: Path, namespace: str, path: Path) -> Path:
    """The session's kubeconfig with `namespace` in its context, and a second context, `elsewhere`."""
    config = yaml.safe_load(kubeconfig.read_text())
    lab = config["contexts"][0]
    config["contexts"] = [
        {**lab, "context": {**lab["context"], "namespace": namespace}},
        {**lab, "name": "elsewhere", "context": {**lab["context"], "namespace": "default"}},
    ]
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.integration
async def test_kubectls_conventions_against_the_api_server(
    kube: Kube, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    await make_cluster(kube, namespace)
    await kube.patch(
        kinds.LIBVIRT_VM.resource, "c1-cp-0", {"metadata": {"labels": {"tier": "cp"}}}, namespace
    )
    scoped = with_namespace(kubeconfig, namespace, tmp_path / "kubeconfig")

    code, text = await run(scoped, "get", "vms")
    assert code == 0
    assert [row.split()[1] for row in text.splitlines()[1:]] == ["c1-cp-0"]
    code, text = await run(scoped, "get", "vms", "--context", "elsewhere")
    assert "c1-cp-0" not in text

    code, text = await run(scoped, "get", "vms", "-l", "tier=cp", "-o", "json")
    assert code == 0
    document = json.loads(text)
    assert (document["apiVersion"], document["kind"]) == ("v1", "List")
    [item] = document["items"]
    assert (item["apiVersion"], item["kind"]) == (kinds.LIBVIRT_VM.resource.api_version, "LibvirtVM")
    assert item["metadata"]["labels"] == {"tier": "cp"}
    assert "managedFields" not in item["metadata"]
    _, text = await run(scoped, "get", "vms", "-l", "tier=worker", "-o", "yaml")
    assert yaml.safe_load(text)["items"] == []

    code, text = await run(scoped, "get", "vms", "-o", "wide")
    assert code == 0
    assert text.splitlines()[0].split()[-4:] == ["IP", "DOMAIN", "FAILURE", "DOMAIN"]

    code, text = await run(scoped, "describe", "cluster", "c1", "-o", "yaml")
    assert code == 0
    kinds_shown = [(i["kind"], i["metadata"]["name"]) for i in yaml.safe_load(text)["items"]]
    assert kinds_shown == [("Cluster", "c1"), ("LibvirtVM", "c1-cp-0")]
