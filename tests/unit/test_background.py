"""Stopping a loop a process keeps beside its requests (runtime/background.py): a cancel the loop swallowed
does not leave the stop waiting forever (a process whose elector went back to its loop as it stopped never
exited), and the stopper's own cancel is never swallowed on its behalf."""

from __future__ import annotations

import asyncio

import pytest

from ticketiq.runtime.background import Background, cancelled


async def test_a_loop_that_swallowed_its_cancel_is_cancelled_again_until_it_ends() -> None:
    swallowed = 0

    async def loop() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if swallowed == 2:
                    raise
                swallowed += 1  # as a wait that turns a cancel into its own timeout and goes on would

    background = Background("swallows", loop)
    background.start()
    await asyncio.sleep(0)
    async with asyncio.timeout(10):
        await background.stop()
    assert swallowed == 2
    assert background.task is None


async def test_the_stoppers_own_cancel_goes_on_while_it_waits_for_the_task() -> None:
    ended = asyncio.Event()

    async def slow_to_end() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.5)  # its last moments after the cancel
            ended.set()

    task = asyncio.create_task(slow_to_end())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancelled(task))
    await asyncio.sleep(0.1)  # the stopper now waits for the task's end
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper  # not swallowed with the task's CancelledError
    await asyncio.wait({task})
    assert task.cancelled() and ended.is_set()


async def test_a_task_already_ended_is_left_as_it_is() -> None:
    async def done() -> int:
        return 7

    task = asyncio.create_task(done())
    await asyncio.wait({task})
    await cancelled(task)
    assert task.result() == 7


async def test_a_loop_that_failed_on_its_own_raises_its_error_at_the_stop() -> None:
    async def loop() -> None:
        raise RuntimeError("the loop broke")

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="the loop broke"):
        await cancelled(task)
