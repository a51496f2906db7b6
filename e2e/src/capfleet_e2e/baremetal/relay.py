"""A tiny TCP/UNIX-socket relay, so guests on the PXE network reach an HTTP server on the host's loopback.

The PXE network lives in a network namespace with no route anywhere (netns.py). One relay runs inside it
(`ip netns exec`), listening on the bridge address and forwarding each connection to a UNIX socket in a
private directory; a second runs on the host, from that UNIX socket to 127.0.0.1:<port>. UNIX sockets are
file-system objects, not network ones, so no packet ever crosses between the namespaces, and nothing in
the namespace can reach any other address of the host.

Usage: python -m capfleet_e2e.baremetal.relay <listen> <target>, each `tcp:<host>:<port>` or `unix:<path>`.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


async def _open(target: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    kind, _, rest = target.partition(":")
    if kind == "unix":
        return await asyncio.open_unix_connection(rest)
    host, _, port = rest.rpartition(":")
    return await asyncio.open_connection(host, int(port))


async def _serve(listen: str, target: str) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await _open(target)
        except OSError as e:
            print(f"relay: cannot reach {target}: {e}", flush=True)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        for w in (writer, up_writer):
            w.close()
            with contextlib.suppress(ConnectionError, OSError):
                await w.wait_closed()

    kind, _, rest = listen.partition(":")
    if kind == "unix":
        server = await asyncio.start_unix_server(handle, rest)
    else:
        host, _, port = rest.rpartition(":")
        server = await asyncio.start_server(handle, host, int(port))
    print(f"relay: listening on {listen}, to {target}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    asyncio.run(_serve(argv[0], argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
