"""Reconciling a HybridCluster: the control-plane endpoint, the failure domains, and `provisioned`.

The endpoint is either given in the spec or allocated as a VIP from any CAPI IPAM pool through an
IPAddressClaim owned by the HybridCluster; the allocated address is then written to the spec, where CAPI
reads it (and where a clusterctl move carries it). Failure domains are reported as CAPI v1beta2's list.
A HybridCluster marked `cluster.x-k8s.io/managed-by` is someone else's and is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import ownership, pausing, reconciling
from capfleet.api import kinds
from capfleet.api.capi import IPAddress
from capfleet.api.hybrid_clusters import APIEndpoint, HybridCluster, HybridClusterSpec
from capfleet.conditions import Update
from capfleet.controller.caches import Reads
from capi_machine_glue import gates, inheritance, names, specs, summaries
from capi_machine_glue.contexts import ADDRESSES, CLAIMS, CLUSTERS, HYBRID_CLUSTERS, Context
from capi_machine_glue.deletions import ChildrenRemaining
from capi_machine_glue.machines import capi_cluster

MANAGED_BY_ANNOTATION = "cluster.x-k8s.io/managed-by"
ENDPOINT = "ControlPlaneEndpointReady"
STEPS = [ENDPOINT]
DEFAULT_API_PORT = 6443

Obj = Mapping[str, Any]


def externally_managed(meta: Mapping[str, Any]) -> bool:
    return MANAGED_BY_ANNOTATION in (meta.get("annotations") or {})


def failure_domains(spec: HybridClusterSpec) -> list[dict[str, Any]]:
    """status.failureDomains as CAPI v1beta2 reads it: a list of name, controlPlane, attributes."""
    result = []
    for domain in spec.failure_domains:
        attributes = {}
        if domain.hypervisor_selector:
            attributes.update(
                {f"hypervisor.{k}": v for k, v in domain.hypervisor_selector.match_labels.items()}
            )
        if domain.device_selector and domain.device_selector.site:
            attributes["site"] = domain.device_selector.site
        entry: dict[str, Any] = {"name": domain.name, "controlPlane": domain.control_plane}
        if attributes:
            entry["attributes"] = attributes
        result.append(entry)
    return result


def provisioned(hybrid: HybridCluster) -> bool:
    status = hybrid.status
    return bool(status and status.initialization and status.initialization.provisioned)


async def reconcile(ctx: Context, body: Obj) -> None:
    if pausing.moving(body["metadata"]):
        return
    meta = body["metadata"]
    namespace, name, reads = meta["namespace"], meta["name"], ctx.reads
    hybrid = kinds.HYBRID_CLUSTER.parse(body)
    cluster_name = gates.capi_owner(meta, CLUSTERS) or ownership.cluster_name(meta)
    recorder = reconciling.Recorder(ctx, HYBRID_CLUSTERS, body, STEPS)
    if cluster_name is None:
        recorder.note(
            Update.false(ENDPOINT, "WaitingForCluster", "no CAPI Cluster owns this HybridCluster yet")
        )
        await recorder.finish()
        return
    cluster = await capi_cluster(reads, cluster_name, namespace)
    claim_name = names.endpoint_claim(name)
    claim = (
        await reads.get(CLAIMS, claim_name, namespace)
        if hybrid.spec.control_plane_endpoint_pool_ref
        else None
    )
    paused = pausing.annotated(meta) or pausing.cluster_paused(cluster)
    await inheritance.mirror(ctx, [(CLAIMS, claim)] if claim else [], body, paused=paused)
    if paused:
        await reconciling.Recorder(ctx, HYBRID_CLUSTERS, body, None).paused()
        return
    recorder.fields["failureDomains"] = failure_domains(hybrid.spec)
    endpoint = await control_plane_endpoint(ctx, reads, body, hybrid.spec, claim, cluster_name)
    recorder.note(endpoint)
    if provisioned(hybrid) or endpoint.status == "True":
        recorder.fields["initialization"] = {"provisioned": True}
    await recorder.finish()


async def control_plane_endpoint(
    ctx: Context, reads: Reads, body: Obj, spec: HybridClusterSpec, claim: Obj | None, cluster_name: str
) -> Update:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    pool = spec.control_plane_endpoint_pool_ref
    if spec.control_plane_endpoint is not None:
        endpoint = spec.control_plane_endpoint
        text = f"{endpoint.host}:{endpoint.port}"
        if pool is not None and claim is not None:  # written by an earlier reconcile from the VIP claim
            return Update.true(ENDPOINT, "Allocated", f"{text} from {pool.kind} {pool.name}")
        return Update.true(ENDPOINT, "Set", text)
    if pool is None:
        return Update.false(
            ENDPOINT,
            "NoControlPlaneEndpoint",
            "set spec.controlPlaneEndpoint or spec.controlPlaneEndpointPoolRef",
        )
    if claim is None:
        metadata = ownership.child_metadata(names.endpoint_claim(name), body)
        metadata.setdefault("labels", {})[ownership.CLUSTER_NAME_LABEL] = cluster_name
        child = {
            "apiVersion": CLAIMS.api_version,
            "kind": CLAIMS.kind,
            "metadata": metadata,
            "spec": specs.claim_spec(pool, cluster_name).to_wire(),
        }
        claim, _ = await ctx.kube.create_or_get(CLAIMS, child, namespace)
    update = summaries.child_ready(ENDPOINT, "IPAddressClaim", claim, "Allocated")
    address_name = summaries.address_name(claim)
    if update.status != "True" or not address_name:
        return update
    address = await reads.get(ADDRESSES, address_name, namespace)
    if address is None:
        return Update.unknown(ENDPOINT, "Pending", f"IPAddress {address_name} not found")
    host = summaries.allocation(IPAddress.parse(address)).address
    endpoint_patch = {
        "spec": {"controlPlaneEndpoint": APIEndpoint(host=host, port=DEFAULT_API_PORT).to_wire()}
    }
    await ctx.kube.patch(HYBRID_CLUSTERS, name, endpoint_patch, namespace)
    return Update.true(ENDPOINT, "Allocated", f"{host}:{DEFAULT_API_PORT} from {pool.kind} {pool.name}")


async def delete(ctx: Context, body: Obj) -> None:
    """Release the VIP claim (if any) and wait for it; nothing for a move."""
    meta, reads = body["metadata"], ctx.reads
    if pausing.moving(meta) or externally_managed(meta):
        return
    namespace = meta["namespace"]
    claim_name = names.endpoint_claim(meta["name"])
    claim = await reads.get(CLAIMS, claim_name, namespace)
    if claim is None or not ownership.is_owned_by(claim, body):
        return
    if not claim["metadata"].get("deletionTimestamp"):
        await ctx.kube.delete(CLAIMS, claim_name, namespace)
    raise ChildrenRemaining(
        f"waiting for IPAddressClaim {claim_name} to be deleted",
        poll_seconds=ctx.settings.deletion_poll_seconds,
    )
