"""The Redfish backend reads the System where its state is wanted, not before every action: a loopback
stub (the few Redfish documents sushy reads) counts the requests of a pass's usual calls."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from baremetal_provision.backends import base, bmc

SYSTEM = "/redfish/v1/Systems/1"


class Redfish(BaseHTTPRequestHandler):
    """Root, the Systems collection and one System, whose power follows its Reset action."""

    requests: list[str] = []
    power = "Off"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, document: dict[str, object] | None) -> None:
        body = json.dumps(document or {}).encode()
        self.send_response(200 if document is not None else 204)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.rstrip("/")
        Redfish.requests.append(f"GET {path}")
        documents: dict[str, dict[str, object]] = {
            "/redfish/v1": {
                "@odata.id": "/redfish/v1/",
                "Id": "RootService",
                "RedfishVersion": "1.6.0",
                "UUID": "00000000-0000-0000-0000-000000000000",
                "Systems": {"@odata.id": "/redfish/v1/Systems"},
            },
            "/redfish/v1/Systems": {"@odata.id": "/redfish/v1/Systems", "Members": [{"@odata.id": SYSTEM}]},
            SYSTEM: {
                "@odata.id": SYSTEM,
                "Id": "1",
                "UUID": "11111111-1111-1111-1111-111111111111",
                "SerialNumber": "S1",
                "PowerState": Redfish.power,
                "Boot": {
                    "BootSourceOverrideEnabled": "Disabled",
                    "BootSourceOverrideTarget": "None",
                    "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Hdd"],
                },
                "Actions": {
                    "#ComputerSystem.Reset": {
                        "target": f"{SYSTEM}/Actions/ComputerSystem.Reset",
                        "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown"],
                    }
                },
            },
        }
        self._answer(documents.get(path, {}))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        reset = json.loads(self.rfile.read(length) or b"{}").get("ResetType")
        Redfish.requests.append(f"POST {self.path}")
        Redfish.power = "On" if reset == "On" else "Off"
        self._answer(None)

    def do_PATCH(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Redfish.requests.append(f"PATCH {self.path}")
        self._answer(None)


@pytest.fixture
def redfish() -> Iterator[str]:
    Redfish.requests, Redfish.power = [], "Off"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redfish)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"redfish+http://127.0.0.1:{server.server_address[1]}{SYSTEM}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_network_boot_reads_the_system_for_its_state_not_before_each_action(redfish: str) -> None:
    target = bmc.connect(redfish, base.Credentials("admin", "password"), verify=True)
    try:
        assert (await target.facts()).power_state == "Off"
        await target.set_boot_device("pxe", once=True)
        await target.power_on()
        assert (await target.facts()).power_state == "On"
    finally:
        await target.close()
    # The System is read for each state wanted and once more by sushy's boot-option patch (for its
    # settings), not before each action: five reads before.
    system_reads = [r for r in Redfish.requests if r == f"GET {SYSTEM}"]
    assert len(system_reads) == 3, Redfish.requests
    assert [r.split()[0] for r in Redfish.requests if not r.startswith("GET")] == ["PATCH", "POST"]
