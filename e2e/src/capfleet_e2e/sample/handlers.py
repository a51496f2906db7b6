"""The sample operator's handlers: thin kopf decorators over `reconciling`."""

from typing import Any

import kopf

from capfleet import reconciling as kit
from capfleet import runtime
from capfleet.resources import Resource
from capfleet_e2e.sample import reconciling

IDENTITY = runtime.Identity("sample")
SAMPLES = Resource("sample.capfleet.dev", "v1alpha1", "samples", "Sample")
runtime.count_phases(SAMPLES)


@kopf.on.resume("sample.capfleet.dev", "samples")
@kopf.on.create("sample.capfleet.dev", "samples")
@kopf.on.update("sample.capfleet.dev", "samples")
@runtime.reconciler("Sample")
async def reconcile_sample(
    body: kopf.Body,
    spec: kopf.Spec,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    kube, _events = kit.Context.parts(memo)
    await reconciling.reconcile(kube, body, spec, meta, status, patch)


@kopf.on.delete("sample.capfleet.dev", "samples", labels={reconciling.RELEASE_WRITES_LABEL: kopf.PRESENT})
@runtime.reconciler("Sample")
@runtime.releases_at_once(IDENTITY)
async def release_sample(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    kube, _events = kit.Context.parts(memo)
    await reconciling.release(kube, SAMPLES, body)
