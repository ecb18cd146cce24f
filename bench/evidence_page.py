"""The evidence page, rendered from what `make evidence` measured: a pure function of plain data.

`render(evidence)` takes the dict `bench/evidence.py` assembles and returns the markdown of
`docs/evidence.md`; `judge(evidence)` says which modes and benches failed or were not run, and the
generator's exit status follows it. Neither reads a file or the clock. The dict:

    {"measured_at": "2025-12-03T08:00:00Z", "commit": {"sha": "...", "dirty": false},
     "machine": {"cpu": "...", "cores": 8, "memory_kib": 32000000, "os": "...", "python": "3.11.9",
                 "postgres": "PostgreSQL 18.1 ...", "database_url_postgres": null, "haproxy": "..."},
     "modes": {"kill": {"command": "...", "exit_code": 0, "output_tail": [...], "image": "evidence/...png",
                        "result": {the test's results/kill-trials-kill.json} or None}, ...},
     "benches": {"step_overhead": {"command": "...", "exit_code": 0, "output_tail": [...], "result": {...}}, ...}}

`exit_code` is None when the generator did not run the command itself (`--render-only` without a
record of the run); a mode or bench with neither an exit code nor a result was not run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

MODES = ("kill", "stop", "db", "dbrestart", "vendor", "jobs", "failover", "stall", "roll")
# `jobs` is mode kill with every trial kind: the entry points, the MCP write and the background jobs (a
# source sync and a workflow run), each round's victim claiming the jobs it was given (LIYAGENT_KILL_MIX).
MIXES = {"jobs": ("kill", "cron,teams,webhook,mcp,sync,workflow")}
# What each mode does to the processes, as its section says first (tests/support/trial_rig.py has it whole).
DESCRIPTIONS = {
    "kill": "Each round's victim process is SIGKILLed while its runs go; the survivor takes them over.",
    "stop": "Each round's victim is SIGSTOPped past its lease (the survivor takes its runs over), then let go on: "
    "it must call no vendor and write nothing to the database.",
    "db": "The embedded Postgres's postmaster is SIGKILLed under the runs; an app process starts it again.",
    "dbrestart": "The embedded Postgres is taken away under the runs, each round at random either SIGKILLed "
    "(an app process starts it again) or stopped with `ticketiq db stop` and started with `ticketiq db url` "
    "(every process must leave it stopped until then); `way_by_round` says which.",
    "vendor": "Each round's victim is SIGKILLed while its Jira comment is held at the vendor.",
    "failover": "The primary node of a pg_auto_failover formation is SIGKILLed under the runs and jobs.",
    "stall": "The primary node of a pg_auto_failover formation is frozen (SIGSTOP) past its health checks.",
    "roll": "A real `ticketiq cluster --processes 2` is rolled (`ticketiq cluster roll`: both app processes "
    "replaced) while the runs go and a client keeps asking its edge; every client request must be served. "
    "Recovery here is the roll's start to a caught run's end.",
}


def kill_mode(name: str) -> tuple[str, str | None]:
    """The kill-trial mode an entry runs, and its mix of trial kinds (None: the test's default)."""
    return MIXES.get(name, (name, None))


def results_stem(name: str) -> str:
    """What the kill-trials test names its result files for the entry (`results/<stem>.json`, `.png`)."""
    mode, mix = kill_mode(name)
    return f"kill-trials-{mode}" + (f"-{mix.replace(',', '-')}" if mix else "")


BENCHES = ("step_overhead", "recovery", "scale")
RECOVERY_LIMIT_S = 15.0
IN_FLIGHT_SHARE = 0.5
UNKNOWN = "unknown"
BENCH_TITLES = {
    "step_overhead": "Step overhead and concurrent runs",
    "recovery": "Recovery time with real processes",
    "scale": "Scale: throughput, sweeps over a large history, spread of a kill",
}


class Verdict(Enum):
    PASSED = "passed"
    FAILED = "FAILED"
    NOT_RUN = "not run"


@dataclass(frozen=True)
class Check:
    """One target of a kill-trial mode, as measured."""

    name: str
    measured: str
    target: str
    met: bool


@dataclass(frozen=True)
class Judgement:
    failed: list[str]
    not_run: list[str]


def mode_checks(entry: Mapping[str, Any]) -> list[Check]:
    """The targets a mode is held to: nothing lost, nothing doubled, every recovery within 15 s, at
    least half the runs caught in flight, the test itself passed, and (the roll mode) every request of its
    client through the edge served."""
    result: Mapping[str, Any] = entry.get("result") or {}
    checks: list[Check] = []
    exit_code = entry.get("exit_code")
    if exit_code is not None:
        checks.append(Check("pytest exit status", str(exit_code), "0", exit_code == 0))
    if not result:
        return checks
    checks.append(
        Check("the test's own verdict", _yes_no(result.get("passed")), "passed", result.get("passed") is True)
    )
    for key, name in (("lost", "runs lost"), ("duplicates", "writes doubled")):
        value = result.get(key)
        checks.append(Check(name, _count(value), "0", value == 0))
    worst = recovery_figures(result).get("max")
    checks.append(
        Check("slowest recovery", _seconds(worst), f"<= {RECOVERY_LIMIT_S:g} s", _le(worst, RECOVERY_LIMIT_S))
    )
    extra = result.get("extra")
    unserved = extra.get("client_requests_failed") if isinstance(extra, Mapping) else None
    if unserved is not None:  # the roll mode's client of the edge: every request served
        checks.append(Check("client requests through the edge not served", _count(unserved), "0", unserved == 0))
    in_flight, trials = result.get("in_flight"), result.get("trials")
    share = in_flight / trials if _number(in_flight) and _number(trials) and trials else None
    checks.append(
        Check(
            "runs caught in flight",
            f"{_count(in_flight)} of {_count(trials)}" + (f" ({share:.0%})" if share is not None else ""),
            f">= {IN_FLIGHT_SHARE:.0%}",
            share is not None and share >= IN_FLIGHT_SHARE,
        )
    )
    return checks


def mode_verdict(entry: Mapping[str, Any] | None) -> Verdict:
    if not entry or (entry.get("result") is None and entry.get("exit_code") in (None, 0)):
        return Verdict.NOT_RUN  # never run, or pytest skipped it (db mode on TICKETIQ_DATABASE_URL)
    if entry.get("result") is None:
        return Verdict.FAILED  # the command failed and wrote nothing
    return Verdict.PASSED if all(c.met for c in mode_checks(entry)) else Verdict.FAILED


def bench_verdict(entry: Mapping[str, Any] | None) -> Verdict:
    if not entry or (entry.get("result") is None and entry.get("exit_code") is None):
        return Verdict.NOT_RUN
    if entry.get("result") is None or entry.get("exit_code") not in (None, 0):
        return Verdict.FAILED
    return Verdict.PASSED


def judge(evidence: Mapping[str, Any]) -> Judgement:
    failed: list[str] = []
    not_run: list[str] = []
    for names, kind, verdict in (
        (MODES, "modes", mode_verdict),
        (BENCHES, "benches", bench_verdict),
    ):
        for name in names:
            v = verdict(evidence.get(kind, {}).get(name))
            label = f"kill trials, mode {name}" if kind == "modes" else f"bench {name}"
            if v is Verdict.FAILED:
                failed.append(label)
            elif v is Verdict.NOT_RUN:
                not_run.append(label)
    return Judgement(failed, not_run)


def recovery_figures(result: Mapping[str, Any]) -> dict[str, float | None]:
    """p50/p95/p99/max as the test reported them, else from its samples; none when it has no samples
    (the test reports zeros then)."""
    given = result.get("recovery")
    if result.get("recovery_s") == []:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    if isinstance(given, Mapping) and given:
        return {k: given.get(k) for k in ("p50", "p95", "p99", "max")}
    samples = sorted(s for s in result.get("recovery_s") or [] if _number(s))
    if not samples:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    return {
        "p50": _quantile(samples, 0.50),
        "p95": _quantile(samples, 0.95),
        "p99": _quantile(samples, 0.99),
        "max": samples[-1],
    }


def render(evidence: Mapping[str, Any]) -> str:
    modes: Mapping[str, Any] = evidence.get("modes", {})
    benches: Mapping[str, Any] = evidence.get("benches", {})
    verdict = judge(evidence)
    out = [
        "_This page is generated by `make evidence` (`bench/evidence.py`) from what it measured. "
        "Do not edit it by hand: change the generator or the code and run `make evidence` again._",
        "",
        "# TicketIQ evidence",
        "",
        f"Measured {evidence.get('measured_at', 'at an unknown time')} (UTC) at {_commit(evidence.get('commit'))}, "
        f"on {_machine_line(evidence.get('machine') or {})}.",
        "",
    ]
    out += _summary(modes, benches, verdict)
    out += ["## Kill trials", ""]
    out += [
        f"A mode passes when nothing is lost, nothing is doubled, every recovery takes at most "
        f"{RECOVERY_LIMIT_S:g} s and at least {IN_FLIGHT_SHARE:.0%} of the runs were caught in flight.",
        "",
    ]
    out += _table(
        ["mode", "verdict", "rounds", "trials", "caught in flight", "lost", "duplicates", "p50", "p95", "p99", "max"],
        [_mode_row(name, modes.get(name)) for name in MODES],
    )
    sha = (evidence.get("commit") or {}).get("sha")
    for name in MODES:
        out += _mode_section(name, modes.get(name), sha)
    for name in BENCHES:
        out += _bench_section(name, benches.get(name))
    out += _machine_section(evidence.get("machine") or {})
    out += _reproduce(modes, benches)
    return "\n".join(out).rstrip() + "\n"


def _summary(modes: Mapping[str, Any], benches: Mapping[str, Any], verdict: Judgement) -> list[str]:
    out = ["## Summary", ""]
    for name in MODES:
        out.append(f"- kill trials, mode `{name}`: **{mode_verdict(modes.get(name)).value}**")
    for name in BENCHES:
        out.append(f"- bench `{name}`: **{_bench_status(benches.get(name))}**")
    out.append("")
    if verdict.failed:
        out += [f"Failed: {'; '.join(verdict.failed)}.", ""]
    if verdict.not_run:
        out += [f"Not run: {'; '.join(verdict.not_run)}.", ""]
    return out


def _bench_status(entry: Mapping[str, Any] | None) -> str:
    v = bench_verdict(entry)
    if v is Verdict.FAILED:
        return "FAILED"
    if v is Verdict.NOT_RUN:
        return "not run"
    return "ran"


def _mode_row(name: str, entry: Mapping[str, Any] | None) -> list[str]:
    verdict = mode_verdict(entry)
    result: Mapping[str, Any] = (entry or {}).get("result") or {}
    if not result:
        return [f"`{name}`", f"**{verdict.value}**"] + ["-"] * 9
    rec = recovery_figures(result)
    return [
        f"`{name}`",
        f"**{verdict.value}**",
        _count(result.get("rounds")),
        _count(result.get("trials")),
        _count(result.get("in_flight")),
        _count(result.get("lost")),
        _count(result.get("duplicates")),
        *(_seconds(rec[k]) for k in ("p50", "p95", "p99", "max")),
    ]


def _mode_section(name: str, entry: Mapping[str, Any] | None, sha: str | None) -> list[str]:
    verdict = mode_verdict(entry)
    out = [f"### Mode `{name}`: {verdict.value}", ""]
    if entry is None or verdict is Verdict.NOT_RUN:
        out += [f"Mode `{name}` was not run: there is no `results/{results_stem(name)}.json`.", ""]
        if entry and entry.get("output_tail"):
            out += ["pytest ran it and wrote no results; the last lines it printed:", "", "```"]
            out += [*entry["output_tail"], "```", ""]
        return out + ([f"Run it: `{_command(entry)}`", ""] if entry and _command(entry) != UNKNOWN else [])
    result: Mapping[str, Any] = entry.get("result") or {}
    mode, mix = kill_mode(name)
    if mix:
        out += [f"Mode `{mode}` with every trial kind in each round (`LIYAGENT_KILL_MIX={mix}`): the entry "
                "points, a run of an MCP server's tools, a source sync job and a workflow run.", ""]  # fmt: skip
    if result.get("description") or DESCRIPTIONS.get(name):
        out += [str(result.get("description") or DESCRIPTIONS[name]), ""]
    if not result:
        out += [f"The test wrote no results (pytest exit status {entry.get('exit_code')}).", ""]
    else:
        facts = [
            ("rounds", _count(result.get("rounds"))),
            ("rounds that caught a run in flight", _count(result.get("rounds_in_flight"))),
            ("seed", str(result.get("seed", "-"))),
            ("started", str(result.get("started_at", "-"))),
            ("took", _seconds(result.get("elapsed_s"))),
        ]
        if result.get("commit") and sha and result["commit"] != sha:
            facts.append(("measured at another commit", f"`{result['commit']}`"))
        out += [f"- {k}: {v}" for k, v in facts] + [""]
        out += _table(
            ["target", "measured", "wanted", ""],
            [[c.name, c.measured, c.target, "met" if c.met else "**NOT met**"] for c in mode_checks(entry)],
        )
        by_kind, recovery = result.get("by_kind"), result.get("recovery_by_kind")
        if isinstance(by_kind, Mapping) and by_kind:
            mine = recovery if isinstance(recovery, Mapping) else {}
            out += ["By trial kind (recovery: from the event to the end of each trial caught in flight):", ""]
            out += _records({"kind": kind, **(fig if isinstance(fig, Mapping) else {"figures": fig}),
                             **{f"recovery {q}": _seconds(r.get(q)) for r in [mine.get(kind)] if isinstance(r, Mapping)
                                for q in ("p50", "p95", "max")}} for kind, fig in by_kind.items())  # fmt: skip
        extra = result.get("extra")
        if isinstance(extra, Mapping) and extra:
            out += [f"Figures of mode `{name}`:", ""]
            out += [f"- {k}: {_value(v)}" for k, v in extra.items()] + [""]
        failures = result.get("failures") or []
        if failures:
            out += ["Failures the test reported:", "", "```", *(str(f) for f in failures), "```", ""]
    if entry.get("exit_code") not in (None, 0) and entry.get("output_tail"):
        out += ["The last lines pytest printed:", "", "```", *entry["output_tail"], "```", ""]
    if entry.get("image"):
        out += [f"![recovery times, mode {name}]({entry['image']})", ""]
    out += [f"Reproduce: `{_command(entry)}`", ""]
    if result.get("command") and result["command"] != _command(entry):
        out += [f"Repeat these very timings: `{result['command']}`", ""]
    return out


def _bench_section(name: str, entry: Mapping[str, Any] | None) -> list[str]:
    out = [f"## {BENCH_TITLES.get(name, name)}", ""]
    verdict = bench_verdict(entry)
    if entry is None or verdict is Verdict.NOT_RUN:
        out += [
            f"Not run: there is no `results/{name}.json`"
            + (f" ({entry['note']})." if entry and entry.get("note") else "."),
            "",
        ]
        return out + ([f"Run it: `{_command(entry)}`", ""] if entry and _command(entry) != UNKNOWN else [])
    result = entry.get("result")
    if entry.get("exit_code") not in (None, 0):
        out += [f"**FAILED**: exit status {entry['exit_code']}.", ""]
        if entry.get("output_tail"):
            out += ["```", *entry["output_tail"], "```", ""]
    if isinstance(result, Mapping):
        body = {"step_overhead": _step_overhead, "recovery": _recovery, "scale": _scale}.get(name, _generic)
        out += body(result)
    out += [f"Reproduce: `{_command(entry)}`", ""]
    return out


def _step_overhead(result: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    step = result.get("step_overhead")
    if isinstance(step, Mapping):
        update = step.get("update") or {}
        out += [
            f"Baseline: one committed single-row UPDATE of a checkpoint row "
            f"({_count(update.get('state_bytes'))} bytes of state), median "
            f"{_ms(update.get('paced_ms'))} at the runs' pace ({_ms(update.get('paced_busy_ms'))} busy before each), "
            f"{_ms(update.get('back_to_back_ms'))} back to back.",
            "",
        ]
        rows = []
        for agent, label in (("reads", "read-only step"), ("writes", "write step (1 write)")):
            fig = (step.get("step") or {}).get(agent) or {}
            rows.append([
                label,
                _ms(fig.get("overhead_median_ms")),
                _ms(fig.get("overhead_p95_ms")),
                _number_text(fig.get("write_statements_per_step")),
                _ratio(fig.get("ratio_to_update")),
                _ratio(fig.get("ratio_to_back_to_back_update")),
            ])  # fmt: skip
        out += _table(
            ["step", "overhead median", "p95", "write statements/step", "x UPDATE (paced)", "x UPDATE (back to back)"],
            rows,
        )
        ratio, target = step.get("ratio"), step.get("target_ratio", 1.5)
        whole, whole_target = step.get("whole_ratio"), step.get("whole_target_ratio")
        if whole is not None and whole_target is not None:
            out += [f"Target: a read-only agent step whole (in-process model and read) <= {whole_target}x the UPDATE: "
                    f"{_ratio(whole)}, {'met' if _le(whole, whole_target) else '**NOT met**'}.", ""]  # fmt: skip
        out += [
            f"Target: read-only step overhead <= {target}x the UPDATE: {_ratio(ratio)}, "
            f"{'met' if _le(ratio, target) else '**NOT met**'}.",
            "",
        ]
    conc = result.get("concurrent")
    if isinstance(conc, Mapping):
        out += [f"{_count(conc.get('runs'))} concurrent runs waiting on a {_value(conc.get('model_s'))} s model:", ""]
        out += _table(
            ["figure", "measured", "target"],
            [
                ["runs succeeded", _count(conc.get("succeeded")), _count(conc.get("runs"))],
                ["took", _seconds(conc.get("elapsed_s")), ""],
                ["leases lost by the process", _count(conc.get("lapses_by_process")), "0"],
                ["lapsed leases seen in the database", _count(conc.get("lapsed_leases_seen")), "0"],
                ["renewal statements per interval", _number_text(conc.get("renewals_per_interval")), "1"],
                ["peak memory (max RSS)", f"{_number_text(conc.get('peak_rss_mib'), 0)} MiB", ""],
            ],
        )
    rest = {k: v for k, v in result.items() if k not in ("step_overhead", "concurrent")}
    return out + (_generic(rest) if rest else [])


def _recovery(result: Mapping[str, Any]) -> list[str]:
    kinds = result.get("kinds")
    if not isinstance(kinds, Mapping):
        return _generic(result)
    rows = []
    for kind, fig in kinds.items():
        fig = fig if isinstance(fig, Mapping) else {}
        samples = fig.get("samples") or []
        rows.append([
            str(fig.get("label", kind)),
            f"{len(samples)} of {_count(fig.get('trials'))}",
            *(_seconds(fig.get(k)) for k in ("p50", "p95", "p99", "max")),
            str(fig.get("target", "")),
        ])  # fmt: skip
    out = [
        f"Recovery is from the signal to the `agent.run.crash_resumed` audit row, on the database clock "
        f"(model latency {_value(result.get('model_latency_ms'))} ms). A trial whose run was not resumed "
        f"within 60 s gives no sample.",
        "",
        *_table(["kind", "samples", "p50", "p95", "p99", "max", "target"], rows),
    ]
    for kind, fig in kinds.items():
        if isinstance(fig, Mapping) and fig.get("settled"):
            out += [f"`{kind}`: the comment in doubt was settled as {_value(fig['settled'])}.", ""]
    return out


def _scale(result: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    throughput = result.get("throughput")
    if isinstance(throughput, list) and throughput:
        out += ["Throughput:", "", *_throughput(throughput)]
    sweep = result.get("sweep")
    if isinstance(sweep, list) and sweep:
        out += ["Sweep statements (ms) as the history of finished runs grows:", ""]
        if all(isinstance(s, Mapping) and isinstance(s.get("statements"), Mapping) for s in sweep):
            names = list(dict.fromkeys(n for s in sweep for n in s["statements"]))
            out += _table(
                ["statement", *(f"{_count(s.get('finished_runs'))} finished runs" for s in sweep)],
                [[f"`{n}`", *(_ms(s["statements"].get(n)) for s in sweep)] for n in names],
            )
        else:
            out += _records(sweep)
    spread = result.get("spread")
    if isinstance(spread, Mapping):
        out += [f"Spread of a kill: {_count(spread.get('killed_runs'))} runs of the killed process were taken by:", ""]
        taken = spread.get("taken")
        if isinstance(taken, Mapping):
            out += _table(["process", "runs taken"], [[str(p), _count(n)] for p, n in taken.items()])
        rest = {k: v for k, v in spread.items() if k not in ("killed_runs", "taken")}
        out += [f"- {k}: {_value(v)}" for k, v in rest.items()] + ([""] if rest else [])
    rest = {k: v for k, v in result.items() if k not in ("throughput", "sweep", "spread")}
    return out + (_generic(rest) if rest else [])


def _throughput(rows: list[Any]) -> list[str]:
    """One row per process count; where the limit is and the statements each run costs most, below."""
    columns = (
        ("processes", "processes", _count), ("runs", "runs", _count), ("failed", "failed", _count),
        ("runs/s", "runs_per_s", _number_text), ("statements/s", "statements_per_s", _number_text),
        ("commits/s", "commits_per_s", _number_text), ("statements per run", "statements_per_run", _number_text),
        ("commits per run", "commits_per_run", _number_text),
        ("app CPU ms per run", "app_cpu_ms_per_run", _number_text),
    )  # fmt: skip
    measured = [r for r in rows if isinstance(r, Mapping)]
    if not measured or any("runs_per_s" not in r for r in measured):
        return _records(rows)  # a shape this page does not know: show what is there
    out = _table(
        [title for title, _, _ in columns] + ["busy cores (Postgres / apps / stand-ins / client)"],
        [[show(r.get(key)) for _, key, show in columns] + [_cpu(r.get("cpu"))] for r in measured],
    )
    out += ["Where the limit is:", ""]
    out += [f"- {_count(r.get('processes'))} processes: {_value(r.get('limit'))}" for r in measured] + [""]
    busiest = measured[-1].get("busiest_statements") if measured else None
    if isinstance(busiest, list) and busiest:
        out += [f"The statements each run costs most ({_count(measured[-1].get('processes'))} processes):", ""]
        out += _table(
            ["per run", "statement (its start)"],
            [[_number_text(b.get("per_run")), f"`{b.get('statement')}`"] for b in busiest if isinstance(b, Mapping)],
        )
    return out


def _cpu(cpu: Any) -> str:
    if not isinstance(cpu, Mapping) or not _number(cpu.get("wall_s")):
        return ""
    wall = float(cpu["wall_s"])
    parts: list[Any] = [cpu.get(k) for k in ("postgres_s", "apps_s", "standins_s", "client_s")]
    shares = " / ".join(f"{float(v) / wall:.2f}" if _number(v) else "?" for v in parts)
    return f"{_number_text(cpu.get('busy_cores'))} of {_count(cpu.get('cores'))} ({shares})"


def _generic(result: Mapping[str, Any]) -> list[str]:
    return [*(f"- {k}: {_value(v)}" for k, v in result.items()), ""]


def _machine_section(machine: Mapping[str, Any]) -> list[str]:
    memory: Any = machine.get("memory_kib")
    rows = [
        ["CPU", str(machine.get("cpu", "unknown"))],
        ["cores", _count(machine.get("cores"))],
        ["memory", f"{memory / 1024 / 1024:.1f} GiB" if _number(memory) else "unknown"],
        ["OS", str(machine.get("os", "unknown"))],
        ["Python", str(machine.get("python", "unknown"))],
        ["Postgres (embedded, as the benches and tests start it)", str(machine.get("postgres", "unknown"))],
    ]
    if machine.get("database_url_postgres"):
        rows.append(["Postgres at TICKETIQ_DATABASE_URL (the kill trials')", str(machine["database_url_postgres"])])
    rows.append(["HAProxy", str(machine.get("haproxy") or "not installed")])
    return ["## Machine", "", *_table(["", ""], rows)]


def _reproduce(modes: Mapping[str, Any], benches: Mapping[str, Any]) -> list[str]:
    commands = ["make evidence   # all of the below, then this page"]
    commands += [_command(modes[m]) for m in MODES if modes.get(m)]
    commands += [_command(benches[b]) for b in BENCHES if benches.get(b)]
    commands = [c for c in commands if c != UNKNOWN]
    return ["## Reproduce", "", "From a clone at the commit above:", "", "```bash", *commands, "```", ""]


def _command(entry: Mapping[str, Any]) -> str:
    return str(entry.get("command") or (entry.get("result") or {}).get("command") or UNKNOWN)


def _commit(commit: Mapping[str, Any] | None) -> str:
    if not commit or not commit.get("sha"):
        return "an unknown commit"
    return f"commit `{commit['sha']}`" + (" with uncommitted changes" if commit.get("dirty") else "")


def _machine_line(machine: Mapping[str, Any]) -> str:
    return f"{machine.get('cpu', 'an unknown CPU')}, {_count(machine.get('cores'))} cores"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return [line(header), line(["---"] * len(header)), *(line(r) for r in rows), ""]


def _records(records: Iterable[Any]) -> list[str]:
    """A table of whatever keys the records have; nested mappings flattened one level (`cpu.wall_s`)."""
    flat = []
    for record in records:
        row: dict[str, Any] = {}
        for k, v in record.items() if isinstance(record, Mapping) else [("value", record)]:
            if isinstance(v, Mapping):
                row.update({f"{k}.{kk}": vv for kk, vv in v.items()})
            else:
                row[k] = v
        flat.append(row)
    columns = list(dict.fromkeys(k for row in flat for k in row))
    return _table(columns, [[_value(row.get(c)) for c in columns] for row in flat])


def _value(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return _yes_no(v)
    if isinstance(v, int):
        return _count(v)
    if isinstance(v, float):
        return _number_text(v)
    if isinstance(v, str):
        return v
    return json.dumps(v, sort_keys=True)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "-" if v is None else str(v)


def _number_text(v: Any, digits: int = 2) -> str:
    return f"{v:,.{digits}f}" if _number(v) else _count(v)


def _seconds(v: Any) -> str:
    return f"{v:.2f} s" if _number(v) else "-"


def _ms(v: Any) -> str:
    return f"{v:.3f} ms" if _number(v) else "-"


def _ratio(v: Any) -> str:
    return f"{v:.2f}x" if _number(v) else "-"


def _yes_no(v: Any) -> str:
    return {True: "yes", False: "no"}.get(v, "not reported") if isinstance(v, bool) else "not reported"


def _le(v: Any, limit: Any) -> bool:
    return _number(v) and _number(limit) and v <= limit


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Nearest rank: a sample that was measured, never one interpolated between two."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
