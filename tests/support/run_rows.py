"""A run as `RunStore.create` takes it, for storage tests that need runs to exist (the seal is text to the
store: nothing at this level verifies it)."""

from __future__ import annotations

import uuid
from typing import Any


def run_params(*, idempotency_key: str | None = None, delegation_key: str | None = None) -> dict[str, Any]:
    run_id = str(uuid.uuid4())
    return {
        "id": run_id, "agent": "a", "input": "check OPS-1", "owner": "owner", "tenant": "acme", "channel": "api",
        "may_wait": False, "correlation_id": run_id, "parent_run_id": None, "delegation_key": delegation_key,
        "idempotency_key": idempotency_key, "request_hash": "hash", "state": "{}", "seal": "seal", "key_id": "k",
        "actor": "caller", "created_by": "caller", "audit": {}, "state_format": 1, "seal_format": 2,
    }  # fmt: skip
