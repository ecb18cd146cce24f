"""Route again the calls the last checkpointed step left (I6, I9, I10).

Used whenever a run goes on from its checkpoint: after an approval was decided, and after a takeover.
Each call is decided by `settlement.route` from its row, the tool as registered now and its approval,
then carried out here. Calls made again pass every gate as it stands now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ticketiq.engine import notes
from ticketiq.engine.gates import GateFacts, Verdict
from ticketiq.engine.settlement import UNKNOWN_FOR_MODEL, CallRow, Route, ToolNow, route
from ticketiq.engine.state import PlannedCall
from ticketiq.engine.step_keys import approval_key
from ticketiq.tools.base import ToolClass

if TYPE_CHECKING:
    from ticketiq.engine.driver import RunDriver, StepWork, Todo


async def route_left_calls(driver: RunDriver, facts: GateFacts) -> StepWork:
    from ticketiq.engine.driver import StepWork

    state = driver.state
    assert state is not None
    rows = {
        int(r["idx"]): r
        for r in await driver.deps.db.fetch_all("calls.for_step", {"run_id": driver.run_id, "step": state.step})
    }
    approvals = {
        int(a["idx"]): a
        for a in await driver.deps.db.fetch_all("approvals.for_step", {"run_id": driver.run_id, "step": state.step})
    }
    work = StepWork()
    todo: list[Todo] = []
    settled: list[dict[str, Any]] = []
    for call in state.calls:
        row = rows.get(call.idx)
        approval = approvals.get(call.idx)
        call = _effective(driver, call, row)
        tool = driver.deps.registry.get(call.tool)
        call_row = (
            None
            if row is None
            else CallRow(
                status=row["status"],
                tool_class=ToolClass(row["class"]),
                sent_key=row["sent_key"],
                outcome=row["outcome"],
            )
        )
        tool_now = ToolNow(
            exists=tool is not None,
            has_reader=bool(tool and tool.reader),
            dedupe_window_s=tool.dedupe_window_s if tool else None,
        )
        decision = route(call_row, tool_now, approval["status"] if approval else None)
        settled.append({"tool": call.tool, "class": call.tool_class.value, "settled": decision.value})
        if decision is Route.REUSE:
            assert row is not None
            work.results[call.idx] = (row["outcome"] or {}).get("result")
        elif decision is Route.MAKE:
            todo.append((call, driver.decide(facts, call), None))
        elif decision is Route.APPROVAL_DECIDED:
            assert approval is not None
            if approval["status"] == "rejected":
                work.results[call.idx] = {
                    "refused": f"approval rejected by {approval['decided_by']}",
                    "gate": "approval",
                }
            else:
                todo.append((call, driver.decide(facts, call, approved=True), approval_key(str(approval["id"]))))
        else:
            assert row is not None
            work.results[call.idx] = await _settle_in_doubt(driver, facts, call, row, decision)
    driver.settled = settled
    work.merge(await driver.make_calls(todo))
    return work


def _effective(driver: RunDriver, call: PlannedCall, row: dict[str, Any] | None) -> PlannedCall:
    """I10: a call once marked (or planned) as changing stays so; one planned as a read whose tool now
    changes something is treated as the write it has become."""
    marked = ToolClass(row["class"]) if row else call.tool_class
    if marked.changes:
        return _with_class(call, marked)
    tool = driver.deps.registry.get(call.tool)
    if tool is not None and tool.tool_class.changes:
        return _with_class(call, tool.tool_class)
    return call


def _with_class(call: PlannedCall, cls: ToolClass) -> PlannedCall:
    if call.tool_class is cls:
        return call
    return PlannedCall(call.idx, call.id, call.tool, cls, call.args, call.step_key, call.args_error)


async def _settle_in_doubt(
    driver: RunDriver, facts: GateFacts, call: PlannedCall, row: dict[str, Any], decision: Route
) -> Any:
    """A call in doubt: it may or may not have reached its vendor. Never blindly sent again (I9)."""
    tool = driver.deps.registry.get(call.tool)
    key = row["sent_key"]
    gate = driver.decide(facts, call, approved=True)
    if decision is Route.RESEND_SAME_KEY and tool is not None:
        if gate.verdict is not Verdict.ALLOW:
            return await _unknown(driver, call, key, f"not sent again: {gate.reason}")
        # The vendor dedupes on the key for longer than a resume takes: resending applies it once.
        return await driver.send_write(call, tool, key, how=decision.value)
    if decision is Route.READ_BACK and tool is not None and tool.reader is not None:
        found = await tool.reader(driver.context(tool, call, key))
        if found.found is True and found.outcome is not None:
            result = notes.scrub(found.outcome.for_model(), driver.deps.settings.secrets())
            await driver.record(call, result, "settled", "read_back_found", key, True)
            return result
        if found.found is False and gate.verdict is Verdict.ALLOW:
            # Read back and not there: it never landed, so sending it now applies it once.
            return await driver.send_write(call, tool, key, how="read_back_absent_sent")
        return await _unknown(driver, call, key, "the vendor could not say whether it landed")
    if decision is Route.DELEGATION and tool is not None:
        if gate.verdict is not Verdict.ALLOW:
            return await _unknown(driver, call, key, f"not asked again: {gate.reason}")
        # Asking again by the same delegation key finds the child run, its answer or its lease.
        return await driver.send_write(call, tool, key, how=decision.value)
    return await _unknown(driver, call, key, None)


async def _unknown(driver: RunDriver, call: PlannedCall, key: str | None, why: str | None) -> Any:
    result = {"outcome": "unknown", "message": UNKNOWN_FOR_MODEL + (f" ({why})" if why else "")}
    await driver.record(call, result, "settled", Route.UNKNOWN.value, key, False)
    await driver.audit("agent.call.settled_unknown", {
        "tool": call.tool, "class": call.tool_class.value, "key": key,
        "step": driver.state.step if driver.state else None, "why": why,
    })  # fmt: skip
    return result
