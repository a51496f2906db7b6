"""`capfleet netbox-setup`: make a NetBox ready for capfleet, or say what is not (`--check`).

Creates the custom fields capfleet_owner, capfleet_previous and bmc_address and the `capfleet` tag when
missing, and repairs what it safely can (a missing object type, the owner field's filter logic). It
changes nothing that is already right, so running it again, or on every deployment, is harmless. The
token comes from NETBOX_TOKEN (or --token-file; --token works but leaves it in the shell's history);
TLS is verified, against --ca-bundle when given.

    capfleet netbox-setup --url https://netbox.example.com [--check] [--ca-bundle ca.pem]

Exit status: 0 ready (after the changes, unless --check), 1 changes needed under --check, 2 something
needs a person (a field of another type) or NetBox refused.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from capfleet import errors, netbox
from capfleet.netboxschema import Change, plan

TOKEN_ENV = "NETBOX_TOKEN"
REQUEST_TIMEOUT = 30.0  # a one-off by a person or a deployment job: patient with a busy NetBox


async def current(api: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    fields = await netbox.call(
        "list-custom-fields", lambda: [dict(r) for r in api.extras.custom_fields.all()]
    )
    tags = await netbox.call("list-tags", lambda: [dict(r) for r in api.extras.tags.filter(slug="capfleet")])
    return fields, tags


async def apply(api: Any, change: Change) -> None:
    app, name = change.endpoint.split("/")
    endpoint = getattr(getattr(api, app), name.replace("-", "_"))
    if change.record_id is None:
        await netbox.call("setup-create", endpoint.create, change.body)
    else:
        await netbox.call("setup-update", endpoint.update, [{"id": change.record_id, **change.body}])


async def setup(connection: netbox.Connection, *, check_only: bool, out: Any = sys.stdout) -> int:
    api = netbox.open_api(connection, timeout=REQUEST_TIMEOUT)
    fields, tags = await current(api)
    changes, unfixable = plan(fields, tags)
    for change in changes:
        print(f"{'needed' if check_only else 'fixing'}: {change.why}", file=out)
        if not check_only:
            await apply(api, change)
    for problem in unfixable:
        print(f"cannot fix: {problem}", file=out)
    if unfixable:
        return 2
    if check_only and changes:
        return 1
    print(
        f"NetBox at {connection.url} is ready for capfleet"
        + (f" ({len(changes)} changes)" if changes else ""),
        file=out,
    )
    return 0


def token_from(args: argparse.Namespace) -> str:
    if args.token_file:
        return Path(args.token_file).read_text().strip()
    return args.token or os.environ.get(TOKEN_ENV, "").strip()


def add_parser(commands: Any) -> None:
    """The `netbox-setup` subcommand of `capfleet` (capfleet.cli)."""
    setup_parser = commands.add_parser("netbox-setup", help=__doc__.splitlines()[0] if __doc__ else None)
    setup_parser.add_argument("--url", required=True, help="NetBox's base URL")
    setup_parser.add_argument("--token", help=f"API token (prefer {TOKEN_ENV} or --token-file)")
    setup_parser.add_argument("--token-file", help="a file holding the API token")
    setup_parser.add_argument("--ca-bundle", help="PEM file of the CA(s) NetBox's certificate must chain to")
    setup_parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if changes are needed"
    )


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    token = token_from(args)
    if not token:
        parser.error(f"no token: set {TOKEN_ENV}, or pass --token-file")
    ca_bundle = Path(args.ca_bundle).read_text() if args.ca_bundle else None
    connection = netbox.Connection(url=args.url.rstrip("/"), token=token, ca_bundle=ca_bundle)
    try:
        return asyncio.run(setup(connection, check_only=args.check))
    except errors.CapfleetError as error:
        print(f"capfleet netbox-setup: {error}", file=sys.stderr)
        return 2
