"""`make evidence`: run the kill trials in every mode and the benchmarks, then write `docs/evidence.md`
from what they measured. The page is never typed by hand.

    make evidence
    .venv/bin/python bench/evidence.py [--render-only] [--only stop,db] [--allow-missing] [--results DIR] [--out PATH]

The kill trials run as a user runs them, one pytest per mode (`tests/unit/test_kill_trials.py` writes
`results/kill-trials-<mode>.json` and its histogram). Rounds per mode: EVIDENCE_KILL (200),
EVIDENCE_STOP (50), EVIDENCE_DB (20), EVIDENCE_DBRESTART (50: the embedded Postgres SIGKILLed, or stopped
with `ticketiq db stop` and started with `ticketiq db url`), EVIDENCE_VENDOR (20), and EVIDENCE_JOBS (50:
mode kill with the background jobs in the mix, `results/kill-trials-kill-cron-teams-webhook-mcp-sync-workflow.json`),
EVIDENCE_FAILOVER (20) and EVIDENCE_STALL (20): the primary node of a pg_auto_failover formation killed or
frozen under the runs, a source sync and a workflow (`make pg-auto-failover` installs it), and
EVIDENCE_ROLL (50: `ticketiq cluster roll` of a real two-process cluster under a client of its edge). Extra
arguments for a bench, for a quick trial of the generator: EVIDENCE_STEP_ARGS, EVIDENCE_RECOVERY_ARGS,
EVIDENCE_SCALE_ARGS (e.g. EVIDENCE_RECOVERY_ARGS="--kills 2 --stalls 1 --doubts 2"). Every command is
written on the page as run.

A command that fails does not stop the others: it is recorded and shown on the page, and the exit
status is 1 at the end. So is a mode or bench with no results, unless `--allow-missing`.
`--render-only` writes the page from the files already in the results folder.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).parent))

from evidence_page import BENCHES, MODES, judge, kill_mode, render, results_stem
from ticketiq.dbserver import embedded

REPO = Path(__file__).resolve().parent.parent
KILL_TEST = "tests/unit/test_kill_trials.py"
ROUNDS_ENV, MODE_ENV = "LIYAGENT_KILL_TRIALS", "LIYAGENT_KILL_MODE"  # read by the kill-trials test
DEFAULT_ROUNDS = {"kill": 200, "stop": 50, "db": 20, "dbrestart": 50, "vendor": 20, "jobs": 50, "failover": 20,
                  "stall": 20, "roll": 50}  # fmt: skip
MIX_ENV = "LIYAGENT_KILL_MIX"
BENCH_ARGS_ENV = {
    "step_overhead": "EVIDENCE_STEP_ARGS",
    "recovery": "EVIDENCE_RECOVERY_ARGS",
    "scale": "EVIDENCE_SCALE_ARGS",
}
RUN_RECORD = "evidence-run.json"  # what the generator ran: commands, exit statuses, machine, commit
TAIL_LINES = 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render-only", action="store_true", help="write the page from the results already there")
    parser.add_argument(
        "--only", help="run only these kill modes or benches (comma separated), keeping the last run's other results"
    )
    parser.add_argument("--allow-missing", action="store_true", help="a mode or bench with no results is no failure")
    parser.add_argument("--results", type=Path, default=REPO / "results", help="the results folder (results/)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "evidence.md", help="the page (docs/evidence.md)")
    args = parser.parse_args()
    results: Path = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    if not args.render_only:
        run_everything(results, set(args.only.split(",")) if args.only else None)
    evidence = assemble(results, args.out.resolve())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(evidence))
    verdict = judge(evidence)
    phase(f"wrote {display(args.out.resolve())}")
    for label in verdict.failed:
        phase(f"FAILED: {label}")
    for label in verdict.not_run:
        phase(f"not run: {label}" + ("" if args.allow_missing else " (--allow-missing to accept)"))
    return 1 if verdict.failed or (verdict.not_run and not args.allow_missing) else 0


def run_everything(results: Path, only: set[str] | None = None) -> None:
    """Every mode and bench; with `only`, just those, into the last run's record (each entry then names
    the commit it ran at, and the page says so where it differs)."""
    unknown = (only or set()) - set(MODES) - set(BENCHES)
    if unknown:
        raise SystemExit(f"--only: no kill mode or bench named {', '.join(sorted(unknown))}")
    fresh: dict[str, Any] = {"measured_at": utc_now(), "commit": commit(), "machine": machine(), "modes": {},
                             "benches": {}}  # fmt: skip
    record: dict[str, Any] = (load(results / RUN_RECORD) or fresh) if only else fresh
    save(results, record)
    for mode in MODES:
        if only is not None and mode not in only:
            continue
        rounds = int(os.environ.get(f"EVIDENCE_{mode.upper()}", DEFAULT_ROUNDS[mode]))
        phase(f"kill trials, mode {mode}: {rounds} rounds")
        written = [REPO / "results" / f"{results_stem(mode)}.{ext}" for ext in ("json", "png")]
        for path in written:  # a failed run must not leave the last run's figures standing
            path.unlink(missing_ok=True)
            (results / path.name).unlink(missing_ok=True)
        record["modes"][mode] = {**execute(*kill_trials_command(mode, rounds)), "commit": commit()}
        for path in written:  # the test writes into the repository's results/
            if path.exists() and path.parent.resolve() != results:
                shutil.copy2(path, results / path.name)
        save(results, record)
    for bench in BENCHES:
        if only is not None and bench not in only:
            continue
        script = REPO / "bench" / f"{bench}.py"
        output = results / f"{bench}.json"
        output.unlink(missing_ok=True)
        extra = shlex.split(os.environ.get(BENCH_ARGS_ENV[bench], ""))
        argv = [sys.executable, display(script), *extra, "--json", display(output)]
        if script.exists():
            phase(f"bench {bench}")
            record["benches"][bench] = {**execute(argv, {}), "commit": commit()}
        else:
            phase(f"bench {bench}: {display(script)} does not exist")
            record["benches"][bench] = {"command": shown(argv, {}), "note": f"{display(script)} does not exist"}
        save(results, record)


def execute(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run one command from the repository, its output passed through; its exit status, time and last lines."""
    command = shown(argv, env)
    phase(f"$ {command}")
    started = time.monotonic()
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    with subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line.rstrip("\n"))
    if child.returncode:
        phase(f"exit status {child.returncode}")
    return {
        "command": command,
        "exit_code": child.returncode,
        "elapsed_s": round(time.monotonic() - started, 1),
        "output_tail": list(tail),
    }


