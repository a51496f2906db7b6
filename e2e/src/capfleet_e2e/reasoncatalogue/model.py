"""The catalogue's entries: a reason, the group of one operator's reasons, and a relay (where the code
passes on a reason it does not name); and the advice shared by every reason that is not retried."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One reason: where it shows (kind, condition, Event, or only the operator's log), what it means and
    what to do."""

    name: str
    on: str
    means: str
    do: str


@dataclass(frozen=True)
class Group:
    """The reasons one operator's code (or the shared package) sets, with how that operator reports."""

    name: str
    title: str
    intro: str
    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class Relay:
    """A place where the code passes on a reason it does not name: what it passes on, and the reasons it
    can produce that are set nowhere else (each must appear in the code's string literals)."""

    why: str
    yields: tuple[str, ...] = ()


NOT_RETRIED = """Not retried, since retrying cannot help: a change of the object is reconciled at once, but
after a fix elsewhere (a Secret, NetBox) touch the object (any annotation, e.g. `kubectl annotate <kind>
<name> capfleet.dev/retry="$(date +%s)" --overwrite`), or it is tried again when the operator restarts."""
