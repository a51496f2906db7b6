"""The sample operator's handlers: thin kopf decorators over `reconciling`."""

from typing import Any

import kopf

from capfleet import reconciling as kit
from capfleet import runtime
from capfleet.resources import Resource
from capfleet_e2e.sample import reconciling

IDENTITY = runtime.Identity("sample")
runtime.count_phases(Resource("sample.capfleet.dev", "v1alpha1", "samples", "Sample"))


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
