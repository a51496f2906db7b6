"""What a guest's callback says, read defensively (pure functions).

The provisioning network is hostile: anyone on it may call back, and only the token in the path proves
the caller booted what we served. The deploy ramdisk posts `?result=deployed|failed&reason=<Reason>` and
a report (a one-line message, then `key: value` facts and step timings); a custom installer may post
nothing, which means it succeeded. Only known reasons are taken, the message is cut to one printable line
with the token removed, and only numeric facts are kept: nothing the caller sends reaches a condition, an
Event or a log unchecked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Result = Literal["deployed", "failed"]
REASONS = frozenset(
    {
        "BadChecksum",
        "NoMatchingDisk",
        "DownloadFailed",
        "SeedFailed",
        "WriteFailed",
        "InvalidArguments",
        "CleaningFailed",
    }
)
UNKNOWN_REASON = "DeployFailed"
MESSAGE_MAX = 300
BODY_MAX = 16384
FACTS_MAX = 32
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_FACT = re.compile(r"^([a-z][a-z0-9_]{0,40}): ([0-9]+(\.[0-9]+)?)$")


@dataclass(frozen=True)
class Report:
    result: Result
    reason: str | None = None
    message: str = ""
    facts: dict[str, str] = field(default_factory=dict)

    @property
    def failure(self) -> str:
        """The failure as kept in the instance's marks and shown in its condition: "Reason: message"."""
        return f"{self.reason or UNKNOWN_REASON}: {self.message or 'no message'}"


def read(query: Mapping[str, str], body: str, token: str) -> Report:
    """The report of one callback; anything but `result=failed` is a success (custom installers send
    no result)."""
    lines = body.splitlines()
    message = clean(lines[0], token) if lines else ""
    facts: dict[str, str] = {}
    for line in lines[1:]:
        found = _FACT.match(line.strip())
        if found and len(facts) < FACTS_MAX:
            facts[found.group(1)] = found.group(2)
    if query.get("result") != "failed":
        return Report("deployed", message=message, facts=facts)
    reason = query.get("reason", "")
    return Report("failed", reason if reason in REASONS else UNKNOWN_REASON, message, facts)


def clean(text: str, token: str) -> str:
    """One printable line of at most MESSAGE_MAX characters, without the instance's token."""
    line = _UNPRINTABLE.sub("?", text.replace(token, "<token>") if token else text).strip()
    return line if len(line) <= MESSAGE_MAX else line[: MESSAGE_MAX - 3] + "..."


def timings(facts: Mapping[str, str]) -> str:
    """The ramdisk's step timings and throughput as one log-friendly line."""
    keys = sorted(k for k in facts if k.startswith(("seconds_", "bytes_")) or k.endswith("_mb_s"))
    return ", ".join(f"{k}={facts[k]}" for k in keys)
