"""The evidence page shows what it was given: each mode's figures and verdict, a failed mode marked as
failed, a mode that did not run said so, the histograms linked, the benches, the machine and every
command that reproduces a figure."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from evidence_page import Verdict, judge, kill_mode, mode_verdict, render, results_stem


def kill_trials(mode: str, rounds: int, **changes: Any) -> dict[str, Any]:
    command = (
        f"LIYAGENT_KILL_TRIALS={rounds} LIYAGENT_KILL_MODE={mode} "
        ".venv/bin/python -m pytest tests/unit/test_kill_trials.py -q"
    )
    result: dict[str, Any] = {
        "mode": mode,
        "seed": 123,
        "rounds": rounds,
        "trials": rounds * 3,
        "in_flight": rounds * 2,
        "rounds_in_flight": rounds - 1,
        "lost": 0,
        "duplicates": 0,
        "recovery_s": [1.25, 2.5, 11.75],
        "recovery": {"p50": 1.37, "p95": 4.81, "p99": 9.63, "max": 11.75},
        "started_at": "2025-12-03T08:00:00Z",
        "elapsed_s": 1234.5,
        "passed": True,
        "command": command,
        "histogram": f"results/kill-trials-{mode}.png",
        "by_kind": {
            "cron": {"trials": 200, "in_flight": 137, "lost": 0, "duplicates": 0},
            "teams": {"trials": 200, "in_flight": 131, "lost": 0, "duplicates": 0},
        },
        "failures": [],
        "extra": {},
    }
    result.update(changes)
    return {
        "command": command,
        "exit_code": 1 if result["failures"] else 0,
        "output_tail": ["FAILED tests/unit/test_kill_trials.py::test_kill_trials - AssertionError: OPS-7 doubled"]
        if result["failures"]
        else [],
        "image": f"evidence/kill-trials-{mode}.png",
        "result": result,
    }


def evidence() -> dict[str, Any]:
    return {
        "measured_at": "2025-12-03T08:00:00Z",
        "commit": {"sha": "22bbb70c0ffee", "dirty": True},
        "machine": {
            "cpu": "AMD EPYC 7B13",
            "cores": 8,
            "memory_kib": 32 * 1024 * 1024,
            "os": "Linux-6.1-x86_64",
            "python": "3.11.9",
            "postgres": "PostgreSQL 18.1 on x86_64-pc-linux-gnu",
            "database_url_postgres": None,
            "haproxy": "HAProxy version 2.8.5",
        },
        "modes": {
            "kill": kill_trials("kill", 200, extra={"writes_in_doubt": 17}),
            "stop": kill_trials(
                "stop",
                50,
                duplicates=2,
                passed=False,
                failures=["OPS-7: the Jira comment was applied twice"],
                extra={"vendor_calls_after_resume": 3, "db_writes_after_resume": 0},
            ),
            "db": kill_trials("db", 20, extra={"restarts": 20, "reconnected": True}),
            # vendor: not run, no entry at all
        },
        "benches": {
            "step_overhead": {
                "command": ".venv/bin/python bench/step_overhead.py --json results/step_overhead.json",
                "exit_code": 0,
                "result": {
                    "step_overhead": {
                        "update": {"state_bytes": 5120, "back_to_back_ms": 0.211, "paced_ms": 0.342},
                        "step": {"reads": {"overhead_median_ms": 0.398, "ratio_to_update": 1.16}},
                        "ratio": 1.16,
                        "target_ratio": 1.5,
                        "met": True,
                    },
                    "concurrent": {"runs": 1000, "succeeded": 1000, "renewals_per_interval": 1.02, "peak_rss_mib": 412},
                },
            },
            "recovery": {
                "command": ".venv/bin/python bench/recovery.py --json results/recovery.json",
                "exit_code": 0,
                "result": {
                    "kinds": {
                        "kill": {
                            "label": "SIGKILL recovery",
                            "samples": [0.8, 1.1],
                            "trials": 2,
                            "p50": 0.95,
                            "max": 1.1,
                        }
                    }
                },
            },
            "scale": {
                "command": ".venv/bin/python bench/scale.py --json results/scale.json",
                "exit_code": 0,
                "result": {
                    "throughput": [{"processes": 4, "runs_per_s": 812.5, "cpu": {"postgres_s": 61.2}}],
                    "sweep": [
                        {"finished_runs": 0, "statements": {"claim_lapsed": 0.42}},
                        {"finished_runs": 1000000, "statements": {"claim_lapsed": 0.57}},
                    ],
                    "spread": {"killed_runs": 90, "taken": {"app2": 46, "app3": 44}},
                },
            },
        },
    }


def section(page: str, heading: str) -> str:
    """The text under a heading, up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = page.index(heading + "\n")
    rest = page[start + len(heading) + 1 :]
    ends = [i for i in (rest.find("\n" + "#" * n + " ") for n in range(1, len(level) + 1)) if i >= 0]
    return rest[: min(ends)] if ends else rest


