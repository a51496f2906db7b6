"""The work queue: one reconcile per key however many events, none lost during a reconcile, due times kept."""

from __future__ import annotations

import asyncio

from capfleet.controller.queues import Schedule, WorkQueue


def drain(schedule: Schedule[str]) -> list[str]:
    taken = []
    while (key := schedule.take()) is not None:
        taken.append(key)
    return taken


def test_a_burst_of_adds_is_one_key_in_first_added_order() -> None:
    schedule: Schedule[str] = Schedule()
    for key in ["a", "b", "a", "c", "b", "a"]:
        schedule.add(key)
    assert len(schedule) == 3
    assert drain(schedule) == ["a", "b", "c"]
    assert schedule.take() is None


def test_an_add_during_the_reconcile_queues_the_key_again_when_it_is_done() -> None:
    schedule: Schedule[str] = Schedule()
    schedule.add("a")
    assert schedule.take() == "a"
    schedule.add("a")
    schedule.add("a")
    assert schedule.take() is None, "never handed out twice at once"
    schedule.done("a")
    assert drain(schedule) == ["a"]
    schedule.done("a")
    assert drain(schedule) == [], "done without an add meanwhile queues nothing"


def test_a_later_key_comes_out_when_due_and_the_earliest_due_time_wins() -> None:
    schedule: Schedule[str] = Schedule()
    schedule.add_at("a", 10.0)
    schedule.add_at("a", 5.0)
    schedule.add_at("a", 20.0)
    schedule.add_at("b", 7.0)
    assert schedule.promote(4.0) == 5.0
    assert drain(schedule) == []
    assert schedule.promote(5.0) == 7.0
    assert drain(schedule) == ["a"]
    schedule.done("a")
    assert schedule.promote(100.0) is None
    assert drain(schedule) == ["b"], "a's superseded due times (10, 20) are gone"


def test_an_add_now_wins_over_a_due_time_and_a_ready_key_takes_no_due_time() -> None:
    schedule: Schedule[str] = Schedule()
    schedule.add_at("a", 5.0)
    schedule.add("a")
    assert drain(schedule) == ["a"]
    schedule.done("a")
    assert schedule.promote(10.0) is None
    assert drain(schedule) == [], "the due time was replaced by the add"
    schedule.add("b")
    schedule.add_at("b", 1.0)
    assert schedule.promote(2.0) is None
    assert drain(schedule) == ["b"]


def test_a_due_time_reached_while_the_key_is_reconciled_waits_for_done() -> None:
    schedule: Schedule[str] = Schedule()
    schedule.add("a")
    assert schedule.take() == "a"
    schedule.add_at("a", 1.0)
    schedule.promote(2.0)
    assert schedule.take() is None
    schedule.done("a")
    assert drain(schedule) == ["a"]


def test_forget_drops_a_due_time() -> None:
    schedule: Schedule[str] = Schedule()
    schedule.add_at("a", 1.0)
    schedule.forget("a")
    assert len(schedule) == 0
    assert schedule.promote(2.0) is None
    assert drain(schedule) == []


async def test_the_queue_hands_a_key_to_one_worker_and_wakes_at_due_times() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("later", 0.05)
    queue.add("now")
    queue.add("now")
    assert await queue.get() == "now"
    second = asyncio.ensure_future(queue.get())
    queue.add("now")  # being reconciled: not handed out again before done
    assert await asyncio.wait_for(second, 5) == "later"
    queue.done("now")
    assert await asyncio.wait_for(queue.get(), 5) == "now"


async def test_closing_the_queue_ends_every_waiting_get() -> None:
    queue: WorkQueue[str] = WorkQueue()
    waiting = [asyncio.ensure_future(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    queue.close()
    assert await asyncio.wait_for(asyncio.gather(*waiting), 5) == [None, None, None]
