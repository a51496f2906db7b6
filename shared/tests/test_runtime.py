"""The runtime's options, kopf settings and the handler wrapper, without a cluster."""

import kopf
import prometheus_client
import pytest

from capfleet import errors, persistence, runtime
from capfleet.kube import KubeError
from capfleet.options import parse_options, split_address


def test_flags_override_environment() -> None:
    options = parse_options(
        ["--namespace", "a", "-n", "b", "--metrics-address", "127.0.0.1:9"],
        {
            "CAPFLEET_NAMESPACES": "x,y",
            "CAPFLEET_METRICS_ADDRESS": "0.0.0.0:1",
            "CAPFLEET_LOG_FORMAT": "json",
        },
    )
    assert options.namespaces == ("a", "b")
    assert options.metrics_address == "127.0.0.1:9"
    assert options.log_format == "json"
    assert not options.clusterwide


def test_environment_gives_namespaces_when_no_flag() -> None:
    assert parse_options([], {"CAPFLEET_NAMESPACES": "x,y"}).namespaces == ("x", "y")
    assert parse_options([], {}).clusterwide


def test_settings_carry_the_operators_own_marks() -> None:
    settings = kopf.OperatorSettings()
    runtime.configure(settings, runtime.Identity("libvirt-vm"), runtime.Options(standalone=True))
    assert settings.persistence.finalizer == "libvirt-vm.capfleet.dev/finalizer"
    assert settings.peering.name == "capfleet-libvirt-vm"
    assert settings.posting.enabled is False
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)


def test_on_the_engine_kopf_leaves_the_operators_finalizer_to_the_engine() -> None:
    settings = kopf.OperatorSettings()
    identity = runtime.Identity("capi-machine-glue", on_engine=True)
    runtime.configure(settings, identity, runtime.Options(standalone=True))
    assert identity.finalizer == "capi-machine-glue.capfleet.dev/finalizer", "objects keep the one they have"
    assert settings.persistence.finalizer != identity.finalizer


def claim(**meta: object) -> kopf.Body:
    raw = {"apiVersion": "v1", "kind": "Thing", "metadata": {"name": "t", **meta}, "spec": {"a": 1}}
    return kopf.Body(raw)  # type: ignore[arg-type]


def test_a_handler_that_succeeds_at_once_leaves_no_annotation_behind() -> None:
    storage = persistence.ProgressStorage(prefix="ipam-address.capfleet.dev")
    record = {"started": "2026-01-01T00:00:00", "success": True, "failure": False, "retries": 1}
    patch = kopf.Patch()
    storage.store(key=kopf.HandlerId("serve"), record=record, body=claim(), patch=patch)  # type: ignore[arg-type]
    storage.purge(key=kopf.HandlerId("serve"), body=claim(), patch=patch)
    assert not patch
    # once an object carries progress of ours, the mark stays with it
    kept = claim(annotations={"ipam-address.capfleet.dev/other": "{}"})
    patch = kopf.Patch()
    storage.store(key=kopf.HandlerId("serve"), record=record, body=kept, patch=patch)  # type: ignore[arg-type]
    storage.purge(key=kopf.HandlerId("serve"), body=kept, patch=patch)
    assert patch["metadata"]["annotations"] == {"ipam-address.capfleet.dev/kopf-managed": "yes"}


def test_a_shard_watches_only_its_label_and_elects_its_own_leader() -> None:
    options = parse_options(["--watch-filter", "b"], {"CAPFLEET_WATCH_FILTER": "a"})
    assert options.watch_filter == "b"
    assert parse_options([], {"CAPFLEET_WATCH_FILTER": "a"}).watch_filter == "a"
    identity = runtime.Identity("ipam-address")
    assert options.shard_name(identity) == "capfleet-ipam-address-b"
    assert runtime.Options().shard_name(identity) == "capfleet-ipam-address"
    settings = kopf.OperatorSettings()
    runtime.configure(settings, identity, options)
    assert settings.peering.name == "capfleet-ipam-address-b"
    claims = kopf.Resource("ipam.cluster.x-k8s.io", "v1beta2", "ipaddressclaims")
    peerings = kopf.Resource("kopf.dev", "v1", "kopfpeerings")
    assert settings.watching.label_selectors.collect(claims) == ["cluster.x-k8s.io/watch-filter=b"]
    crds = kopf.Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    namespaces = kopf.Resource("", "v1", "namespaces")
    for kopfs_own in (peerings, crds, namespaces):
        assert settings.watching.label_selectors.collect(kopfs_own) == []
    unsharded = kopf.OperatorSettings()
    runtime.configure(unsharded, identity, runtime.Options())
    assert unsharded.watching.label_selectors.collect(claims) == []


def _count(kind: str, result: str) -> float:
    value = prometheus_client.REGISTRY.get_sample_value(
        "capfleet_reconciles_total", {"kind": kind, "result": result}
    )
    return value or 0.0


