"""Small real job kinds for testing the job runtime before (and beside) the product's kinds: they count
to `to`, saving their state and progress at each step (fenced by the attempt, as every kind must).

- `count` is resumable: a resumed attempt goes on from the saved count.
- `count_once` is not: its process dying ends it `interrupted`.
- `count_internal` is internal: `POST /v1/jobs` refuses it.

A `gate` param names a `Gate` the first attempt stops at when its count reaches `hold_at`, until the
test releases it, so a test can act (kill, fence, cancel) at an exact point without timing anything.
`STEPS` records each step a job saved, as (attempt, count). `register` adds the kinds to
`ticketiq.jobs.kinds.KINDS` for one test; `serving_with_test_kinds` gives a `ticketiq serve` subprocess
them too (for SIGKILL tests), through a `sitecustomize` module only that subprocess's path holds.
"""

from __future__ import annotations

import asyncio
import os
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from ticketiq.jobs import kinds
from ticketiq.jobs.kinds import Job, JobFailed, JobKind, params_error


@dataclass
class Gate:
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)


GATES: dict[str, Gate] = {}
STEPS: dict[str, list[tuple[int, int]]] = {}


def gate(name: str) -> Gate:
    return GATES.setdefault(name, Gate())


def _whole(params: Mapping[str, Any], name: str, low: int, high: int, default: int | None = None) -> int | None:
    value = params.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise params_error(name, f"a whole number from {low} to {high}")
    return value


def check(params: Mapping[str, Any], engine: object) -> dict[str, Any]:
    unknown = set(params) - {"to", "step_ms", "gate", "hold_at", "fail_at"}
    if unknown:
        raise params_error(sorted(unknown)[0], "not a parameter of this kind")
    to = _whole(params, "to", 1, 100_000)
    if to is None:
        raise params_error("to", "required: how far to count")
    gate_name = params.get("gate")
    if gate_name is not None and not isinstance(gate_name, str):
        raise params_error("gate", "a name")
    return {
        "to": to,
        "step_ms": _whole(params, "step_ms", 0, 1000, 0),
        "gate": gate_name,
        "hold_at": _whole(params, "hold_at", 0, to),
        "fail_at": _whole(params, "fail_at", 0, to),
    }


async def count(job: Job) -> dict[str, Any]:
    to = int(job.params["to"])
    started = n = int(job.state.get("n", 0))
    while n < to:
        job.check()
        if job.params.get("gate") and n == job.params.get("hold_at") and job.attempt == 1:
            held = gate(job.params["gate"])
            if not held.released.is_set():
                held.reached.set()
                await held.released.wait()
        if n == job.params.get("fail_at"):
            raise JobFailed(f"told to fail at {n}")
        if job.params["step_ms"]:
            await asyncio.sleep(job.params["step_ms"] / 1000)
        await job.save({"n": n + 1}, done=n + 1, total=to)
        n += 1
        STEPS.setdefault(job.id, []).append((job.attempt, n))
    return {"counted": n, "resumed_from": started, "attempt": job.attempt}


COUNT = JobKind("count", True, "Counts to `to`, saving each step.", check, count, unit="steps")
COUNT_ONCE = replace(COUNT, name="count_once", resumable=False, description="count, not resumable")
COUNT_INTERNAL = replace(COUNT, name="count_internal", internal=True, description="count, made by its own route")
KIND = COUNT


def _modules() -> dict[str, types.ModuleType]:
    """A module per kind exposing KIND, as `kinds.kind` imports them, by module name."""
    modules = {}
    for made in (COUNT, COUNT_ONCE, COUNT_INTERNAL):
        module = types.ModuleType(f"tests.support.job_kinds_{made.name}")
        module.KIND = made  # type: ignore[attr-defined]
        modules[made.name] = module
    return modules


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """The three kinds, known to `ticketiq.jobs.kinds` for this test."""
    for name, module in _modules().items():
        monkeypatch.setitem(sys.modules, module.__name__, module)
        monkeypatch.setitem(kinds.KINDS, name, module.__name__)


def install() -> None:
    """The three kinds, known for the rest of this process's life: a test's subprocess only."""
    for name, module in _modules().items():
        sys.modules[module.__name__] = module
        kinds.KINDS[name] = module.__name__


def serving_with_test_kinds(folder: Path) -> dict[str, str]:
    """The environment for a `ticketiq serve` subprocess that knows the test kinds: a `sitecustomize`
    (run by Python at start) in `folder` that installs them, and the repository on the path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text("from tests.support import job_kinds\n\njob_kinds.install()\n")
    repository = Path(__file__).resolve().parents[2]
    # A PYTHONPATH already set (a checkout's src run without installing it) stays after them.
    inherited = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": ":".join(p for p in (str(folder), str(repository), inherited) if p)}
