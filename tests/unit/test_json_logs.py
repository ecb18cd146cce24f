"""`TICKETIQ_LOG_FORMAT=json` (issue 36, part 2), with no process: what one line of JSON holds, that a record
is one line whatever its message or traceback holds, that no secret reaches it, and that a run in context is
the run of the task that drives it, never of its neighbour's."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from tests.support.log_capture import configured_logging
from ticketiq.errors import ConfigError
from ticketiq.runtime import logs
from ticketiq.runtime.logs import JsonLines
from ticketiq.settings import Settings

SECRET = "Zx9-seal-secret-Zx9"
TOKEN = "tiq_Zx9-bearer-token-Zx9"
TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7


@pytest.fixture(autouse=True)
def named_process(monkeypatch: pytest.MonkeyPatch) -> str:
    """This test's process identity, the module's own restored after it."""
    monkeypatch.setattr(logs, "_process", None)
    logs.name_process("host:4242:0123456789ab")
    return "host:4242:0123456789ab"


def record(message: str, *args: Any, exc: bool = False, stack: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError(f"cannot reach postgresql://u:{SECRET}@db/t\n  second line")
        except RuntimeError:
            exc_info = sys.exc_info()
    made = logging.LogRecord("ticketiq.engine.engine", logging.WARNING, __file__, 7, message, args, exc_info)
    if stack:
        made.stack_info = f"Stack (most recent call last):\n  a frame holding {TOKEN}"
    return made


def line(made: logging.LogRecord) -> dict[str, Any]:
    """The record written, in a fresh context (nothing of another test's run in it): one line, one object."""
    written = contextvars.Context().run(JsonLines([SECRET, TOKEN]).format, made)
    assert "\n" not in written, written
    parsed: dict[str, Any] = json.loads(written)
    return parsed


def in_run_and_span(made: logging.LogRecord) -> dict[str, Any]:
    def write() -> str:
        logs.driving("run-1", 3, "host:4242:0123456789ab")
        span = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=TraceFlags(1)))
        with trace.use_span(span):
            return JsonLines([SECRET]).format(made)

    written = contextvars.Context().run(write)
    parsed: dict[str, Any] = json.loads(written)
    return parsed


def test_a_record_outside_any_run_names_its_process_and_no_run_nor_trace(named_process: str) -> None:
    got = line(record("process %s ready", "p1"))
    assert got == {"time": got["time"], "level": "WARNING", "logger": "ticketiq.engine.engine",
                   "message": "process p1 ready", "process": named_process}  # fmt: skip
    when = datetime.fromisoformat(got["time"])
    assert got["time"].endswith("Z") and when.utcoffset() == UTC.utcoffset(None)
    assert abs((datetime.now(UTC) - when).total_seconds()) < 3600  # the record's own time, not some other


def test_a_record_inside_a_run_and_a_span_names_the_run_the_attempt_and_the_trace() -> None:
    got = in_run_and_span(record("step %d", 2))
    assert got["run_id"] == "run-1" and got["attempt"] == 3 and got["process"] == "host:4242:0123456789ab"
    assert got["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" and got["span_id"] == "00f067aa0ba902b7"
    assert got["message"] == "step 2"


def test_an_invalid_span_names_no_trace() -> None:
    def write() -> str:
        with trace.use_span(trace.INVALID_SPAN):
            return JsonLines([]).format(record("nothing traced"))

    got = json.loads(contextvars.Context().run(write))
    assert "trace_id" not in got and "span_id" not in got


def test_a_record_is_one_line_whatever_its_message_and_traceback_hold_and_no_secret_is_in_it() -> None:
    made = record("first line\nsecond with %s\r\nthird with %s", SECRET, TOKEN, exc=True, stack=True)
    written = contextvars.Context().run(JsonLines([SECRET, TOKEN]).format, made)
    assert len(written.splitlines()) == 1
    assert SECRET not in written and TOKEN not in written
    got = json.loads(written)
    assert got["message"] == "first line\nsecond with ***\r\nthird with ***"
    assert got["exception"].startswith("Traceback (most recent call last):")
    assert "RuntimeError: cannot reach postgresql://u:***@db/t\n  second line" in got["exception"]
    assert got["stack"].endswith("a frame holding ***")


def test_a_message_no_json_encoder_of_ours_takes_is_still_one_line() -> None:
    got = line(record("a lone surrogate \udc80 in a path"))
    assert got["message"] == "a lone surrogate \udc80 in a path"


async def test_a_run_in_context_is_that_of_the_task_driving_it_and_of_the_tasks_it_starts() -> None:
    formatter = JsonLines([])
    seen: dict[str, dict[str, Any]] = {}
    named = asyncio.Event()

    async def drive() -> None:
        logs.driving("run-7", 1, "host:1:a")
        named.set()
        seen["driver"] = json.loads(formatter.format(record("driving")))

        async def call() -> None:
            seen["call"] = json.loads(formatter.format(record("a call of the step")))

        await asyncio.create_task(call())

    async def neighbour() -> None:
        await named.wait()
        seen["neighbour"] = json.loads(formatter.format(record("another request")))

    await asyncio.gather(drive(), neighbour())
    assert seen["driver"]["run_id"] == seen["call"]["run_id"] == "run-7"
    assert seen["call"]["attempt"] == 1 and seen["call"]["process"] == "host:1:a"
    assert "run_id" not in seen["neighbour"] and "attempt" not in seen["neighbour"]
    assert logs.run_in_context() is None


def test_the_log_format_is_text_unless_json_is_asked_for() -> None:
    assert Settings().log_format == "text"
    assert Settings.from_env({"TICKETIQ_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="TICKETIQ_LOG_FORMAT='xml' is not one of text, json"):
        Settings.from_env({"TICKETIQ_LOG_FORMAT": "xml"})


def test_each_seal_key_s_secret_is_a_secret_on_its_own() -> None:
    settings = Settings(seal_keys=f"new:{SECRET},old:{SECRET}-old,short:abc")
    assert {SECRET, f"{SECRET}-old"} <= set(settings.secrets())
    assert "abc" not in settings.secrets()  # too short to mask wherever the word stands


def test_text_stays_the_default_line_and_leaves_python_s_own_hooks_alone(tmp_path: Path) -> None:
    hook = sys.excepthook
    with configured_logging(Settings(home=tmp_path, seal_keys=f"k:{SECRET}")) as written:
        logging.getLogger("ticketiq.engine.engine").warning("plain words\nand %s", SECRET)
        assert sys.excepthook is hook
    line = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING ticketiq.engine.engine: plain words\nand \*\*\*\n"
    assert re.fullmatch(line, written.getvalue()), written.getvalue()


def test_json_lines_keep_a_seal_key_generated_into_the_home_out(tmp_path: Path) -> None:
    """TICKETIQ_SEAL_KEYS unset: the key a process generated into its home is a secret all the same, in the
    message and in an exception's text (which the text format does not scrub)."""
    generated = "f" * 64
    (tmp_path / "seal.key").write_text(f"kgen:{generated}")
    with configured_logging(Settings(home=tmp_path, log_format="json")) as written:
        log = logging.getLogger("ticketiq.engine.seal")
        try:
            raise ValueError(f"bad key {generated}")
        except ValueError:
            log.exception("sealing with %s failed", generated)
    assert generated not in written.getvalue()
    got = json.loads(written.getvalue())
    assert got["message"] == "sealing with *** failed" and got["exception"].endswith("ValueError: bad key ***")
