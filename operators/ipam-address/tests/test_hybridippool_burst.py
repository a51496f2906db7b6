"""No address is handed out twice: under a burst of concurrent claims, and across a crash in the middle.

The operator is killed with SIGKILL (no clean-up) while the burst is being served, then started again.
Every claim must end bound, every address distinct, one IPAddress per claim; deleting every claim
must leave no IPAddress behind.
"""

from __future__ import annotations

import pytest
from ipam_helpers import ADDRESSES, CLAIMS, addresses_in, bound_address, create_claims, create_pool, pool_ref

from capfleet.kube import Kube
from capfleet_e2e.fixtures import RunOperator
from capfleet_e2e.waiting import eventually

pytestmark = pytest.mark.integration

BURST = 80


async def test_burst_with_a_crash_in_the_middle_has_no_duplicate_and_no_leak(
    kube: Kube, namespace: str, run_operator: RunOperator
) -> None:
    await create_pool(kube, namespace, "burst", addresses=["10.7.0.0/25"], prefix=25)  # 126 usable
    operator = run_operator("ipam_address", namespaces=[namespace])
    names = [f"claim-{i:03d}" for i in range(BURST)]
    await create_claims(kube, namespace, names, pool_ref("burst"))

    async def some_bound() -> int | None:
        count = len(await addresses_in(kube, namespace))
        return count if count >= 5 else None

    bound_before_crash = await eventually("the first addresses of the burst", some_bound, interval=0.05)
    operator.kill()
    assert bound_before_crash < BURST, "the crash must happen in the middle of the burst"
    operator.start()

    bound = {name: await bound_address(kube, namespace, name, within=120) for name in names}
    assert len(set(bound.values())) == BURST, "an address was handed out twice"
    addresses = await addresses_in(kube, namespace)
    assert addresses == bound, "exactly one IPAddress per claim, holding the claim's address"

    for name in names:
        await kube.delete(CLAIMS, name, namespace)

    async def nothing_left() -> bool:
        return not await kube.list(ADDRESSES, namespace) and not await kube.list(CLAIMS, namespace)

    await eventually("every claim and IPAddress to be gone", nothing_left, within=120)
