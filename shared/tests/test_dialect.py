"""The fleet's one dialect, enforced: operators read their objects typed, and define nothing the kit has.

A reconcile parses its object into its model (`kinds.X.parse`, `capfleet.api.capi`) before it reads it;
raw `spec` lookups are what let a misspelt key slip past mypy. The pause and move marks are spelled once,
in `capfleet.pausing`; resources are named once, in `capfleet.resources` and `capfleet.api.kinds`.

Every handler kopf calls per object (events, indexes, changes, daemons, timers) is a coroutine: kopf runs a
plain function in its thread pool, a hop through the executor for every event (in `make bench-ipam` the
IPAddress indexes' hops were a fifth of ipam-address's samples), and one that wakes an `asyncio.Event`
would do so from a thread, which asyncio does not allow. Once-per-process handlers (startup, cleanup,
login, probes) may be plain.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

OPERATORS = Path(__file__).resolve().parents[2] / "operators"
SOURCES = sorted(OPERATORS.glob("*/src/**/*.py"))
SPELLED_ONCE = {"cluster.x-k8s.io/paused", "clusterctl.cluster.x-k8s.io/delete-for-move"}


def _findings(path: Path) -> Iterator[str]:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        where = f"{path.relative_to(OPERATORS)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            if node.slice.value == "spec":
                yield f"{where}: raw ['spec'] read"
            if isinstance(node.value, ast.Name) and node.value.id == "spec":
                yield f"{where}: raw spec[...] read"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "spec":
                yield f"{where}: raw .get('spec') read"
            if isinstance(target, ast.Name) and target.id == "spec":
                yield f"{where}: raw spec.get(...) read"
        if isinstance(node, ast.Constant) and node.value in SPELLED_ONCE:
            yield f"{where}: {node.value} spelled again (use capfleet.pausing)"
        if (
            isinstance(node, ast.Call)
            and _is_kopf_handler(node.func)
            and any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args)
        ):
            yield f"{where}: resource spelled by hand (use Resource.watch)"


PER_OBJECT_DECORATORS = (
    *(
        "kopf.on.event",
        "kopf.on.create",
        "kopf.on.update",
        "kopf.on.resume",
        "kopf.on.delete",
        "kopf.on.field",
    ),
    *("kopf.index", "kopf.daemon", "kopf.timer"),
)


def _plain_per_object_handlers(source: str, where: str) -> Iterator[str]:
    for node in ast.walk(ast.parse(source, where)):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            called = decorator.func if isinstance(decorator, ast.Call) else decorator
            if ast.unparse(called).startswith(PER_OBJECT_DECORATORS):
                yield f"{where}:{node.lineno}: {node.name} is not async"
                break


def _is_kopf_handler(func: ast.expr) -> bool:
    text = ast.unparse(func)
    return text.startswith(("kopf.on.", "kopf.timer", "kopf.daemon"))


def test_there_are_operator_sources() -> None:
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(OPERATORS)))
def test_operator_code_speaks_the_fleet_dialect(path: Path) -> None:
    assert list(_findings(path)) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(OPERATORS)))
def test_per_object_handlers_run_in_the_event_loop(path: Path) -> None:
    where = str(path.relative_to(OPERATORS))
    assert list(_plain_per_object_handlers(path.read_text(), where)) == []


def test_a_plain_per_object_handler_is_found() -> None:
    source = (
        "@kopf.index(*X.watch)\ndef by_name(body, **_):\n    return {}\n\n"
        "@kopf.on.event(*X.watch)\n@remembering\nasync def changed(**_): ...\n\n"
        "@kopf.on.startup()\ndef start(**_): ...\n"
    )
    assert list(_plain_per_object_handlers(source, "handlers.py")) == ["handlers.py:2: by_name is not async"]
