"""kubernetes_asyncio, imported lazily: ~30 MiB less resident memory in every capfleet process; and
`lazy`, for the heavy modules a process may never call (libvirt, paramiko).

The package's `__init__` files import every generated API class and model, about 850 modules, as soon as
anything under `kubernetes_asyncio` is imported (kopf imports its models to accept them as bodies; capfleet
uses only `ApiClient`, `Configuration`, the kubeconfig loaders and `ApiException`, and asks for plain
JSON back). `install()` puts in place of those four packages (`kubernetes_asyncio`, `.client`,
`.client.api`, `.client.models`) modules that import a name's own module when the name is first read
(PEP 562), found from the `from X import Name` lines of the real `__init__` files, so what a process never
touches is never loaded. It must run before anything imports kubernetes_asyncio, so `capfleet/__init__.py`
calls it; once the real package is loaded it does nothing. Nothing else changes: every name resolves to
the very object the eager package would give.
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path
from typing import cast

PACKAGE = "kubernetes_asyncio"
LAZY_PACKAGES = ("", ".client", ".client.api", ".client.models")


def exported_names(init: Path) -> dict[str, str]:
    """Each name a package's `__init__.py` imports with `from <absolute module> import <name>`, mapped to
    that module."""
    names: dict[str, str] = {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                names[alias.asname or alias.name] = node.module
    return names


class LazyPackage(types.ModuleType):
    """A package whose names are imported from their own modules when first read."""

    def __init__(self, name: str, directory: Path) -> None:
        super().__init__(name)
        init = directory / "__init__.py"
        self.__file__ = str(init)
        self.__path__ = [str(directory)]
        self.__package__ = name
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=str(init), is_package=True)
        self.__spec__.submodule_search_locations = [str(directory)]
        self.__lazy_names = exported_names(init)

    def __getattr__(self, name: str) -> object:
        module = self.__lazy_names.get(name)
        if module is not None:
            value: object = getattr(importlib.import_module(module), name)
        elif not name.startswith("__") and self.has_submodule(name):
            value = importlib.import_module(f"{self.__name__}.{name}")  # a submodule read as an attribute
        else:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        setattr(self, name, value)
        return value

    def has_submodule(self, name: str) -> bool:
        directory = Path(self.__path__[0])
        return (directory / f"{name}.py").is_file() or (directory / name / "__init__.py").is_file()

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self.__lazy_names})


def install() -> bool:
    """Replace the four eager packages with lazy ones; False (and nothing done) if kubernetes_asyncio is
    already imported or not laid out as expected."""
    if PACKAGE in sys.modules:
        return False
    spec = importlib.machinery.PathFinder.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations)))
    directories = {PACKAGE + sub: root.joinpath(*sub.split(".")[1:]) for sub in LAZY_PACKAGES}
    if not all((directory / "__init__.py").is_file() for directory in directories.values()):
        return False
    packages = {name: LazyPackage(name, directory) for name, directory in directories.items()}
    for name, package in packages.items():
        sys.modules[name] = package
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(packages[parent], child, package)
    return True


def lazy(name: str) -> types.ModuleType:
    """Module `name`, loaded when one of its attributes is first read (the standard library's
    `LazyLoader`): what a process never calls costs it no memory. libvirt's bindings and their C library
    take about 22 MiB and paramiko (with the cryptography it needs) about 18: libvirt-vm loads them when
    it first reaches a hypervisor, not at start. Use it as

        if TYPE_CHECKING:
            import libvirt
        else:
            libvirt = lean_imports.lazy("libvirt")

    so type checkers see the real module. A module already imported is returned as it is."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def refuse(name: str) -> None:
    """Make `import name` raise ImportError from now on: for a package a library imports only for a
    feature capfleet never uses, and works without. A package already imported is left alone."""
    cast(dict[str, types.ModuleType | None], sys.modules).setdefault(name, None)
