"""A run held against the retention policy (issue 34): `POST` and `DELETE /v1/runs/{id}/hold`, operator and
above, audited with the reason; the run and the run list show `held`, and the list filters on it."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.integration.test_api import api, until
from tests.support.engine import read_rows
from tests.support.http import TLS


async def test_an_operator_holds_and_releases_a_run_audited_and_the_list_filters_on_it(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        kept = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-31"})).json()["id"]
        other = (await client.post("/v1/runs", json={"agent": "a", "input": "check OPS-32"})).json()["id"]
        await until(client, kept, "succeeded")
        await until(client, other, "succeeded")
        assert (await client.get(f"/v1/runs/{kept}")).json()["held"] is False

        held = await client.post(f"/v1/runs/{kept}/hold", json={"reason": "legal hold 2026-14"})
        assert held.status_code == 200, held.text
        assert held.json()["held"] is True and held.json()["held_by"] == "ops"
        run = (await client.get(f"/v1/runs/{kept}")).json()
        assert run["held"] is True and run["hold"]["by"] == "ops" and run["hold"]["reason"] == "legal hold 2026-14"
        listed = {r["id"]: r["held"] for r in (await client.get("/v1/runs")).json()["runs"]}
        assert listed == {kept: True, other: False}
        assert [r["id"] for r in (await client.get("/v1/runs", params={"held": "true"})).json()["runs"]] == [kept]
        assert [r["id"] for r in (await client.get("/v1/runs", params={"held": "false"})).json()["runs"]] == [other]
        refused = await client.get("/v1/runs", params={"held": "yes"})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["query", "held"]

        released = await client.request("DELETE", f"/v1/runs/{kept}/hold", json={"reason": "case closed"})
        assert released.json() == {"id": kept, "held": False, "was_held": True}
        assert (await client.get(f"/v1/runs/{kept}")).json()["held"] is False
        again = await client.request("DELETE", f"/v1/runs/{kept}/hold")
        assert again.json()["was_held"] is False  # nothing to release: not audited twice

        missing = await client.post("/v1/runs/00000000-0000-0000-0000-000000000000/hold")
        assert missing.status_code == 404 and missing.json()["detail"][0]["loc"] == ["path", "run_id"]
        too_long = await client.post(f"/v1/runs/{kept}/hold", json={"reason": "x" * 2001})
        assert too_long.status_code == 422 and too_long.json()["detail"][0]["loc"][-1] == "reason"

        # A caller may read its runs but not hold them.
        caller = await h.token("cal", "caller")
        async with httpx.AsyncClient(verify=TLS, base_url=str(client.base_url), timeout=30,
                                     headers={"Authorization": f"Bearer {caller}"}) as as_caller:  # fmt: skip
            assert (await as_caller.post(f"/v1/runs/{kept}/hold")).status_code == 403
    audit = await read_rows(db_url, "SELECT action, actor, detail FROM audit_log WHERE run_id = %s AND action IN "
                                    "('agent.run.held', 'agent.run.released') ORDER BY id", kept)  # fmt: skip
    assert [(a["action"], a["actor"]) for a in audit] == [("agent.run.held", "ops"), ("agent.run.released", "ops")]
    assert audit[0]["detail"] == {"reason": "legal hold 2026-14"}
    assert audit[1]["detail"]["reason"] == "case closed" and audit[1]["detail"]["hold_reason"] == "legal hold 2026-14"
