"""An object version is read once; another version, or an object without one, is read again."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from capfleet import versions


def body(uid: str, version: str, value: int) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "resourceVersion": version}, "spec": {"value": value}}


def counting_reader(
    size: int = versions.RECENT_VERSIONS,
) -> tuple[Callable[[Mapping[str, Any]], int], list[int]]:
    """A reader of `spec.value` through `per_version`, and the values it really read, in order."""
    reads: list[int] = []

    def value(obj: Mapping[str, Any]) -> int:
        found = int((obj.get("spec") or {}).get("value", 0))
        reads.append(found)
        return found

    return versions.per_version(value, size=size), reads


def test_a_version_is_read_once_and_only_the_latest_versions_are_kept() -> None:
    read, reads = counting_reader(size=2)
    assert [read(body("a", "1", 1)), read(body("a", "1", 1)), read(body("a", "2", 2))] == [1, 1, 2]
    assert reads == [1, 2]
    read(body("b", "1", 3))  # a/1 is now the oldest of three: forgotten
    read(body("a", "2", 2))
    read(body("a", "1", 1))
    assert reads == [1, 2, 3, 1]


def test_an_object_without_uid_or_version_is_read_every_time() -> None:
    read, reads = counting_reader()
    read({"metadata": {"uid": "a"}})
    read({"metadata": {"uid": "a"}})
    read({"metadata": {"resourceVersion": "1"}})
    read({})
    assert len(reads) == 4


def test_forget_forgets_every_reader_s_answers() -> None:
    read, reads = counting_reader()
    read(body("a", "1", 1))
    versions.forget()
    read(body("a", "1", 1))
    assert reads == [1, 1]