def kill_trials_command(name: str, rounds: int) -> tuple[list[str], dict[str, str]]:
    mode, mix = kill_mode(name)
    env = {ROUNDS_ENV: str(rounds), MODE_ENV: mode, **({MIX_ENV: mix} if mix else {})}
    return [sys.executable, "-m", "pytest", KILL_TEST, "-q"], env


def shown(argv: list[str], env: Mapping[str, str]) -> str:
    """The command as a user types it in the repository: settings first, the venv's python by its path."""
    return shlex.join([*(f"{k}={v}" for k, v in env.items()), display(Path(argv[0])), *argv[1:]])


def assemble(results: Path, page: Path) -> dict[str, Any]:
    """The evidence the page is rendered from: the results files, the record of the run that wrote them
    (or, without one, the machine and commit as they are now), the histograms copied beside the page."""
    record = load(results / RUN_RECORD) or {}
    modes: dict[str, Any] = {}
    for mode in MODES:
        entry = dict((record.get("modes") or {}).get(mode) or {})
        entry["result"] = load(results / f"{results_stem(mode)}.json")
        entry["image"] = histogram(results, mode, entry["result"], page)
        if not entry.get("command"):  # not run by this generator: the test's own, else the one that would run it
            default = shown(*kill_trials_command(mode, DEFAULT_ROUNDS[mode]))
            entry["command"] = (entry["result"] or {}).get("command") or default
        modes[mode] = entry
    benches: dict[str, Any] = {}
    for bench in BENCHES:
        entry = dict((record.get("benches") or {}).get(bench) or {})
        entry["result"] = load(results / f"{bench}.json")
        argv = [".venv/bin/python", f"bench/{bench}.py", "--json", display(results / f"{bench}.json")]
        entry.setdefault("command", shown(argv, {}))
        benches[bench] = entry
    if not record:
        phase(f"no {RUN_RECORD} in {display(results)}: the machine and commit are read now")
    started = sorted(str(m["result"]["started_at"]) for m in modes.values() if (m["result"] or {}).get("started_at"))
    return {
        "measured_at": record.get("measured_at") or (started[0] if started else utc_now()),
        "commit": record.get("commit") or commit(),
        "machine": record.get("machine") or machine(),
        "modes": modes,
        "benches": benches,
    }


