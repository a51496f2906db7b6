"""One reconcile against a fake BMC and a fake API (no cluster): which actions reach the BMC in which
order, which marks and status are written, and which Events are posted."""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, cast

import pytest
from baremetal_helpers import instance_body
from boot_server_harness import TOKENS

from baremetal_provision import markers, provisioning
from baremetal_provision.backends.base import BMC, BootDevice, Credentials, PowerState, SystemFacts
from baremetal_provision.contexts import INSTANCES, Context, OpenedAttempts
from baremetal_provision.settings import BaremetalSettings
from capfleet import errors, events, pausing, secretholds
from capfleet.api.baremetal import BaremetalInstance
from capfleet.kube import Kube
from capfleet.resources import Resource

HOLD = "ns.baremetalinstance.holds.capfleet.dev/bm"
GRANT = "capfleet-baremetal-provision-secrets"


class FakeKube:
    """What a reconcile asks of the API: Secrets, annotation and status patches, Events."""

    field_manager = "capfleet-baremetal-provision"

    def __init__(self, secrets: dict[str, dict[str, str]]) -> None:
        self.secrets = secrets
        self.finalizers: dict[str, set[str]] = {}
        self.annotations: dict[str, str] = {}
        self.annotation_patches: list[set[str]] = []
        self.status: list[dict[str, Any]] = []
        self.events: list[tuple[str, str]] = []
        self.instance: dict[str, Any] | None = None  # read back with the annotations patched since

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        if resource.plural == INSTANCES.plural:
            if self.instance is None:
                return None
            meta = self.instance["metadata"]
            return {
                **self.instance,
                "metadata": {**meta, "annotations": {**meta["annotations"], **self.annotations}},
            }
        data = self.secrets.get(name) if resource.plural == "secrets" else None
        if data is None:
            return None
        finalizers = sorted(self.finalizers.get(name, set()))
        return {"metadata": {"name": name, "namespace": namespace, "finalizers": finalizers}, "data": data}

    async def patch(
        self, resource: Resource, name: str, patch: dict[str, Any], namespace: str, *, strategic: bool = False
    ) -> None:
        meta = patch["metadata"]
        if strategic:  # a Secret's finalizers (capfleet.secretholds)
            held = self.finalizers.setdefault(name, set())
            held.update(meta.get("finalizers", []))
            held.difference_update(meta.get("$deleteFromPrimitiveList/finalizers", []))
            return
        self.annotations.update(meta["annotations"])
        self.annotation_patches.append(set(meta["annotations"]))

    async def patch_status(
        self, resource: Resource, name: str, patch: dict[str, Any], namespace: str
    ) -> None:
        self.status.append(patch)

    async def create(self, resource: Resource, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        self.events.append((body["type"], body["reason"]))
        return body


class FakeBMC:
    """A server whose power and boot device follow the requests at once."""

    def __init__(self, power: PowerState = "Off", device: BootDevice = "disk", override: str = "Continuous"):
        self.power, self.device, self.override = power, device, override
        self.calls: list[str] = []
        self.refuse: errors.CapfleetError | None = None

    async def facts(self) -> SystemFacts:
        if self.refuse is not None:
            raise self.refuse
        return SystemFacts(self.power, self.device, self.override)

    async def power_on(self) -> None:
        self.calls.append("power_on")
        self.power = "On"

    async def power_off(self, *, force: bool) -> None:
        self.calls.append("power_off" if force else "shut_down")
        self.power = "Off"

    async def set_boot_device(self, device: Literal["pxe", "disk"], *, once: bool) -> None:
        self.calls.append(f"boot_{device}_{'once' if once else 'persistent'}")
        self.device, self.override = device, "Once" if once else "Continuous"

    async def close(self) -> None:
        self.calls.append("close")


class FakeContext(Context):
    server: FakeBMC

    def connect(self, address: str, credentials: Credentials, verify: bool) -> BMC:
        assert credentials == Credentials("admin", "secret")
        return self.server

    async def current(self, instance: BaremetalInstance) -> BaremetalInstance | None:
        """The API's instance when a test set one, else the pass's own with the annotations patched since."""
        kube = cast(FakeKube, self.kube)
        if kube.instance is not None:
            return await super().current(instance)
        meta = instance.metadata
        return instance.model_copy(
            update={"metadata": {**meta, "annotations": {**meta.get("annotations", {}), **kube.annotations}}}
        )


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def context(server: FakeBMC, *, with_secret: bool = True) -> tuple[FakeContext, FakeKube]:
    secrets = {"bm-bmc": {"username": b64("admin"), "password": b64("secret")}} if with_secret else {}
    kube = FakeKube(secrets)
    api = cast(Kube, kube)
    ctx = FakeContext(api, events.Recorder(api), BaremetalSettings(), {}, OpenedAttempts(), TOKENS)
    ctx.server = server
    return ctx, kube


def body(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return instance_body({markers.TOKEN_SALT: "s" * 32, **(annotations or {})}, **spec)


def ago(seconds: int) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def last(kube: FakeKube, key: str) -> Any:
    """The last value written to status key `key`."""
    return next(patch[key] for patch in reversed(kube.status) if key in patch)


def condition(kube: FakeKube, type_: str) -> dict[str, Any]:
    return next(c for c in last(kube, "conditions") if c["type"] == type_)


async def test_a_new_instance_is_powered_off_then_network_booted_once() -> None:
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    marks_at_power_on: list[set[str]] = []
    power_on = server.power_on

    async def noting_marks() -> None:
        marks_at_power_on.append(set(kube.annotations))
        await power_on()

    server.power_on = noting_marks  # type: ignore[method-assign]
    await provisioning.reconcile(ctx, body())
    assert server.calls == ["power_off", "boot_pxe_once", "power_on", "close"]
    assert markers.NETWORK_BOOTED in kube.annotations
    assert [markers.BOOT_WINDOW in marks for marks in marks_at_power_on] == [True], "window opened first"
    # Each phase is written once: PoweringOff before its slow action, NetworkBooting after the network
    # boot, with the attempt it opened.
    assert [(p.get("phase"), p.get("provisioningAttempts")) for p in kube.status] == [
        ("PoweringOff", None),
        ("NetworkBooting", 1),
    ]
    assert kube.events == [("Normal", "PoweringOff"), ("Normal", "NetworkBooting")]
    assert condition(kube, "BMCReachable")["reason"] == "Connected"
    assert condition(kube, "Ready")["reason"] == "NetworkBooting"
    # The credentials Secret is held (recorded first) until the instance's deletion is done.
    assert kube.annotations[secretholds.HELD_ANNOTATION] == "ns/bm-bmc"
    # Its Secret held, and the namespace's deploy/tenant RoleBinding that lets it read and let go of it.
    assert kube.finalizers == {"bm-bmc": {HOLD}, GRANT: {HOLD}}


async def test_a_new_instance_gets_its_token_and_the_boot_server_knows_it_before_the_power_on() -> None:
    server = FakeBMC(power="Off")
    ctx, kube = context(server)
    known_at_power_on: list[bool] = []
    power_on = server.power_on

    async def noting_attempts() -> None:
        token = TOKENS.of({"name": "bm", "namespace": "ns", "annotations": dict(kube.annotations)})
        known_at_power_on.append(token is not None and ctx.attempts.instance_of(token) == ("ns", "bm"))
        await power_on()

    server.power_on = noting_attempts  # type: ignore[method-assign]
    given = body()
    del given["metadata"]["annotations"][markers.TOKEN_SALT]
    await provisioning.reconcile(ctx, given)
    assert known_at_power_on == [True]
    # The server was off: the first action is the network boot, and one patch before it holds the token,
    # the first-action mark and the open boot window; one after it, the network boot.
    ours = [marks for marks in kube.annotation_patches if secretholds.HELD_ANNOTATION not in marks]
    assert ours == [
        {markers.TOKEN_SALT, markers.BMC_TOUCHED, markers.BOOT_WINDOW},
        {markers.NETWORK_BOOTED},
    ]
    ctx.forget(given["metadata"])
    assert ctx.attempts.instances == {}


async def test_a_restart_while_network_booting_does_not_power_cycle_again() -> None:
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    await provisioning.reconcile(ctx, body({markers.NETWORK_BOOTED: ago(10)}))
    assert server.calls == ["close"]
    assert last(kube, "phase") == "NetworkBooting"


async def test_a_pass_from_a_late_event_acts_on_the_marks_as_they_are_now() -> None:
    """A pass that started from an event the watch delivered late (the instance as it was before its
    network boot) reads the instance afresh before acting, and does not boot the server a second time
    (at N = 500 nine were, and their installers, refused the callback key served once, could not call
    back)."""
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    booted = {markers.BMC_TOUCHED: ago(20), markers.BOOT_WINDOW: ago(20), markers.NETWORK_BOOTED: ago(15)}
    kube.instance = body(booted)
    await provisioning.reconcile(ctx, body())
    assert server.calls == ["close"]
    assert last(kube, "phase") == "NetworkBooting"
    assert markers.BMC_TOUCHED not in kube.annotations, "no mark written again"


async def test_a_pass_for_an_instance_gone_from_the_api_does_not_act() -> None:
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    kube.instance = body()
    kube.instance["metadata"]["uid"] = "another-instance-of-that-name"
    await provisioning.reconcile(ctx, body())
    assert server.calls == ["close"]


async def test_the_callback_puts_the_boot_device_back_on_disk_then_reports_provisioned() -> None:
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    marks = {markers.NETWORK_BOOTED: ago(30), markers.SEED_FETCHED: ago(20), markers.CALLED_BACK: ago(1)}
    await provisioning.reconcile(ctx, body(marks))
    assert server.calls == ["boot_disk_persistent", "close"]
    assert [p["phase"] for p in kube.status if "phase" in p] == ["Provisioned"]
    assert kube.events == [("Normal", "Provisioned")]
    assert condition(kube, "Ready")["status"] == "True"
    assert condition(kube, "Provisioned")["reason"] == "Deployed"


async def test_online_false_shuts_a_provisioned_server_down() -> None:
    server = FakeBMC(power="On")
    ctx, _ = context(server)
    await provisioning.reconcile(ctx, body({markers.CALLED_BACK: ago(1)}, online=False))
    assert server.calls == ["shut_down", "close"]


async def test_an_installer_that_never_calls_back_fails_its_only_attempt() -> None:
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    given = body({markers.NETWORK_BOOTED: ago(120)}, provisioningTimeoutSeconds=60, maxProvisioningAttempts=1)
    await provisioning.reconcile(ctx, given)
    assert server.calls == ["power_off", "boot_disk_persistent", "close"], "powered off once"
    assert last(kube, "phase") == "Failed"
    provisioned = condition(kube, "Provisioned")
    assert provisioned["reason"] == "RetryLimitExceeded"
    assert (
        provisioned["message"]
        == "1 of 1 attempts failed; the last: ProvisioningTimedOut: no callback within 60s"
    )
    assert kube.annotations[markers.FAILED_ATTEMPTS] == "1"
    assert last(kube, "lastFailure") == "ProvisioningTimedOut: no callback within 60s"
    assert kube.events == [
        ("Warning", "Retrying"),
        ("Warning", "ProvisioningTimedOut"),
        ("Warning", "Failed"),
    ]


async def test_a_reported_failure_is_counted_and_the_next_attempt_network_boots_afresh() -> None:
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    reported = {
        markers.NETWORK_BOOTED: ago(30),
        markers.BOOT_REQUESTER: "172.30.1.50",
        markers.SEED_FETCHED: ago(20),
        markers.FAILURE_REPORTED: "BadChecksum: the image is not the one asked for",
        markers.FAILED_ATTEMPTS: "1",
    }
    await provisioning.reconcile(ctx, body(reported))
    assert server.calls == ["power_off", "boot_pxe_once", "power_on", "close"]
    assert kube.annotations[markers.FAILED_ATTEMPTS] == "2"
    assert kube.annotations[markers.LAST_FAILURE] == "BadChecksum: the image is not the one asked for"
    assert kube.annotations[markers.FAILURE_REPORTED] is None  # removed, with the seed mark, in one patch
    assert kube.annotations[markers.SEED_FETCHED] is None
    assert kube.annotations[markers.BOOT_REQUESTER] is None  # the next attempt binds afresh
    assert kube.annotations[markers.NETWORK_BOOTED]  # the next attempt's power cycle
    assert last(kube, "phase") == "NetworkBooting"
    assert last(kube, "provisioningAttempts") == 3
    assert ("Warning", "BadChecksum") in kube.events


async def test_an_image_deployment_power_cycles_onto_the_disk_once() -> None:
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    deployed = {markers.NETWORK_BOOTED: ago(60), markers.SEED_FETCHED: ago(50), markers.CALLED_BACK: ago(1)}
    image = {"url": "http://h/node.raw", "checksum": "ab" * 32}
    await provisioning.reconcile(ctx, body(deployed, os=None, image=image))
    assert server.calls == ["power_off", "boot_disk_persistent", "power_on", "close"]
    assert kube.annotations[markers.DISK_BOOTED]
    # Powered off, then on again, within the pass: the status is written once, where the pass ends.
    assert [(p.get("phase"), p.get("powerState")) for p in kube.status] == [("Provisioned", "On")]
    server.calls.clear()
    await provisioning.reconcile(ctx, body({**deployed, **kube.annotations}, os=None, image=image))
    assert server.calls == ["close"], "booted once; a running server is left alone"


async def test_a_paused_instance_is_left_alone() -> None:
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    await provisioning.reconcile(ctx, body({pausing.PAUSED_ANNOTATION: ""}))
    assert server.calls == []
    assert condition(kube, "Paused")["status"] == "True"
    assert kube.events == []


async def test_missing_credentials_are_reported_on_ready() -> None:
    server = FakeBMC()
    ctx, kube = context(server, with_secret=False)
    with pytest.raises(errors.DependencyMissing):
        await provisioning.reconcile(ctx, body())
    assert server.calls == []
    ready = condition(kube, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "CredentialsMissing")
    assert kube.events == [("Warning", "CredentialsMissing")]


async def test_a_refusing_bmc_is_reported_on_bmc_reachable() -> None:
    server = FakeBMC()
    server.refuse = errors.BackendRejected("BMC refused the credentials", reason="AuthenticationFailed")
    ctx, kube = context(server)
    with pytest.raises(errors.BackendRejected):
        await provisioning.reconcile(ctx, body())
    assert condition(kube, "BMCReachable")["reason"] == "AuthenticationFailed"
    assert condition(kube, "Ready")["reason"] == "AuthenticationFailed"


async def test_deletion_network_boots_the_cleaner_and_waits_for_it() -> None:
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    deleted = body({markers.CALLED_BACK: ago(600)}, cleaning="metadata")
    with pytest.raises(provisioning.CleaningInProgress):
        await provisioning.deprovision(ctx, deleted, patience=0)
    assert server.calls == ["power_off", "boot_pxe_once", "power_on", "close"]
    assert markers.CLEANING_BOOTED in kube.annotations
    assert kube.events == [("Normal", "Cleaning")]


async def test_a_deletion_waits_for_the_cleaner_and_goes_on_as_soon_as_it_calls_back() -> None:
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    deleted = body({markers.CALLED_BACK: ago(600)}, cleaning="metadata")
    kube.instance = deleted
    deletion = asyncio.create_task(provisioning.deprovision(ctx, deleted))
    for _ in range(500):
        if "power_on" in server.calls:
            break
        await asyncio.sleep(0.01)
    assert server.calls == ["power_off", "boot_pxe_once", "power_on", "close"], "the cleaner boots"
    assert not deletion.done(), "the deletion waits for the cleaner in the handler, not in kopf's retry"
    kube.annotations[markers.CLEANED] = ago(0)  # what the boot server writes, then says
    ctx.attempts.callback("ns", "bm").set()
    await asyncio.wait_for(deletion, 2.0)  # well before the first look again (CleaningInProgress: 5 s)
    assert server.calls[4:] == ["shut_down", "boot_disk_persistent", "close"]
    assert kube.events == [("Normal", "Cleaning"), ("Normal", "Deprovisioning")]
    assert ctx.attempts._callbacks == {}, "forgotten with the instance"


async def test_deletion_after_cleaning_powers_off_and_boots_from_disk() -> None:
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    marks = {markers.CALLED_BACK: ago(600), markers.CLEANING_BOOTED: ago(60), markers.CLEANED: ago(1)}
    kube.finalizers["bm-bmc"] = {HOLD, "other.netboxdevice.holds.capfleet.dev/x"}
    held = {secretholds.HELD_ANNOTATION: "ns/bm-bmc"}
    kube.instance = body({**marks, **held}, cleaning="metadata")
    await provisioning.deprovision(ctx, kube.instance)
    assert kube.finalizers == {"bm-bmc": {"other.netboxdevice.holds.capfleet.dev/x"}, GRANT: set()}, (
        "only its own hold goes, from the Secret and the RoleBinding"
    )
    assert server.calls == ["shut_down", "boot_disk_persistent", "close"]
    assert last(kube, "phase") == "Deprovisioning"
    assert kube.events == [("Normal", "Deprovisioning")]
    assert ctx.locks == {}


async def test_a_cleaner_that_never_calls_back_is_given_up_on() -> None:
    server = FakeBMC(power="On", device="pxe", override="Once")
    ctx, kube = context(server)
    marks = {markers.CALLED_BACK: ago(600), markers.CLEANING_BOOTED: ago(120)}
    await provisioning.deprovision(ctx, body(marks, cleaning="metadata", provisioningTimeoutSeconds=60))
    assert server.calls == ["shut_down", "boot_disk_persistent", "close"]
    assert kube.events == [("Warning", "CleaningTimedOut"), ("Normal", "Deprovisioning")]


async def test_deletion_for_a_move_leaves_the_server_alone() -> None:
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    await provisioning.deprovision(ctx, body({pausing.DELETE_FOR_MOVE_ANNOTATION: ""}, cleaning="metadata"))
    assert server.calls == []
    assert kube.status == []


async def test_the_first_action_on_a_bmc_is_marked_before_it_happens() -> None:
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    marks_at_first_call: list[set[str]] = []
    power_off = server.power_off

    async def noting_marks(*, force: bool) -> None:
        marks_at_first_call.append(set(kube.annotations))
        await power_off(force=force)

    server.power_off = noting_marks  # type: ignore[method-assign]
    await provisioning.reconcile(ctx, body())
    assert markers.BMC_TOUCHED in marks_at_first_call[0]


async def test_deleting_an_instance_that_never_acted_needs_no_bmc() -> None:
    server = FakeBMC(power="On")
    server.refuse = errors.BackendRejected("BMC refused the credentials", reason="AuthenticationFailed")
    ctx, kube = context(server)
    with pytest.raises(errors.BackendRejected):
        await provisioning.reconcile(ctx, body())
    assert markers.BMC_TOUCHED not in kube.annotations
    server.calls.clear()
    await provisioning.deprovision(ctx, body())  # the wrong password never did anything: nothing to undo
    assert server.calls == []
    with pytest.raises(errors.BackendRejected):
        await provisioning.deprovision(ctx, body({markers.BMC_TOUCHED: ago(60)}))


async def test_a_detached_instance_leaves_its_bmc_alone_and_is_deleted_without_it() -> None:
    server = FakeBMC(power="On")
    server.refuse = errors.BackendUnavailable("no route to the BMC", reason="Unreachable")
    ctx, kube = context(server)
    detached = {markers.DETACHED: "", markers.CALLED_BACK: ago(600), markers.DISK_BOOTED: ago(500)}
    await provisioning.reconcile(ctx, body(detached))
    assert condition(kube, "BMCReachable")["reason"] == "Detached"
    assert condition(kube, "Ready")["status"] == "False"
    await provisioning.deprovision(ctx, body(detached, cleaning="metadata"))
    assert server.calls == []


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ("password", "CredentialsInvalid"),  # the BMC password taken out of its Secret
        ("secret", "CredentialsMissing"),  # the Secret deleted
        ("cidr", "BMCAddressRefused"),  # a CIDR added that the BMC is not in
    ],
)
async def test_a_touched_server_whose_bmc_cannot_be_used_is_not_released_as_it_is(
    change: str, cause: str
) -> None:
    """No deletion is fail-open: a server that was acted on is powered off (and cleaned) before its
    object goes, so one whose spec or Secret no longer lets capfleet reach its BMC waits, says why and
    names the ways out; `detached` is the one that needs no BMC."""
    server = FakeBMC(power="On")
    ctx, kube = context(server)
    if change == "password":
        kube.secrets["bm-bmc"] = {"username": b64("admin")}
    elif change == "secret":
        kube.secrets.clear()
    bmc = {"address": "ipmi://10.0.0.1", "credentialsSecretRef": {"name": "bm-bmc"}}
    spec = {"bmc": {**bmc, "addressCIDRs": ["192.0.2.0/24"]}} if change == "cidr" else {}
    touched = {markers.BMC_TOUCHED: ago(600), markers.CALLED_BACK: ago(500)}
    deleted = body(touched, cleaning="metadata", **spec)
    with pytest.raises(errors.Waiting) as raised:
        await provisioning.deprovision(ctx, deleted, patience=0)
    assert server.calls == []
    ready = condition(kube, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", provisioning.DELETION_BLOCKED)
    assert cause in ready["message"]
    assert markers.DETACHED in ready["message"]
    assert "powered off and cleaned" in str(raised.value)
    assert ("Warning", provisioning.DELETION_BLOCKED) in kube.events
    await provisioning.deprovision(ctx, body({**touched, markers.DETACHED: ""}, cleaning="metadata", **spec))
    assert server.calls == []
