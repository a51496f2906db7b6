"""The test server's database: one in-memory table per model, with NetBox's ids and timestamps.

Ids count up per table from 1 and are never reused, as PostgreSQL sequences behave. `last_updated`
strictly increases on every write, even within one clock tick, because NetBox 4.6 derives ETags from it.
All access happens on the server's event loop thread, so the tables need no locks of their own.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from capfleet_e2e.netbox.spec import Record


class Database:
    """Tables of records keyed by id; records handed out are copies, so callers cannot corrupt a table."""

    def __init__(self) -> None:
        self._tables: dict[str, dict[int, Record]] = {}
        self._next_id: dict[str, int] = {}
        self._last_timestamp = datetime.fromtimestamp(0, UTC)

    def now(self) -> datetime:
        """The current time, strictly later than any timestamp handed out before."""
        now = datetime.now(UTC)
        if now <= self._last_timestamp:
            now = self._last_timestamp + timedelta(microseconds=1)
        self._last_timestamp = now
        return now

    def table(self, label: str) -> dict[int, Record]:
        return self._tables.setdefault(label, {})

    def get(self, label: str, pk: int) -> Record | None:
        record = self.table(label).get(pk)
        return _copy(record) if record is not None else None

    def all(self, label: str) -> list[Record]:
        return [_copy(r) for r in self.table(label).values()]

    def where(self, label: str, predicate: Callable[[Record], bool]) -> list[Record]:
        return [_copy(r) for r in self.table(label).values() if predicate(r)]

    def insert(self, label: str, record: Record) -> Record:
        pk = self._next_id.get(label, 1)
        self._next_id[label] = pk + 1
        now = self.now()
        stored = {**copy.deepcopy(record), "id": pk, "created": now, "last_updated": now}
        self.table(label)[pk] = stored
        return copy.deepcopy(stored)

    def replace(self, label: str, record: Record) -> Record:
        """Store a changed record (same id), bumping last_updated."""
        stored = {**copy.deepcopy(record), "last_updated": self.now()}
        self.table(label)[record["id"]] = stored
        return copy.deepcopy(stored)

    def set_fields(self, label: str, pk: int, **values: Any) -> None:
        """A direct write (cascades like SET_NULL), bumping last_updated."""
        record = self.table(label).get(pk)
        if record is not None:
            record.update(values)
            record["last_updated"] = self.now()

    def delete(self, label: str, pk: int) -> None:
        self.table(label).pop(pk, None)


def _copy(record: Record) -> Record:
    """A copy deep enough for records: their values are scalars or flat lists/dicts (tags, custom fields)."""
    return {key: value.copy() if isinstance(value, list | dict) else value for key, value in record.items()}