def histogram(results: Path, mode: str, result: Mapping[str, Any] | None, page: Path) -> str | None:
    """Copy the mode's histogram beside the page (docs/evidence/) and return its link from the page."""
    target = page.parent / "evidence" / f"kill-trials-{mode}.png"
    source = results / f"{results_stem(mode)}.png"
    if result is None or not source.exists():
        target.unlink(missing_ok=True)  # no stale picture beside a page that has no figures for it
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.resolve() != target.resolve():
        shutil.copy2(source, target)
    return target.relative_to(page.parent).as_posix()


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        models = [
            line.split(":", 1)[1].strip() for line in open_lines("/proc/cpuinfo") if line.startswith("model name")
        ]
        cpu = models[0] if models else cpu
    memory = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        memory = next(int(line.split()[1]) for line in open_lines("/proc/meminfo") if line.startswith("MemTotal:"))
    haproxy = None
    binary = shutil.which("haproxy") or next((p for p in ("/usr/sbin/haproxy",) if os.access(p, os.X_OK)), None)
    if binary:
        answer = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=30, check=False)
        haproxy = next(iter((answer.stdout or answer.stderr).strip().splitlines()), None)
    url = os.environ.get("TICKETIQ_DATABASE_URL")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_kib": memory,
        "os": platform.platform(),
        "python": platform.python_version(),
        "postgres": embedded_postgres_version(),
        "database_url_postgres": postgres_version(url) if url else None,
        "haproxy": haproxy,
    }


def embedded_postgres_version() -> str:
    """The version of the embedded server, started as the benches start theirs (bench/recovery.py)."""
    with tempfile.TemporaryDirectory(prefix="ticketiq-evidence-") as tmp:
        home = Path(tmp) / "home"
        server = embedded.acquire(home)
        try:
            return postgres_version(server.url())
        finally:
            embedded.stop(server.home)


def postgres_version(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT version()").fetchone()
        return str(row[0]) if row else "unknown"


def commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()

    return {"sha": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def open_lines(path: str) -> Iterator[str]:
    with open(path) as f:
        yield from f


def load(path: Path) -> dict[str, Any] | None:
    """A results file, or None when there is none or it is not a JSON object (then said so)."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        phase(f"{display(path)} is not JSON ({e}): taken as missing")
        return None
    if not isinstance(data, dict):
        phase(f"{display(path)} is not a JSON object: taken as missing")
        return None
    return data


def save(results: Path, record: Mapping[str, Any]) -> None:
    """The run so far; written after every phase so an interrupted run still renders what it did."""
    (results / RUN_RECORD).write_text(json.dumps(record, indent=2) + "\n")


def display(path: Path) -> str:
    """A path as a user in the repository types it."""
    absolute = path if path.is_absolute() else REPO / path
    try:
        return absolute.relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