def test_the_page_says_it_is_generated_and_not_to_be_edited() -> None:
    first = render(evidence()).splitlines()[0]
    assert "make evidence" in first
    assert "Do not edit" in first


def test_each_mode_shows_the_figures_it_was_given() -> None:
    kill = section(render(evidence()), "### Mode `kill`: passed")
    assert "| runs lost | 0 | 0 | met |" in kill
    assert "| slowest recovery | 11.75 s | <= 15 s | met |" in kill
    assert "| runs caught in flight | 400 of 600 (67%) | >= 50% | met |" in kill
    assert "- seed: 123" in kill
    assert "| cron | 200 | 137 | 0 | 0 |" in kill
    assert "- writes_in_doubt: 17" in kill
    summary = render(evidence())
    assert "| `kill` | **passed** | 200 | 600 | 400 | 0 | 0 | 1.37 s | 4.81 s | 9.63 s | 11.75 s |" in summary


def test_a_failed_mode_is_marked_failed_with_what_failed() -> None:
    page = render(evidence())
    assert "| `stop` | **FAILED** | 50 | 150 | 100 | 0 | 2 |" in page
    stop = section(page, "### Mode `stop`: FAILED")
    assert "| writes doubled | 2 | 0 | **NOT met** |" in stop
    assert "| pytest exit status | 1 | 0 | **NOT met** |" in stop
    assert "OPS-7: the Jira comment was applied twice" in stop
    assert "AssertionError: OPS-7 doubled" in stop
    assert "- vendor_calls_after_resume: 3" in stop
    assert "kill trials, mode stop" in judge(evidence()).failed


def test_a_mode_past_the_recovery_limit_or_mostly_idle_fails() -> None:
    slow = kill_trials("kill", 200, recovery={"p50": 1.0, "p95": 2.0, "p99": 3.0, "max": 15.01})
    idle = kill_trials("kill", 200, in_flight=299)
    assert mode_verdict(slow) is Verdict.FAILED
    assert mode_verdict(idle) is Verdict.FAILED
    assert mode_verdict(kill_trials("kill", 200, in_flight=300)) is Verdict.PASSED


def test_a_mode_with_no_recoveries_shows_none_not_zero() -> None:
    idle = kill_trials("kill", 1, in_flight=0, recovery_s=[], recovery={"p50": 0, "p95": 0, "p99": 0, "max": 0})
    given = evidence()
    given["modes"]["kill"] = idle
    page = render(given)
    assert "| slowest recovery | - | <= 15 s | **NOT met** |" in page
    assert "| `kill` | **FAILED** | 1 | 3 | 0 | 0 | 0 | - | - | - | - |" in page


def test_the_seeded_command_of_the_test_is_given_to_repeat_its_timings() -> None:
    given = evidence()
    given["modes"]["kill"]["result"]["command"] = "LIYAGENT_KILL_TRIALS=200 LIYAGENT_KILL_SEED=123 .venv/bin/python ..."
    kill = section(render(given), "### Mode `kill`: passed")
    assert "Repeat these very timings: `LIYAGENT_KILL_TRIALS=200 LIYAGENT_KILL_SEED=123 .venv/bin/python ...`" in kill
    assert f"Reproduce: `{given['modes']['kill']['command']}`" in kill


