"""`python -m capfleet_console`: serve the console with the settings from the environment.

The console's own identity (in a pod, its ServiceAccount; elsewhere `KUBECONFIG`) may only create
TokenReviews and impersonate; everything a page shows or does is asked as the signed-in user.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from aiohttp import web

from capfleet.kube import Kube
from capfleet_console.acting import KubeconfigCredentials
from capfleet_console.app import build
from capfleet_console.settings import ConsoleSettings

FIELD_MANAGER = "capfleet-console"


async def serve(settings: ConsoleSettings) -> None:
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")
    credentials = await KubeconfigCredentials.load(os.environ.get("KUBECONFIG"), in_cluster)
    async with Kube.connect(FIELD_MANAGER) as reviewer:
        runner = web.AppRunner(build(settings, reviewer, credentials), access_log=None)
        await runner.setup()
        host, port = settings.host_port()
        await web.TCPSite(runner, host, port).start()
        logging.getLogger("capfleet.console").info("serving on http://%s:%d", host, port)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        settings = ConsoleSettings.load(os.environ)
        settings.vm_interface()
    except ValueError as error:
        print(f"capfleet-console: {error}", file=sys.stderr)
        return 2
    asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