async def test_reconciler_translates_errors_and_counts_results() -> None:
    @runtime.reconciler("UnitTest")
    async def handler(retry: int) -> str:
        if retry == 0:
            return "done"
        raise errors.BackendUnavailable("down")

    before_ok, before_retry = _count("UnitTest", "success"), _count("UnitTest", "retry")
    assert await handler(retry=0) == "done"
    with pytest.raises(kopf.TemporaryError) as caught:
        await handler(retry=2)
    assert caught.value.delay is not None
    assert 4.0 <= caught.value.delay <= 8.0
    assert _count("UnitTest", "success") == before_ok + 1
    assert _count("UnitTest", "retry") == before_retry + 1


async def test_an_unexpected_api_answer_is_retried_by_what_it_means_not_kopfs_flat_minute() -> None:
    answers = [
        KubeError(504, "Timeout", "request did not complete within requested timeout"),
        KubeError(409, "Conflict", "the object has been modified"),
        KubeError(403, "Forbidden", "cannot patch secrets"),
    ]

    @runtime.reconciler("UnitTest")
    async def handler(retry: int) -> None:
        raise answers.pop(0)

    delays = []
    for _ in range(3):
        with pytest.raises(kopf.TemporaryError) as caught:
            await handler(retry=0)
        delays.append(caught.value.delay)
    assert 1.0 <= (delays[0] or 0) <= 2.0  # unavailable: 2 s, jittered
    assert 0.5 <= (delays[1] or 0) <= 1.0  # a conflict: 1 s
    assert 30.0 <= (delays[2] or 0) <= 60.0  # refused: slowly


def test_split_address() -> None:
    assert split_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert split_address(":9440") == ("0.0.0.0", 9440)


def test_the_marks_an_operator_writes_itself_are_not_changes_kopf_handles() -> None:
    settings = kopf.OperatorSettings()
    own_mark = "baremetal.capfleet.dev/network-booted-at"
    runtime.configure(
        settings, runtime.Identity("baremetal-provision", quiet_marks=(own_mark,)), runtime.Options()
    )
    storage = settings.persistence.diffbase_storage
    annotations = {"baremetal.capfleet.dev/seed-fetched-at": "1"}
    patch = kopf.Patch()
    handled = claim(annotations=annotations)
    storage.store(body=handled, patch=patch, essence=storage.build(body=handled))
    annotations.update(patch["metadata"]["annotations"])  # kopf's record of what it handled, as written

    def marked(**more: str) -> kopf.Body:
        return claim(annotations={**annotations, **more})

    own = marked(**{own_mark: "2", "capfleet.dev/held-secrets": "ns/bmc"})
    assert storage.fetch(body=own) == storage.build(body=own), "its own marks and Secret holds: no change"
    guest = marked(**{"baremetal.capfleet.dev/called-back-at": "3"})
    assert storage.fetch(body=guest) != storage.build(body=guest), "the guest's mark is a change to handle"


async def test_a_deletion_handler_ends_with_kopfs_patch_and_never_runs_again_for_what_it_released() -> None:
    """kopf may run a deletion handler again for a watch event older than the object's release (its
    consistency timeout passed before the watch showed the object gone): the handler must not act on a
    released object again. One that failed runs again."""
    identity = runtime.Identity("unit-test")
    runs: list[str] = []

    @runtime.releases_at_once(identity)
    async def release(uid: str, patch: kopf.Patch, fail: bool = False) -> None:
        runs.append(uid)
        if fail:
            raise errors.BackendUnavailable("BMC down")

    first = kopf.Patch()
    with pytest.raises(errors.BackendUnavailable):
        await release(uid="u1", patch=first, fail=True)
    assert first == {}
    await release(uid="u1", patch=first)
    assert identity.released_annotation in first["metadata"]["annotations"]
    again = kopf.Patch()
    await release(uid="u1", patch=again)
    assert again == {}, "nothing for kopf to write either"
    await release(uid="u2", patch=kopf.Patch())
    assert runs == ["u1", "u1", "u2"]


def test_released_objects_are_forgotten_after_their_time() -> None:
    released = runtime.Released(seconds=0.0)
    released.add("u1")
    assert "u1" not in released
    kept = runtime.Released()
    kept.add("u1")
    assert "u1" in kept
    assert "u2" not in kept


def test_an_image_reports_the_release_it_was_built_for_and_a_source_checkout_its_own() -> None:
    assert runtime.release({"CAPFLEET_VERSION": "0.2.0"}) == "0.2.0"
    assert runtime.release({"CAPFLEET_VERSION": ""}) == runtime.VERSION
    assert runtime.release({}) == runtime.VERSION


def test_in_a_pod_the_api_server_is_the_kubernetes_services_address_without_dns() -> None:
    from capfleet.kube import in_cluster_server

    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert in_cluster_server(env) == "https://10.0.0.1:443"
    assert in_cluster_server({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}) == "https://[fd00::1]:443"
    assert in_cluster_server({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is None
    assert in_cluster_server({}) is None
