"""A Batch answers many callers with few requests: with a gated stand-in for the outside system."""

from __future__ import annotations

import asyncio

import pytest

from capfleet.batching import Batch


class Gated:
    """Records the keys of each request; each request waits for the gate, so callers meanwhile queue up."""

    def __init__(self) -> None:
        self.requests: list[list[int]] = []
        self.gate = asyncio.Event()
        self.fail_next: Exception | None = None

    async def fetch(self, keys: list[int]) -> list[str]:
        self.requests.append(list(keys))
        await self.gate.wait()
        failure, self.fail_next = self.fail_next, None
        if failure is not None:
            raise failure
        return [f"value {key}" for key in keys]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_caller_alone_is_answered_by_a_request_of_its_own_at_once() -> None:
    source = Gated()
    source.gate.set()
    batch = Batch(source.fetch, capacity=10)
    assert await asyncio.wait_for(batch.get(7), 5.0) == "value 7"
    assert source.requests == [[7]]


async def test_callers_of_one_turn_share_a_request_and_callers_meanwhile_share_the_next() -> None:
    source = Gated()
    batch = Batch(source.fetch, capacity=10)
    first = [asyncio.create_task(batch.get(key)) for key in (1, 2, 3)]
    await settle()
    later = [asyncio.create_task(batch.get(key)) for key in (4, 5, 3)]
    await settle()
    assert source.requests == [[1, 2, 3]], "one request in flight; the later keys wait for it"
    source.gate.set()
    answers = await asyncio.wait_for(asyncio.gather(*first, *later), 5.0)
    assert answers == ["value 1", "value 2", "value 3", "value 4", "value 5", "value 3"]
    assert source.requests == [[1, 2, 3], [4, 5, 3]]


async def test_a_request_carries_at_most_its_capacity_by_weight_and_at_least_one_key() -> None:
    source = Gated()
    source.gate.set()
    batch = Batch(source.fetch, capacity=10, weight=lambda key: key)
    answers = await asyncio.gather(*(batch.get(key) for key in (4, 5, 2, 30, 1)))
    assert answers == [f"value {key}" for key in (4, 5, 2, 30, 1)]
    assert source.requests == [[4, 5], [2], [30], [1]]


async def test_a_failed_request_fails_the_callers_it_carried_and_no_other() -> None:
    source = Gated()
    batch = Batch(source.fetch, capacity=10)
    carried = [asyncio.create_task(batch.get(key)) for key in (1, 2)]
    await settle()
    later = asyncio.create_task(batch.get(3))
    await settle()
    source.fail_next = ConnectionError("refused")
    source.gate.set()
    for caller in carried:
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(caller, 5.0)
    assert await asyncio.wait_for(later, 5.0) == "value 3"


async def test_a_caller_cancelled_while_it_waits_leaves_the_others_answered() -> None:
    source = Gated()
    batch = Batch(source.fetch, capacity=10)
    leaving, staying = asyncio.create_task(batch.get(1)), asyncio.create_task(batch.get(2))
    await settle()
    leaving.cancel()
    await settle()
    source.gate.set()
    assert await asyncio.wait_for(staying, 5.0) == "value 2"
    assert leaving.cancelled()
    assert source.requests == [[1, 2]], "the request it was part of went on for the other"


async def test_callers_after_a_quiet_spell_start_a_new_request() -> None:
    source = Gated()
    source.gate.set()
    batch = Batch(source.fetch, capacity=10)
    assert await batch.get(1) == "value 1"
    await settle()
    assert await batch.get(2) == "value 2"
    assert source.requests == [[1], [2]]


async def test_an_answer_of_the_wrong_length_fails_its_callers_rather_than_misanswering_them() -> None:
    async def short(keys: list[int]) -> list[str]:
        return ["only one"]

    batch = Batch(short, capacity=10)
    results = await asyncio.gather(batch.get(1), batch.get(2), return_exceptions=True)
    assert all(isinstance(result, RuntimeError) for result in results)
