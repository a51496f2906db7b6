"""Knowing the moment each claim is bound without polling the apiserver: a watch in a background thread.

Listing 1,000 claims every few hundred milliseconds would load the apiserver (and the 2 cores it shares
with the providers being measured) far more than one watch stream does, and would blur the timing. So the
benchmark watches IPAddressClaims and IPAddresses with the standard library (list, then watch from the
list's resourceVersion, resuming after each server timeout and re-listing after 410 Gone) and records
when each object first looked ready.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.client import HTTPResponse
from pathlib import Path
from typing import Any, cast

from capfleet.resources import Resource

Obj = dict[str, Any]
# Server-side timeout of one watch request: the stream ends, the thread resumes from the last version.
WATCH_SECONDS = 30


class Watch:
    """Records, per object name, when `ready(obj)` first returned a value, and that value."""

    def __init__(
        self,
        server: str,
        token: str,
        ca_path: Path,
        resource: Resource,
        namespace: str,
        ready: Callable[[Obj], str | None],
    ) -> None:
        self._base = server + resource.path(namespace)
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._context = ssl.create_default_context(cafile=str(ca_path))
        self._ready = ready
        self.first_ready: dict[str, tuple[float, str]] = {}
        self.error: BaseException | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._response: HTTPResponse | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{resource.plural}", daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def ready(self, name: str) -> tuple[float, str] | None:
        """(monotonic time, value) of the first time `name` was ready, or None; raises if the watch died."""
        if self.error is not None:
            raise RuntimeError(f"watch on {self._base} failed: {self.error!r}") from self.error
        return self.first_ready.get(name)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            if self._response is not None:
                self._response.close()
        self._thread.join(timeout=WATCH_SECONDS + 10)

    def _open(self, query: dict[str, str]) -> HTTPResponse:
        url = f"{self._base}?{urllib.parse.urlencode(query)}"
        request = urllib.request.Request(url, headers=self._headers)
        return cast(
            HTTPResponse, urllib.request.urlopen(request, timeout=WATCH_SECONDS + 30, context=self._context)
        )

    def _record(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        if name in self.first_ready:
            return
        value = self._ready(obj)
        if value:
            self.first_ready[name] = (time.monotonic(), value)

    def _run(self) -> None:
        try:
            version = self._list()
            while not self._stopping.is_set():
                version = self._watch(version)
        except BaseException as e:  # reported to the main thread through `ready`
            if not self._stopping.is_set():
                self.error = e

    def _list(self) -> str:
        query = {"limit": "500"}
        while True:
            with self._open(query) as response:
                page = json.load(response)
            for item in page.get("items") or []:
                self._record(item)
            token = page["metadata"].get("continue")
            if not token:
                return str(page["metadata"]["resourceVersion"])
            query["continue"] = token

    def _watch(self, version: str) -> str:
        query = {
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        response = self._open(query)
        with self._lock:
            self._response = response
        try:
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                obj = event["object"]
                if event["type"] == "ERROR":
                    if obj.get("code") == 410:  # too old: start again from a fresh list
                        return self._list()
                    raise RuntimeError(f"watch error: {obj}")
                version = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._record(obj)
        finally:
            with self._lock:
                self._response = None
            response.close()
        return version