def test_a_missing_mode_is_said_not_run() -> None:
    page = render(evidence())
    assert "Mode `vendor` was not run" in section(page, "### Mode `vendor`: not run")
    assert "| `vendor` | **not run** |" in page
    assert judge(evidence()).not_run == [
        "kill trials, mode dbrestart", "kill trials, mode vendor", "kill trials, mode jobs",
        "kill trials, mode failover", "kill trials, mode stall", "kill trials, mode roll",
    ]  # fmt: skip


def test_the_jobs_entry_is_mode_kill_with_every_trial_kind() -> None:
    assert kill_mode("jobs") == ("kill", "cron,teams,webhook,mcp,sync,workflow")
    assert kill_mode("stop") == ("stop", None)
    assert results_stem("jobs") == "kill-trials-kill-cron-teams-webhook-mcp-sync-workflow"
    assert results_stem("db") == "kill-trials-db"
    given = evidence()
    given["modes"]["jobs"] = {"command": "x", "exit_code": 0, "result": {
        "rounds": 2, "trials": 10, "in_flight": 8, "lost": 0, "duplicates": 0, "recovery_s": [1.0, 2.0], "passed": True,
        "by_kind": {"sync": {"trials": 2, "in_flight": 2, "lost": 0, "duplicates": 0}},
    }}  # fmt: skip
    jobs = section(render(given), "### Mode `jobs`: passed")
    assert "`LIYAGENT_KILL_MIX=cron,teams,webhook,mcp,sync,workflow`" in jobs
    assert "| sync | 2 | 2 | 0 | 0 |" in jobs


def test_the_by_kind_table_shows_the_mcp_write_with_its_recovery() -> None:
    given = evidence()
    by_kind = {"cron": {"trials": 20, "in_flight": 12, "lost": 0, "duplicates": 0},
               "mcp": {"trials": 20, "in_flight": 11, "lost": 0, "duplicates": 0}}  # fmt: skip
    recovery = {"cron": {"p50": 1.9, "p95": 2.4, "p99": 2.5, "max": 2.5},
                "mcp": {"p50": 1.75, "p95": 2.25, "p99": 3.0, "max": 3.0}}  # fmt: skip
    given["modes"]["kill"] = kill_trials("kill", 20, by_kind=by_kind, recovery_by_kind=recovery)
    kill = section(render(given), "### Mode `kill`: passed")
    assert "| kind | trials | in_flight | lost | duplicates | recovery p50 | recovery p95 | recovery max |" in kill
    assert "| mcp | 20 | 11 | 0 | 0 | 1.75 s | 2.25 s | 3.00 s |" in kill
    # A result written before recovery was kept by kind: the counts alone.
    given["modes"]["kill"] = kill_trials("kill", 20, by_kind=by_kind)
    assert "| mcp | 20 | 11 | 0 | 0 |\n" in section(render(given), "### Mode `kill`: passed")


def test_the_roll_mode_fails_on_a_client_request_the_edge_did_not_serve() -> None:
    given = evidence()
    given["modes"]["roll"] = kill_trials("roll", 50, extra={"client_requests_failed": 0, "client_requests": 4210})
    roll = section(render(given), "### Mode `roll`: passed")
    assert "| client requests through the edge not served | 0 | 0 | met |" in roll
    assert "`ticketiq cluster roll`" in roll  # what the mode does, first
    given["modes"]["roll"] = kill_trials("roll", 50, extra={"client_requests_failed": 2, "client_requests": 4210})
    roll = section(render(given), "### Mode `roll`: FAILED")
    assert "| client requests through the edge not served | 2 | 0 | **NOT met** |" in roll
    assert "kill trials, mode roll" in judge(given).failed
    # The other modes have no client of their own: no such target.
    assert "client requests" not in section(render(given), "### Mode `kill`: passed")


def test_the_dbrestart_mode_says_what_it_does() -> None:
    given = evidence()
    given["modes"]["dbrestart"] = kill_trials("dbrestart", 50, extra={"way_by_round": "kill, stop+url"})
    dbrestart = section(render(given), "### Mode `dbrestart`: passed")
    assert "`ticketiq db stop`" in dbrestart and "`ticketiq db url`" in dbrestart
    assert "- way_by_round: kill, stop+url" in dbrestart
    assert "| `dbrestart` | **passed** | 50 |" in render(given)


