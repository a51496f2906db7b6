"""Plays capfleet's deploy ramdisk for servers that do not exist: the scale lab's bare metal.

sushy-tools' fake system driver gives each made-up server a Redfish System (power, boot device, NICs) with
no machine behind it, and PUTs the System to an external URL on every change (its `external_notifier`,
what Metal3's fake IPA listens to). `FakeRamdisk` is that URL. When a System is switched on to boot from
the network, it does over HTTP what the server's iPXE and capfleet's deploy ramdisk would: fetch the boot
server's `boot.ipxe`, follow its chain with the NIC's MAC, read the kernel arguments of the per-MAC script,
fetch the callback key and the NoCloud seed, and post a signed `deployed` (or `cleaned`) report, as
deploy_init.sh does; it writes no disk and downloads no image. baremetal-provision runs unchanged and
cannot tell these reports from the ramdisk's. A System switched on to boot from its disk boots its OS:
nothing to play.

The pure half (scripts, arguments, the report and its signature) is unit-tested, the signature against
deploy_lib.sh's own `sign`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from aiohttp import web
from yarl import URL

log = logging.getLogger(__name__)

PXE = "Pxe"
RESULTS = {"deploy": "deployed", "cleaning": "cleaned"}


def chain_url(boot_script: str, mac: str, uuid: str) -> str | None:
    """The URL `boot.ipxe` chains to, with iPXE's `${net0/mac:hexhyp}` and `${uuid}` filled in."""
    for line in boot_script.splitlines():
        words = line.split()
        if words[:1] == ["chain"] and len(words) > 1:
            return words[1].replace("${net0/mac:hexhyp}", mac.replace(":", "-")).replace("${uuid}", uuid)
    return None


def kernel_args(script: str) -> dict[str, str] | None:
    """The `key=value` arguments of a per-MAC script's `kernel` line (bare words map to ""); None when the
    script boots no kernel (it exits to the disk)."""
    for line in script.splitlines():
        words = line.split()
        if words[:1] == ["kernel"]:
            return dict(w.partition("=")[::2] for w in words[2:])
    return None


def seed_base(args: Mapping[str, str]) -> str | None:
    """The NoCloud seed URL of `ds=nocloud-net;s=<url>`."""
    ds = args.get("ds", "")
    for part in ds.split(";"):
        if part.startswith("s="):
            return part[2:]
    return None


def signature(key: str, result: str, reason: str, body: bytes) -> str:
    """deploy_lib.sh's `sign`: HMAC-SHA256 keyed with the callback key, of the result, the reason and the
    report's SHA-256, one per line."""
    message = f"{result}\n{reason}\n{hashlib.sha256(body).hexdigest()}"
    return hmac.new(key.encode(), message.encode(), hashlib.sha256).hexdigest()


def report(result: str, seconds: float) -> bytes:
    """The report deploy_init.sh's `finish` posts: a message, the result, step timings."""
    return (
        f"played by the scale lab: no disk written\nresult: {result}\nseconds_total: {seconds:.2f}\n".encode()
    )


def callback_url(callback: str, mac: str, uuid: str, result: str, sig: str | None) -> str:
    """The report's URL as deploy_init.sh's `finish` makes it (`sig` only when it fetched a key)."""
    query = {"mac": mac, "uuid": uuid, "result": result} | ({"sig": sig} if sig else {})
    return str(URL(callback).update_query(query))


def ssl_for(args: Mapping[str, str]) -> ssl.SSLContext | None:
    """A context trusting only `capfleet.ca` (base64 DER), as the ramdisk's `trust_boot_ca`; None without."""
    ca = args.get("capfleet.ca")
    if not ca:
        return None
    return ssl.create_default_context(cadata=base64.b64decode(ca))


T = TypeVar("T")
TRIES = 5
RETRY_SECONDS = 2.0


async def retried(request: Callable[[], Awaitable[T]]) -> T:
    """`request` again after a connection failure, a timeout or a 5xx, up to TRIES times, as the ramdisk's
    wget loops do: a boot server busy with a hundred servers is slow, not gone."""
    for attempt in range(1, TRIES + 1):
        try:
            return await request()
        except (aiohttp.ClientConnectionError, aiohttp.ClientResponseError, TimeoutError):
            if attempt == TRIES:
                raise
            await asyncio.sleep(RETRY_SECONDS * attempt)
    raise AssertionError("unreachable")


@dataclass
class Played:
    """What the fake ramdisk did for one System: its results in order, and the last failure if any."""

    results: list[str] = field(default_factory=list)
    failure: str | None = None
    steps: list[str] = field(default_factory=list)


