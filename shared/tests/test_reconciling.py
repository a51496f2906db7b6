"""The reconcile kit's pure parts: settings from the environment, the typed memo accessor, and when
Ready posts an Event."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from capfleet import events, reconciling


@dataclass(frozen=True)
class Example(reconciling.Settings):
    poll_seconds: float = 60.0
    retries: int = 3
    verbose: bool = False
    region: str | None = None
    domain_type: str = reconciling.setting("auto", env="CAPFLEET_LIBVIRT_DOMAIN_TYPE")
    suite: int = reconciling.setting(17, parse=lambda raw: int(raw) if raw in {"3", "17"} else int("x"))


def test_defaults_when_nothing_is_set() -> None:
    assert Example.load({}) == Example()


def test_each_field_reads_its_variable_converted_by_its_type() -> None:
    loaded = Example.load(
        {
            "CAPFLEET_POLL_SECONDS": "2.5",
            "CAPFLEET_RETRIES": "7",
            "CAPFLEET_VERBOSE": "true",
            "CAPFLEET_REGION": "eu",
            "CAPFLEET_LIBVIRT_DOMAIN_TYPE": "qemu",
            "CAPFLEET_SUITE": "3",
        }
    )
    assert loaded == Example(2.5, 7, True, "eu", "qemu", 3)


def test_an_empty_variable_keeps_the_default() -> None:
    assert Example.load({"CAPFLEET_RETRIES": ""}).retries == 3


@pytest.mark.parametrize(
    ("variable", "value"),
    [("CAPFLEET_POLL_SECONDS", "soon"), ("CAPFLEET_VERBOSE", "maybe"), ("CAPFLEET_SUITE", "5")],
)
def test_a_bad_value_names_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ValueError, match=variable):
        Example.load({variable: value})


def test_variables_are_listed_by_field() -> None:
    assert Example.variables()["domain_type"] == "CAPFLEET_LIBVIRT_DOMAIN_TYPE"
    assert Example.variables()["poll_seconds"] == "CAPFLEET_POLL_SECONDS"


def test_memo_values_are_typed_and_a_missing_one_is_a_clear_error() -> None:
    memo = {"settings": Example()}
    assert reconciling.from_memo(memo, "settings", Example) == Example()
    with pytest.raises(RuntimeError, match="no Example"):
        reconciling.from_memo({}, "settings", Example)
    with pytest.raises(RuntimeError, match="no int"):
        reconciling.from_memo(memo, "settings", int)


@dataclass
class ExampleContext(reconciling.Context):
    settings: Example = reconciling.in_memo(reconciling.SETTINGS_KEY)
    locks: dict[str, int] = reconciling.in_memo("example_locks")


def test_a_context_is_filled_from_memo_by_its_declared_keys() -> None:
    from typing import Any

    from capfleet.kube import Kube

    kube = object.__new__(Kube)
    memo: dict[str, Any] = {
        reconciling.KUBE_KEY: kube,
        reconciling.EVENTS_KEY: events.Recorder(kube),
        reconciling.SETTINGS_KEY: Example(retries=9),
        "example_locks": {"a": 1},
    }
    ctx = ExampleContext.from_memo(memo)
    assert ctx.kube is kube
    assert ctx.settings.retries == 9
    assert ctx.locks == {"a": 1}
    with pytest.raises(RuntimeError, match="example_locks"):
        ExampleContext.from_memo({**memo, "example_locks": "not a dict"})


class Posted:
    """The Event recorder's interface, keeping what would be posted."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, str]] = []

    async def transition(self, obj: object, event_type: str, reason: str, message: str) -> None:
        self.posted.append((event_type, reason))


async def test_ready_posts_an_event_when_true_or_false_and_none_while_a_step_waits() -> None:
    from typing import Any

    from capfleet.conditions import parse
    from capfleet.kube import Kube

    posted = Posted()
    ctx = reconciling.Context(kube=object.__new__(Kube), recorder=posted)  # type: ignore[arg-type]
    body: dict[str, Any] = {"metadata": {"name": "m", "uid": "1"}}
    for status, reason in [
        ("Unknown", "WaitingForBootstrapData"),
        ("Unknown", "WaitingForServer"),
        ("False", "InvalidSpec"),
        ("True", "Provisioned"),
    ]:
        ready = parse(
            [
                {
                    "type": "Ready",
                    "status": status,
                    "reason": reason,
                    "message": "",
                    "lastTransitionTime": "2026-11-27T00:00:00Z",
                }
            ]
        )[0]
        await ctx.announce(body, ready)
    assert posted.posted == [("Warning", "InvalidSpec"), ("Normal", "Provisioned")]


async def test_the_event_recorder_drops_repeats_until_told_to_forget_one() -> None:
    from typing import Any

    class Created:
        field_manager = "example"

        def __init__(self) -> None:
            self.reasons: list[str] = []

        async def create(self, resource: object, body: dict[str, Any], namespace: str | None) -> None:
            self.reasons.append(body["reason"])

    kube = Created()
    recorder = events.Recorder(kube)  # type: ignore[arg-type]
    body = {"apiVersion": "v1", "kind": "Example", "metadata": {"name": "m", "uid": "1"}}
    await recorder.transition(body, "Normal", "Ready", "")
    await recorder.transition(body, "Normal", "Ready", "")
    recorder.forget(body, "Warning", "Ready")  # not what was posted last: nothing to forget
    await recorder.transition(body, "Normal", "Ready", "")
    recorder.forget(body, "Normal", "Ready")
    await recorder.transition(body, "Normal", "Ready", "")
    assert kube.reasons == ["Ready", "Ready"]
