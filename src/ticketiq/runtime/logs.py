"""What a log record says beyond its message, and how it is written: secrets scrubbed from every line, and
with `TICKETIQ_LOG_FORMAT=json` one JSON object a line for a log pipeline (Loki, Datadog, CloudWatch).

The run a record was made for is found, not passed: the engine names the run and attempt it drives in a
context variable (`driving`) for the task that drives it, so every record made inside, by our code or a
library's, carries `run_id` and `attempt`. The process's identity (`name_process`) rides on every record,
and the trace and span ids of the OpenTelemetry span current when the record was made, when there is one:
a line in the logs leads to the run's trace, and back.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import orjson

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MASK = "***"


@dataclass(frozen=True, slots=True)
class RunInContext:
    run_id: str
    attempt: int
    process: str  # the identity of the process that drives this attempt (I4)


_run: contextvars.ContextVar[RunInContext | None] = contextvars.ContextVar("ticketiq_run", default=None)
_process: str | None = None  # this process's identity once it has one; an identity per start (I4)


def driving(run_id: str, attempt: int, process: str) -> None:
    """Called first in the task that drives the attempt: the task's own context, and the tasks it starts,
    name the run; no other task's does."""
    _run.set(RunInContext(run_id, attempt, process))


def run_in_context() -> RunInContext | None:
    return _run.get()


def name_process(identity: str) -> None:
    """The process took this identity (at start, or coming back under a new one)."""
    global _process
    _process = identity


def scrubbed(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class SecretFilter(logging.Filter):
    """Secrets never reach a log line, whatever code formatted it."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            if any(s in message for s in self.secrets):
                record.msg, record.args = scrubbed(message, self.secrets), None
        return True


class JsonLines(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, message, process; run_id and attempt
    inside a run; trace_id and span_id inside a valid OpenTelemetry span; exception and stack when the
    record has them, scrubbed of the secrets as the message is (by SecretFilter). A newline in any of them
    is escaped, so a record never spans two lines."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]
        # Here, not at the module's import: the engine imports this module, and text logs need no tracing.
        from opentelemetry import trace

        self._current_span = trace.get_current_span

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": scrubbed(record.getMessage(), self.secrets),  # SecretFilter did already, on a handler
        }
        run = _run.get()
        line["process"] = run.process if run is not None else _process
        if run is not None:
            line["run_id"], line["attempt"] = run.run_id, run.attempt
        span = self._current_span().get_span_context()
        if span.is_valid:
            line["trace_id"], line["span_id"] = f"{span.trace_id:032x}", f"{span.span_id:016x}"
        if record.exc_info:
            line["exception"] = scrubbed(self.formatException(record.exc_info), self.secrets)
        if record.stack_info:
            line["stack"] = scrubbed(self.formatStack(record.stack_info), self.secrets)
        try:
            return orjson.dumps(line).decode()
        except TypeError:  # a lone surrogate in a message (orjson refuses it): the stdlib escapes it
            return json.dumps(line)


def _utc(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def route_uncaught(log: logging.Logger) -> None:
    """JSON logs stay JSON: warnings and exceptions nobody caught, which Python prints to stderr as plain
    text, go through the logging instead."""
    logging.captureWarnings(True)

    def uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        log.critical("uncaught exception", exc_info=(kind, exc, tb))

    def uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            log.critical("uncaught exception in thread %s", getattr(args.thread, "name", "?"),
                         exc_info=(args.exc_type, args.exc_value, args.exc_traceback))  # fmt: skip

    sys.excepthook = uncaught
    threading.excepthook = uncaught_in_thread
