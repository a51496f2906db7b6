"""API token authentication and write permission, answering as NetBox does.

NetBox 4.x requires login for the API (LOGIN_REQUIRED defaults to true) and answers every authentication
failure with 403, because session authentication comes first in DRF's list and has no WWW-Authenticate
header. Wording per NetBox's own tests:

- no usable Authorization header → "Authentication credentials were not provided.";
- `Token <unknown>` → "Invalid token" (before 4.5) / "Invalid v1 token" (4.5+);
- `Bearer nbt_<unknown>` → "Invalid v2 token" (4.5+; before 4.5 `Bearer` is not a keyword NetBox knows,
  so the request counts as unauthenticated);
- a read-only token on POST/PUT/PATCH/DELETE → DRF's "You do not have permission to perform this action."
"""

from __future__ import annotations

import hmac

from capfleet_e2e.netbox.config import ApiToken, ServerConfig
from capfleet_e2e.netbox.errors import ApiError, detail, permission_denied

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def not_authenticated() -> ApiError:
    return detail(403, "Authentication credentials were not provided.")


def find_token(config: ServerConfig, credential: str, *, v2: bool) -> ApiToken | None:
    for token in config.tokens:
        if token.is_v2 == v2 and hmac.compare_digest(token.credential.encode(), credential.encode()):
            return token
    return None


def authenticate(config: ServerConfig, header: str | None) -> ApiToken:
    """The token an Authorization header names; raises the 403 NetBox would send."""
    if not header:
        raise not_authenticated()
    keyword, _, credential = header.strip().partition(" ")
    credential = credential.strip()
    if keyword.lower() == "token":
        if not credential:
            raise detail(403, "Invalid token header. No credentials provided.")
        token = find_token(config, credential, v2=False)
        if token is None:
            raise detail(403, "Invalid v1 token" if config.v2_tokens else "Invalid token")
        return token
    if keyword.lower() == "bearer" and config.v2_tokens:
        if not credential:
            raise detail(403, "Invalid token header. No credentials provided.")
        token = find_token(config, credential, v2=True)
        if token is None:
            raise detail(403, "Invalid v2 token")
        return token
    raise not_authenticated()


def authorize(token: ApiToken, method: str) -> None:
    """TokenPermissions: a token without write_enabled may only read."""
    if method.upper() not in SAFE_METHODS and not token.write_enabled:
        raise permission_denied()
