"""Pause detection, owner references, status differences and Event bodies."""

from typing import Any

from capfleet import conditions, events, ownership, pausing, statuses
from capfleet.api import capi
from capfleet.conditions import Update

OWNER = {
    "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
    "kind": "HybridMachine",
    "metadata": {
        "name": "m1",
        "namespace": "ns",
        "uid": "u-1",
        "labels": {ownership.CLUSTER_NAME_LABEL: "c1"},
    },
}


def test_pause_by_annotation_or_cluster_spec() -> None:
    assert pausing.annotated({"annotations": {pausing.PAUSED_ANNOTATION: ""}})
    assert not pausing.annotated({"annotations": {}})
    assert pausing.cluster_paused(capi.Cluster.parse({"spec": {"paused": True}, "metadata": {}}))
    assert pausing.cluster_paused(
        capi.Cluster.parse({"spec": {}, "metadata": {"annotations": {pausing.PAUSED_ANNOTATION: "true"}}})
    )
    assert not pausing.cluster_paused(capi.Cluster.parse({"spec": {}, "metadata": {}}))
    assert not pausing.cluster_paused(None)
    assert pausing.condition(True).reason == "Paused"
    assert pausing.condition(False) == Update.false("Paused", "NotPaused")


def test_an_object_clusterctl_is_moving_away_is_hands_off_even_without_its_paused_annotation() -> None:
    # clusterctl replaces every annotation by delete-for-move just before deleting the source object.
    moving = {"annotations": {pausing.DELETE_FOR_MOVE_ANNOTATION: ""}}
    assert pausing.moving(moving)
    assert pausing.hands_off(moving)
    assert pausing.hands_off({"annotations": {pausing.PAUSED_ANNOTATION: ""}})
    assert not pausing.hands_off({"annotations": {"other": "x"}})
    assert not pausing.annotated(moving)


def test_child_metadata_links_owner_and_cluster_label() -> None:
    meta = ownership.child_metadata("m1-nic0", OWNER)
    assert meta["namespace"] == "ns"
    assert meta["labels"] == {ownership.CLUSTER_NAME_LABEL: "c1"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": OWNER["apiVersion"],
            "kind": "HybridMachine",
            "name": "m1",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    child = {"metadata": meta}
    assert ownership.is_owned_by(child, OWNER)
    assert ownership.controller_of(child) == meta["ownerReferences"][0]
    sharded: dict[str, Any] = {**OWNER, "metadata": {"name": "m1", "uid": "u-1"}}
    sharded["metadata"]["labels"] = {ownership.WATCH_FILTER_LABEL: "b"}
    assert ownership.child_metadata("m1-nic0", sharded)["labels"][ownership.WATCH_FILTER_LABEL] == "b"


def test_status_differences_are_only_changed_keys() -> None:
    current = {"a": 1, "b": [1, 2]}
    assert statuses.differences(current, {"a": 1, "b": [1, 2]}) == {}
    assert statuses.differences(current, {"a": 2, "b": [1, 2], "c": "x"}) == {"a": 2, "c": "x"}


def test_with_conditions_is_stable_when_nothing_changes() -> None:
    updates = [Update.true("Scheduled", "Placed")]
    first = statuses.with_conditions({}, updates, generation=1, ready_steps=["Scheduled"])
    again = statuses.with_conditions({"conditions": first}, updates, generation=1, ready_steps=["Scheduled"])
    assert again == first
    assert [c["type"] for c in first] == ["Scheduled", "Ready"]


def test_transitions_lists_changed_conditions_only() -> None:
    before = conditions.apply_all([], [Update.true("A", "Ok"), Update.false("B", "Wait")], generation=1)
    after = conditions.apply_all(before, [Update.true("A", "Ok"), Update.true("B", "Done")], generation=1)
    assert [c.type for c in statuses.transitions(before, after)] == ["B"]


def test_event_body_refers_to_the_object_and_truncates() -> None:
    event = events.build(OWNER, "Warning", "InvalidSpec", "x" * 5000, "capfleet-test")
    assert event["involvedObject"]["uid"] == "u-1"
    assert event["metadata"]["namespace"] == "ns"
    assert len(event["message"]) == 1024


def test_resource_watch_is_what_kopf_takes() -> None:
    from capfleet.api import kinds

    assert kinds.LIBVIRT_VM.resource.watch == (kinds.LIBVIRT_GROUP, kinds.VERSION, "libvirtvms")
