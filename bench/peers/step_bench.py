"""The agent step side by side: TicketIQ, DBOS and LangGraph doing the same work on one Postgres, in one
run, beside the floor of one committed single-row UPDATE (issue 37, part 1).

    make bench-step
    .venv/bin/python bench/peers/step_bench.py [--runs 100] [--steps 10] [--warmup 10] [--rounds 3]
                                               [--peers-python /tmp/peers-venv/bin/python]
                                               [--systems floor,ticketiq,dbos,langgraph] [--parse]

The work: `--runs` runs of `--steps` read-only agent steps each. The model answers one read call a
turn for `--steps` turns and then text; the tool is an instant read; both are in the system's process.
- TicketIQ (`ticketiq_steps.py`): the engine of this repository, as `bench/step_overhead.py` drives it.
  Its model answers `measure.reply`, as the peers' do; with `--parse` it reads a real reply's bytes.
- DBOS (`dbos_steps.py`): the model and the tool each a `@DBOS.step` in a `@DBOS.workflow`.
- LangGraph (`langgraph_steps.py`): an agent node and a tools node, `PostgresSaver`, durability `sync`.
- The floor (`floor_steps.py`): one committed single-row UPDATE a step.

Each system runs in a process of its own, started here: TicketIQ and the floor on this interpreter
with the repository's `src` first on the path, DBOS and LangGraph on the peers' venv (`--peers-python`),
which holds `bench/peers/requirements.txt` and not this package: the peers are never in the package's
dependencies, and neither side's imports reach the other's. `make bench-step` makes that venv in
/tmp/peers-venv when it is missing. A system whose process fails is reported as such, with the end of
its error output, and the others still run.

Every round gives each system a fresh database on one embedded Postgres (its own, in a temporary home;
fsync and synchronous_commit as the server's defaults, on) and a fresh process, which makes `--warmup`
runs first, then the runs that count (`measure.py`): wall per agent step with run creation in it (as a
peer's workflow or thread start is), client CPU per step (getrusage of the system's whole process,
every thread of it) and top-level statements per step (`pg_stat_statements` of its database).
The systems' order turns each round, so none always runs first on a shared machine. It prints the
table (a range over the rounds when there are several), the ratios of TicketIQ to each peer and to the
floor, each taken within one round (with their median over three rounds or more), the peers' versions
and the machine's cores. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent.parent
sys.path.insert(0, str(REPOSITORY / "src"))  # this tree's package, whatever the venv's install points at

from ticketiq.dbserver import embedded  # noqa: E402

SCRIPTS = {
    "floor": "floor_steps.py",
    "ticketiq": "ticketiq_steps.py",
    "dbos": "dbos_steps.py",
    "langgraph": "langgraph_steps.py",
}
PEERS = ("dbos", "langgraph")
URL_VARIABLE = "PEERS_DATABASE_URL"  # measure.URL_VARIABLE: the password goes by the environment


def create_database(server: embedded.EmbeddedServer, name: str) -> str:
    """A fresh database with pg_stat_statements readable in it: its URL."""
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    with psycopg.connect(server.url(name), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return server.url(name)


def server_facts(admin_url: str) -> dict[str, str]:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        facts = {}
        for name in ("server_version", "fsync", "synchronous_commit"):
            row = conn.execute(f"SHOW {name}").fetchone()
            facts[name] = str(row[0]) if row else "?"
    return facts


def run_system(system: str, python: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """One system's process on its fresh database: its measured figures, or {"error": why}."""
    env = dict(os.environ)
    env[URL_VARIABLE] = url
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPOSITORY / "src"), env.get("PYTHONPATH")) if p)
    command = [python, str(HERE / SCRIPTS[system])]
    command += ["--runs", str(args.runs), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if system == "ticketiq" and args.parse:
        command.append("--parse")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout_s)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n    ".join(done.stderr.strip().splitlines()[-6:])
        return {"error": f"exit status {done.returncode}:\n    {tail}"}
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


def per_step(figures: dict[str, Any]) -> dict[str, float]:
    steps = figures["runs"] * figures["steps_per_run"]
    return {
        "wall_ms": figures["wall_s"] * 1000 / steps,
        "cpu_ms": figures["cpu_s"] * 1000 / steps,
        "statements": figures["statements"] / steps,
    }