class FakeRamdisk:
    """The external notification URL of sushy's fake driver, booting Systems switched on to PXE."""

    def __init__(self, boot_url: str) -> None:
        self.boot_url = boot_url.rstrip("/")
        self.played: dict[str, Played] = {}
        self._seen: set[tuple[str, float]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def __aenter__(self) -> FakeRamdisk:
        app = web.Application()
        app.router.add_route("PUT", "/", self._notified)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/"
        # As many connections as servers booting at once (aiohttp's default pool holds 100).
        connector = aiohttp.TCPConnector(limit=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _notified(self, request: web.Request) -> web.Response:
        system: dict[str, Any] = await request.json()
        pending = system.get("pending_power") or {}
        log.debug(
            "notified: %s power %s, boot device %s, pending %s",
            system.get("name"),
            system.get("power_state"),
            system.get("boot_device"),
            pending or None,
        )
        if pending.get("power_state") == "On" and system.get("boot_device") != PXE:
            name = str(system.get("name") or system["uuid"])
            self.played.setdefault(name, Played()).steps.append(
                f"powered on from {system.get('boot_device')}"
            )
        if pending.get("power_state") == "On" and system.get("boot_device") == PXE:
            key = (str(system["uuid"]), float(pending.get("apply_time") or 0))
            if key not in self._seen:
                self._seen.add(key)
                task = asyncio.create_task(self._boot(system, key[1]))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return web.Response(status=204)

    async def _boot(self, system: dict[str, Any], apply_time: float) -> None:
        name = str(system.get("name") or system["uuid"])
        played = self.played.setdefault(name, Played())
        try:
            await asyncio.sleep(max(0.0, apply_time - time.time()))  # the server is not on before that
            for nic in system.get("nics") or []:
                result = await self._netboot(str(nic["mac"]).lower(), str(system["uuid"]), played)
                if result is not None:
                    played.results.append(result)
                    return
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            played.failure = f"{type(exc).__name__}: {exc}"
            log.warning("fake ramdisk of %s: %s", name, played.failure)

    async def _get(self, url: str, context: ssl.SSLContext | None = None) -> str:
        async def once() -> str:
            assert self._session is not None
            async with self._session.get(url, ssl=context if context is not None else True) as response:
                text = await response.text()
                if response.status >= 500:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                if response.status >= 400 and response.status != 404:
                    raise ValueError(f"GET {URL(url).path}: {response.status}")
                return text if response.status < 400 else ""

        return await retried(once)

    async def _post(self, url: str, body: bytes, context: ssl.SSLContext | None) -> None:
        async def once() -> None:
            assert self._session is not None
            tls = context if context is not None else True
            async with self._session.post(url, data=body, ssl=tls) as response:
                if response.status >= 500:
                    raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
                if response.status >= 300:
                    raise ValueError(f"callback answered {response.status}")

        await retried(once)

    async def _netboot(self, mac: str, uuid: str, played: Played) -> str | None:
        """One NIC's network boot; the result posted, or None when nothing booted from it."""
        started = time.monotonic()
        chained = chain_url(await self._get(f"{self.boot_url}/boot.ipxe"), mac, uuid)
        script = await self._get(chained) if chained else ""
        args = kernel_args(script)
        if args is None or "capfleet.callback" not in args:
            played.steps.append(
                f"{mac}: no kernel to boot ({script.strip().splitlines()[-1:] or 'no script'})"
            )
            return None
        result = RESULTS.get(args.get("capfleet.mode", "deploy"), "deployed")
        context = ssl_for(args)
        key = await self._get(args["capfleet.key"], context) if "capfleet.key" in args else ""
        seed = seed_base(args)
        if seed:
            for name in ("meta-data", "user-data", "network-config"):
                await self._get(seed + name, context)
        body = report(result, time.monotonic() - started)
        sig = signature(key, result, "", body) if key else None
        url = callback_url(args["capfleet.callback"], mac, uuid, result, sig)
        await self._post(url, body, context)
        return result


def fake_systems(count: int, prefix: str) -> list[dict[str, Any]]:
    """`count` Systems for sushy's fake driver, powered off, each telling the notification URL of every
    change: names `<prefix>-0000`…, distinct UUIDs and MACs (52:54 and the index)."""
    return [
        {
            "uuid": f"00000000-0000-4000-8000-{index:012d}",
            "name": f"{prefix}-{index:04d}",
            "power_state": "Off",
            "external_notifier": True,
            "nics": [
                {
                    "mac": "52:54:" + ":".join(f"{byte:02x}" for byte in index.to_bytes(4, "big")),
                    "ip": "192.0.2.1",
                }
            ],
        }
        for index in range(count)
    ]


def boot_env(port: int, directory: Path) -> dict[str, str]:
    """baremetal-provision's boot server settings to serve the fake ramdisk on 127.0.0.1:`port`, with a
    stand-in kernel and initrd in `directory` (it serves them; nothing fetches them)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("vmlinuz", "initrd.img"):
        (directory / name).write_bytes(b"never fetched: the fake ramdisk plays over HTTP only")
    return {
        "CAPFLEET_BOOT_LISTEN": f"127.0.0.1:{port}",
        "CAPFLEET_BOOT_URL": f"http://127.0.0.1:{port}",
        "CAPFLEET_DEPLOY_RAMDISK_DIR": str(directory),
    }
