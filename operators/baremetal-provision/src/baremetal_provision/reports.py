"""What a guest's callback says, read defensively (pure functions).

The provisioning network is hostile: anyone on it may call back. The token in the path says which attempt; the
deploy ramdisk also signs its report (`sig=`, HMAC-SHA256 with a callback key it fetched once, so it never
travels in a URL or a script), which proves the caller is what fetched that key. The deploy ramdisk posts
`?result=deployed|failed&reason=<Reason>` and a report (a one-line message, then `key: value` facts and step
timings); a custom installer may post nothing, which means it succeeded. Only known reasons are taken, the
message is cut to one printable line with the token removed, and only numeric facts are kept: nothing the
caller sends reaches a condition, an Event or a log unchecked.
"""

from __future__ import annotations

import hashlib
import hmac
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


def signature(key: str, result: str, reason: str, body: bytes) -> str:
    """What the deploy ramdisk sends as `sig=`: HMAC-SHA256, keyed with its callback key, of the result,
    the reason and the body's SHA-256, one per line (deploy_lib.sh's `sign` computes the same)."""
    message = f"{result}\n{reason}\n{hashlib.sha256(body).hexdigest()}"
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def signed(query: Mapping[str, str], body: bytes, key: str) -> bool:
    """Whether the callback's `sig=` is the signature of its result, reason and body under `key`."""
    wanted = signature(key, query.get("result", ""), query.get("reason", ""), body)
    return hmac.compare_digest(query.get("sig", ""), wanted)


def clean(text: str, token: str) -> str:
    """One printable line of at most MESSAGE_MAX characters, without the instance's token."""
    line = _UNPRINTABLE.sub("?", text.replace(token, "<token>") if token else text).strip()
    return line if len(line) <= MESSAGE_MAX else line[: MESSAGE_MAX - 3] + "..."


def timings(facts: Mapping[str, str]) -> str:
    """The ramdisk's step timings and throughput as one log-friendly line."""
    keys = sorted(k for k in facts if k.startswith(("seconds_", "bytes_")) or k.endswith("_mb_s"))
    return ", ".join(f"{k}={facts[k]}" for k in keys)