def test_a_mode_whose_test_wrote_nothing_failed() -> None:
    given = evidence()
    given["modes"]["vendor"] = {"command": "LIYAGENT_KILL_MODE=vendor ...", "exit_code": 4, "output_tail": ["no tests"]}
    page = render(given)
    assert "The test wrote no results (pytest exit status 4)" in section(page, "### Mode `vendor`: FAILED")
    assert "kill trials, mode vendor" in judge(given).failed


def test_a_mode_pytest_skipped_is_said_not_run_with_why() -> None:
    given = evidence()
    skipped = ["1 skipped in 0.51s (db mode restarts the suite's embedded Postgres)"]
    given["modes"]["db"] = {"command": "LIYAGENT_KILL_MODE=db ...", "exit_code": 0, "output_tail": skipped}
    page = render(given)
    assert skipped[0] in section(page, "### Mode `db`: not run")
    assert "kill trials, mode db" in judge(given).not_run


def test_figures_from_another_commit_are_said_so() -> None:
    given = evidence()
    given["modes"]["kill"]["result"]["commit"] = "0ldc0mm1t"
    assert "- measured at another commit: `0ldc0mm1t`" in section(render(given), "### Mode `kill`: passed")
    assert "another commit" not in section(render(evidence()), "### Mode `kill`: passed")


def test_the_histograms_are_linked_relatively() -> None:
    page = render(evidence())
    for mode in ("kill", "stop", "db"):
        assert f"](evidence/kill-trials-{mode}.png)" in page
    assert "kill-trials-vendor.png" not in page


def test_the_benches_show_their_figures() -> None:
    page = render(evidence())
    step = section(page, "## Step overhead and concurrent runs")
    assert "| read-only step | 0.398 ms |" in step
    assert "1.16x, met" in step
    assert "| renewal statements per interval | 1.02 | 1 |" in step
    recovery = section(page, "## Recovery time with real processes")
    assert "| SIGKILL recovery | 2 of 2 | 0.95 s | - | - | 1.10 s |" in recovery
    scale = section(page, "## Scale: throughput, sweeps over a large history, spread of a kill")
    assert "| processes | runs | failed | runs/s |" in scale
    assert "| 4 | - | - | 812.50 |" in scale
    assert "| `claim_lapsed` | 0.420 ms | 0.570 ms |" in scale
    assert "1,000,000 finished runs" in scale
    assert "| app2 | 46 |" in scale


def test_a_bench_with_unknown_keys_shows_what_is_there() -> None:
    given = evidence()
    given["benches"]["scale"]["result"] = {"throughput": [{"processes": 2, "new_figure": 7}], "notes": "partial"}
    scale = section(render(given), "## Scale: throughput, sweeps over a large history, spread of a kill")
    assert "| processes | new_figure |" in scale
    assert "| 2 | 7 |" in scale
    assert "- notes: partial" in scale


def test_a_failed_bench_is_marked_failed() -> None:
    given = evidence()
    given["benches"]["recovery"] = {"command": "x", "exit_code": 1, "output_tail": ["Traceback: boom"]}
    page = render(given)
    assert "- bench `recovery`: **FAILED**" in page
    assert "Traceback: boom" in section(page, "## Recovery time with real processes")
    assert "bench recovery" in judge(given).failed


def test_the_machine_date_and_commit_are_named() -> None:
    page = render(evidence())
    assert "Measured 2025-12-03T08:00:00Z (UTC) at commit `22bbb70c0ffee` with uncommitted changes" in page
    machine = section(page, "## Machine")
    for figure in ("AMD EPYC 7B13", "| cores | 8 |", "32.0 GiB", "3.11.9", "PostgreSQL 18.1", "HAProxy version 2.8.5"):
        assert figure in machine


def test_every_command_is_named_in_reproduce() -> None:
    given = evidence()
    reproduce = section(render(given), "## Reproduce")
    assert "make evidence" in reproduce
    for mode in ("kill", "stop", "db"):
        assert given["modes"][mode]["command"] in reproduce
    for bench in given["benches"].values():
        assert bench["command"] in reproduce
