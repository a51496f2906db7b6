"""kubernetes_asyncio made lazy by `import capfleet`: a process loads a few dozen of its modules instead of
~850, and every name still resolves to the object the eager package gives. Each case runs in a fresh
interpreter, since this one has imported kubernetes_asyncio already."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Names capfleet, kopf and kubernetes_asyncio's own modules read, and a sample of what they never read.
NAMES = (
    "client.ApiClient",
    "client.Configuration",
    "client.exceptions.ApiException",
    "client.CoreV1Api",
    "client.V1Pod",
    "client.models.V1ObjectMeta",
    "client.api.CustomObjectsApi",
    "config.load_kube_config",
    "config.load_incluster_config",
    "watch.Watch",
)
RESOLVE = f"""
import functools, json, sys
{{first}}
import kopf
import kubernetes_asyncio
from kubernetes_asyncio.client.exceptions import ApiException
def where(path):
    value = functools.reduce(getattr, path.split("."), kubernetes_asyncio)
    return f"{{{{value.__module__}}}}.{{{{value.__qualname__}}}}"
names = {{{{path: where(path) for path in {NAMES!r}}}}}
loaded = sorted(m for m in sys.modules if m.startswith("kubernetes_asyncio"))
public = sorted(n for n in dir(kubernetes_asyncio.client) if not n.startswith("_"))
print(json.dumps({{{{"names": names, "loaded": len(loaded), "public": public}}}}))
"""


def resolve(first: str) -> dict[str, object]:
    script = RESOLVE.format(first=first)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_importing_capfleet_first_loads_few_modules_and_every_name_is_the_eager_packages_own() -> None:
    eager = resolve("")
    lean = resolve("import capfleet")
    assert lean["names"] == eager["names"]
    assert isinstance(eager["loaded"], int)
    assert isinstance(lean["loaded"], int)
    assert eager["loaded"] > 800
    assert lean["loaded"] < 60, lean["loaded"]
    # dir() of the lazy client lists what the eager one does, though none of it is loaded yet.
    assert lean["public"] == eager["public"]


@pytest.mark.parametrize(
    "entry_point",
    [
        "capi_machine_glue.__main__",
        "ipam_address.__main__",
        "libvirt_vm.__main__",
        "netbox_device.__main__",
        "baremetal_provision.__main__",
        "capfleet_console.__main__",
    ],
)
def test_each_entry_point_loads_kubernetes_asyncio_lazily_whatever_it_imports_first(entry_point: str) -> None:
    """baremetal_provision's entry point imported its handlers (and kopf with them) before capfleet, and
    ran with the eager package: each operator's package now imports capfleet first."""
    script = (
        f"import sys, {entry_point}\n"
        "print(len([m for m in sys.modules if m.startswith('kubernetes_asyncio')]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(done.stdout) < 60, done.stdout


def test_install_does_nothing_once_the_real_package_is_loaded() -> None:
    script = (
        "import kubernetes_asyncio.client, sys\n"
        "eager = sys.modules['kubernetes_asyncio.client']\n"
        "from capfleet import lean_imports\n"
        "print(lean_imports.install(), sys.modules['kubernetes_asyncio.client'] is eager)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


HEAVY = ("libvirt", "libvirtmod", "paramiko", "pyghmi", "cryptography")


@pytest.mark.parametrize(
    "handlers",
    [
        "capi_machine_glue.handlers",
        "ipam_address.handlers",
        "libvirt_vm.handlers",
        "netbox_device.handlers",
        "baremetal_provision.handlers",
    ],
)
def test_no_operator_loads_libvirt_paramiko_pyghmi_or_cryptography_until_it_needs_them(
    handlers: str,
) -> None:
    # A module `lean_imports.lazy` made sits in sys.modules as a _LazyModule until something reads it.
    script = "\n".join(
        [
            f"import sys, {handlers}",
            "kinds = {n.split('.')[0]: type(m).__name__ for n, m in sys.modules.items()}",
            f"print(sorted(n for n, kind in kinds.items() if n in {HEAVY!r} and kind != '_LazyModule'))",
        ]
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_libvirt_vm_loads_paramiko_without_invoke_which_only_an_ssh_config_match_exec_needs() -> None:
    script = "\n".join(
        [
            "import sys",
            "from libvirt_vm.backends import connections",
            "connections.load_bindings()",
            "from paramiko import config",
            "print(sys.modules['invoke'], config.invoke, type(config.invoke_import_error).__name__)",
        ]
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["None", "None", "ModuleNotFoundError"]


def test_a_refused_package_already_imported_is_left_alone() -> None:
    script = "import json, sys\nfrom capfleet import lean_imports\nlean_imports.refuse('json')\nimport json\n"
    script += "print(sys.modules['json'] is json, json.dumps(1))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "1"]


def test_a_lazy_module_loads_when_first_read_and_is_the_module_itself() -> None:
    script = "\n".join(
        [
            "from capfleet import lean_imports",
            "colorsys = lean_imports.lazy('colorsys')",
            "before = type(colorsys).__name__",
            "value = colorsys.hls_to_rgb(0, 0.5, 0)",
            "import colorsys as imported",
            "print(before, type(colorsys).__name__, imported is colorsys, value)",
        ]
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["_LazyModule", "module", "True", "(0.5,", "0.5,", "0.5)"]
