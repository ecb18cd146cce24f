"""The process's logging as `ticketiq` configures it (`cli.main.configure_logging`), written to a buffer the
test reads; the test's own logging put back after: handlers, levels, and the hooks JSON logs route through
the logging (warnings, uncaught exceptions)."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import warnings
from collections.abc import Iterator

from ticketiq.cli.main import configure_logging
from ticketiq.settings import Settings

CHATTY = ("httpx", "httpx2", "mcp")  # the loggers configure_logging quiets


@contextlib.contextmanager
def configured_logging(settings: Settings) -> Iterator[io.StringIO]:
    root = logging.getLogger()
    kept = (root.handlers[:], sys.excepthook, threading.excepthook, warnings.showwarning)
    levels = {name: logging.getLogger(name).level for name in ("", *CHATTY)}
    written = io.StringIO()
    try:
        configure_logging(settings)
        handler = root.handlers[0]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(written)
        yield written
    finally:
        logging.captureWarnings(False)
        root.handlers[:], sys.excepthook, threading.excepthook, warnings.showwarning = kept
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
