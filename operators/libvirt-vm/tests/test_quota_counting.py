"""VMQuota counting and decisions: sums per VM, unset limits, every crossed limit named with its numbers,
several quotas at once, a limit lowered below what is used."""

from __future__ import annotations

from capfleet.api.libvirt import QuotaLimits, QuotaUsage
from libvirt_vm import quotas
from libvirt_vm.placing import Demand

SMALL = Demand(vcpus=2, memory_mib=1024, storage_gib=10)


def test_usage_sums_what_each_vm_asks_and_counts_the_vms() -> None:
    used = quotas.usage([SMALL, Demand(1, 512, 5, "cp")])
    assert used == QuotaUsage(vcpus=3, memory_mib=1536, storage_gib=15, vms=2)
    assert quotas.usage([]) == QuotaUsage()


def test_unset_limits_do_not_limit() -> None:
    assert quotas.refusal([("open", QuotaLimits())], QuotaUsage(vcpus=1000, vms=99), SMALL) is None


def test_a_vm_that_just_fits_passes_and_one_more_is_refused_with_the_numbers() -> None:
    hard = QuotaLimits(vcpus=4, memory_mib=4096)
    one = quotas.usage([SMALL])
    assert quotas.refusal([("team", hard)], one, SMALL) is None
    two = quotas.usage([SMALL, SMALL])
    refused = quotas.refusal([("team", hard)], two, SMALL)
    assert refused == "VMQuota team: vCPUs 4 used + 2 asked > 4 allowed"


def test_every_crossed_limit_of_every_quota_is_named_in_a_stable_order() -> None:
    limits = [("b-count", QuotaLimits(vms=1)), ("a-size", QuotaLimits(memory_mib=1500, storage_gib=15))]
    refused = quotas.refusal(limits, quotas.usage([SMALL]), SMALL)
    assert refused == (
        "VMQuota a-size: memory MiB 1024 used + 1024 asked > 1500 allowed; "
        "VMQuota a-size: disk GiB 10 used + 10 asked > 15 allowed; "
        "VMQuota b-count: VMs 1 used + 1 asked > 1 allowed"
    )


def test_a_limit_lowered_below_what_is_used_refuses_new_vms_only() -> None:
    used = quotas.usage([SMALL, SMALL, SMALL])
    lowered = QuotaLimits(vcpus=2)
    assert quotas.exceeded("team", lowered, used, SMALL) == [quotas.Exceeded("team", "vcpus", 2, 6, 2)]
    assert quotas.refusal([("team", QuotaLimits(vcpus=0))], QuotaUsage(), Demand(1, 64, 1)) is not None
