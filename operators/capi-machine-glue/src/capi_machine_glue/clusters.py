"""Reconciling a HybridCluster: the control-plane endpoint, the failure domains, and `provisioned`.

The endpoint is either given in the spec or allocated as a VIP from any CAPI IPAM pool through an
IPAddressClaim owned by the HybridCluster; the allocated address is then written to the spec, where CAPI
reads it (and where a clusterctl move carries it). Failure domains are reported as CAPI v1beta2's list.
A HybridCluster marked `cluster.x-k8s.io/managed-by` is someone else's and is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capfleet import ownership, pausing
from capfleet.api import kinds
from capfleet.api.hybrid_clusters import HybridClusterSpec
from capfleet.conditions import Update
from capi_machine_glue import names, summaries
from capi_machine_glue.contexts import ADDRESSES, CLAIMS, CLUSTERS, HYBRID_CLUSTERS, Context, write_status
from capi_machine_glue.machines import ChildrenRemaining
from capi_machine_glue.wakeups import HYBRID_CLUSTER, Key

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


def cluster_owner(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "Cluster" and str(ref.get("apiVersion", "")).startswith("cluster.x-k8s.io/"):
            return str(ref["name"])
    return None


async def reconcile(ctx: Context, namespace: str, name: str) -> None:
    body = await ctx.kube.get(HYBRID_CLUSTERS, name, namespace)
    if body is None or body["metadata"].get("deletionTimestamp") or externally_managed(body["metadata"]):
        return
    if pausing.moving(body["metadata"]):
        return
    meta = body["metadata"]
    spec = kinds.HYBRID_CLUSTER.parse(body).spec
    cluster_name = cluster_owner(meta) or ownership.cluster_name(meta)
    if cluster_name is None:
        waiting = Update.false(ENDPOINT, "WaitingForCluster", "no CAPI Cluster owns this HybridCluster yet")
        await write_status(ctx, HYBRID_CLUSTERS, body, {}, [pausing.condition(False), waiting], STEPS)
        return
    ctx.wakeups.belongs_to(Key(HYBRID_CLUSTER, namespace, name), namespace, cluster_name)
    cluster = await ctx.kube.get(CLUSTERS, cluster_name, namespace)
    claim_name = names.endpoint_claim(name)
    claim = (
        await ctx.kube.get(CLAIMS, claim_name, namespace) if spec.control_plane_endpoint_pool_ref else None
    )
    paused = pausing.annotated(meta) or pausing.cluster_paused(cluster)
    if claim is not None and pausing.annotated(claim["metadata"]) != paused:
        value = "true" if paused else None
        await ctx.kube.patch(
            CLAIMS, claim_name, {"metadata": {"annotations": {pausing.PAUSED_ANNOTATION: value}}}, namespace
        )
    if paused:
        await write_status(ctx, HYBRID_CLUSTERS, body, {}, [pausing.condition(True)], None)
        return
    fields: dict[str, Any] = {"failureDomains": failure_domains(spec)}
    endpoint = await control_plane_endpoint(ctx, body, spec, claim, cluster_name)
    already = bool(((body.get("status") or {}).get("initialization") or {}).get("provisioned"))
    if already or endpoint.status == "True":
        fields["initialization"] = {"provisioned": True}
    await write_status(ctx, HYBRID_CLUSTERS, body, fields, [pausing.condition(False), endpoint], STEPS)


async def control_plane_endpoint(
    ctx: Context, body: Obj, spec: HybridClusterSpec, claim: Obj | None, cluster_name: str
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
            "spec": {"poolRef": pool.model_dump(by_alias=True), "clusterName": cluster_name},
        }
        claim, _ = await ctx.kube.create_or_get(CLAIMS, child, namespace)
    update = summaries.child_ready(ENDPOINT, "IPAddressClaim", claim, "Allocated")
    address_name = ((claim.get("status") or {}).get("addressRef") or {}).get("name")
    if update.status != "True" or not address_name:
        return update
    address = await ctx.kube.get(ADDRESSES, address_name, namespace)
    if address is None:
        return Update.unknown(ENDPOINT, "Pending", f"IPAddress {address_name} not found")
    host = summaries.allocation(address).address
    endpoint_patch = {"spec": {"controlPlaneEndpoint": {"host": host, "port": DEFAULT_API_PORT}}}
    await ctx.kube.patch(HYBRID_CLUSTERS, name, endpoint_patch, namespace)
    return Update.true(ENDPOINT, "Allocated", f"{host}:{DEFAULT_API_PORT} from {pool.kind} {pool.name}")


async def delete(ctx: Context, body: Obj) -> None:
    """Release the VIP claim (if any) and wait for it; nothing for a move."""
    meta = body["metadata"]
    if pausing.moving(meta) or externally_managed(meta):
        return
    namespace = meta["namespace"]
    claim_name = names.endpoint_claim(meta["name"])
    claim = await ctx.kube.get(CLAIMS, claim_name, namespace)
    if claim is None or not ownership.is_owned_by(claim, body):
        return
    if not claim["metadata"].get("deletionTimestamp"):
        await ctx.kube.delete(CLAIMS, claim_name, namespace)
    raise ChildrenRemaining(f"waiting for IPAddressClaim {claim_name} to be deleted")
