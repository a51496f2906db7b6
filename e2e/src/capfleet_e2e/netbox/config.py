"""What a NetBox test server pretends to be: its version, its API tokens and its settings.

The NetBox REST API changed in small but important ways across 4.x (MAC address objects in 4.2, v2 tokens
in 4.5, ETags in 4.6). Every version-dependent behaviour of the test server asks this module, so the
switches live in one place and read like NetBox's release notes.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

DEFAULT_VERSION = "4.4.0"
V2_TOKEN_PREFIX = "nbt_"


def parse_version(version: str) -> tuple[int, int, int]:
    """'4.4.0' → (4, 4, 0); a missing patch level counts as 0, suffixes like '-beta1' are ignored."""
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", version.strip())
    if not match:
        raise ValueError(f"not a NetBox version: {version!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True)
class ApiToken:
    """A token the server accepts: `credential` is what follows `Token ` (v1) or `Bearer ` (v2)."""

    credential: str
    write_enabled: bool = True

    @property
    def is_v2(self) -> bool:
        return self.credential.startswith(V2_TOKEN_PREFIX) and "." in self.credential

    @staticmethod
    def new_v1(*, write_enabled: bool = True) -> ApiToken:
        """A random v1 token: 40 hex characters, as NetBox generates them."""
        return ApiToken(secrets.token_hex(20), write_enabled)

    @staticmethod
    def new_v2(*, write_enabled: bool = True) -> ApiToken:
        """A random v2 token, `nbt_<12-character key>.<40-character secret>` as NetBox 4.5 prints it."""
        return ApiToken(f"{V2_TOKEN_PREFIX}{secrets.token_hex(6)}.{secrets.token_hex(20)}", write_enabled)


@dataclass
class ServerConfig:
    """Settings of one test server; the defaults are NetBox's own defaults."""

    version: str = DEFAULT_VERSION
    tokens: list[ApiToken] = field(default_factory=list)
    admin_secret: str = field(default_factory=lambda: secrets.token_hex(16))
    enforce_global_unique: bool = True
    paginate_count: int = 50
    max_page_size: int = 1000

    def __post_init__(self) -> None:
        parse_version(self.version)

    def at_least(self, version: str) -> bool:
        return parse_version(self.version) >= parse_version(version)

    @property
    def api_version(self) -> str:
        """The `API-Version` response header: major.minor."""
        major, minor, _ = parse_version(self.version)
        return f"{major}.{minor}"

    @property
    def mac_address_objects(self) -> bool:
        """4.2 moved MACs to /api/dcim/mac-addresses/; Interface.mac_address became read-only."""
        return self.at_least("4.2")

    @property
    def v2_tokens(self) -> bool:
        """4.5 introduced `Authorization: Bearer nbt_<key>.<secret>`."""
        return self.at_least("4.5")

    @property
    def etags(self) -> bool:
        """4.6 sends ETag on single objects and honours If-Match on PUT/PATCH (412 on mismatch)."""
        return self.at_least("4.6")

    @property
    def cursor_pagination(self) -> bool:
        """4.6 added cursor pagination with the `start` query parameter."""
        return self.at_least("4.6")

    @property
    def unknown_custom_fields(self) -> str:
        """What a write naming an undefined custom field gets.

        Up to 4.4 the model's clean() rejected it ("Unknown field name ..."); 4.5 silently drops stale or
        unknown custom field data (netbox#21049); 4.6 rejects unknown keys in the API again (netbox#21529).
        """
        if self.at_least("4.6"):
            return "reject-field"
        if self.at_least("4.5"):
            return "drop"
        return "reject-model"