def spread(values: list[float], digits: int) -> str:
    """One value, or the range over the rounds."""
    if not values:
        return "-"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}-{high:.{digits}f}"


def table(systems: list[str], rounds: list[dict[str, dict[str, Any]]]) -> list[str]:
    """The Markdown table of the figures per step, one column a system."""
    heads, columns = [], []
    for system in systems:
        good = [r[system] for r in rounds if "error" not in r[system]]
        version = good[0]["version"] if good else "failed"
        heads.append(f"{good[0]['system'] if good else system} ({version})")
        columns.append([per_step(g) for g in good])
    out = ["| | " + " | ".join(heads) + " |", "| --- |" + " --- |" * len(systems)]
    for key, label, digits in (
        ("wall_ms", "wall ms per agent step", 2),
        ("cpu_ms", "client CPU ms per step", 2),
        ("statements", "statements per step", 2),
    ):
        out.append(f"| {label} | " + " | ".join(spread([c[key] for c in col], digits) for col in columns) + " |")
    return out


def middle(values: list[float], digits: int) -> str:
    """The median, beside the range of three rounds or more: on a shared machine one round of the range
    can sit far from the others, and the range alone does not say which end is typical."""
    return f" (median {statistics.median(values):.{digits}f}x)" if len(values) >= 3 else ""


def ratios(systems: list[str], rounds: list[dict[str, dict[str, Any]]]) -> list[str]:
    """TicketIQ's figures over each other system's, each ratio taken within one round."""
    out = []
    for other in (s for s in systems if s != "ticketiq"):
        for key, label in (("wall_ms", "wall"), ("cpu_ms", "client CPU"), ("statements", "statements")):
            found = [
                per_step(r["ticketiq"])[key] / per_step(r[other])[key]
                for r in rounds
                if "error" not in r["ticketiq"] and "error" not in r[other] and per_step(r[other])[key] > 0
            ]
            if found:
                out.append(f"TicketIQ / {other:<9} {label:<11} {spread(found, 2)}x{middle(found, 2)}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers-python", default="/tmp/peers-venv/bin/python")
    parser.add_argument("--systems", default="floor,ticketiq,dbos,langgraph")
    parser.add_argument(
        "--parse", action="store_true",
        help="TicketIQ's model reads a real reply's bytes every step (the peers' models return a bare dict)",
    )  # fmt: skip
    parser.add_argument("--timeout-s", type=float, default=900.0, help="the most one system's process may take")
    args = parser.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SCRIPTS]
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    rounds: list[dict[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="ticketiq-peers-") as tmp:
        server = embedded.acquire(Path(tmp) / "home")
        try:
            facts = server_facts(server.url())
            for n in range(args.rounds):
                found: dict[str, dict[str, Any]] = {}
                for system in systems[n % len(systems) :] + systems[: n % len(systems)]:
                    url = create_database(server, f"{system}_{n}")
                    python = args.peers_python if system in PEERS else sys.executable
                    found[system] = run_system(system, python, url, args)
                    print(f"round {n + 1}/{args.rounds}: {system} done", file=sys.stderr, flush=True)
                rounds.append(found)
        finally:
            embedded.stop(server.home)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"{args.runs} runs of {args.steps} read-only agent steps per system, {args.warmup} warm-up runs, "
        f"{args.rounds} round(s), a fresh database and process per system and round"
    )
    model = "a real reply's bytes, parsed" if args.parse else "the reply built, as the peers' dict is"
    print(f"TicketIQ's model: {model}")
    print(f"machine: {cores} cores ({platform.machine()}, Python {platform.python_version()})")
    print(
        f"one embedded PostgreSQL {facts['server_version']}, fsync {facts['fsync']}, "
        f"synchronous_commit {facts['synchronous_commit']}"
    )
    print()
    print("\n".join(table(systems, rounds)))
    print()
    print("\n".join(ratios(systems, rounds)))
    for system in systems:
        for n, r in enumerate(rounds):
            if "error" in r[system]:
                print(f"{system} failed in round {n + 1}: {r[system]['error']}")


if __name__ == "__main__":
    main()
