"""The cluster's places for app processes behind the edge. A slot keeps its name (the edge's server) while
its process is replaced: started again after a death (`supervise.py` decides when), or by a roll
(`roll.py`, which also moves it to another port)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ticketiq.operate.launch import Child, ready, spawn_serve
from ticketiq.operate.supervise import LeaveDown, Life, Restart, after_death, restart_line

READY_WITHIN_S = 60.0  # an app process started again that is not ready by then is ended, and counts as a death


def how_it_ended(returncode: int) -> str:
    return f"was killed by {signal_name(-returncode)}" if returncode < 0 else f"exited with code {returncode}"


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass
class Slot:
    """One app process's place behind the edge: its name and port stay, its process is replaced."""

    name: str
    port: int
    env: dict[str, str] = field(repr=False)  # the database URL, with its password
    logs: Path
    child: Child
    lives: list[Life]
    restart_at: float | None = None  # when to start it again (time.monotonic())
    starting: bool = False  # started again, not yet ready
    down: bool = False  # a crash loop: left down

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def look(self, now: float, client: httpx.Client) -> list[str]:
        """One look at the slot: what changed, as lines to print."""
        if self.down:
            return []
        if self.restart_at is not None:
            if now < self.restart_at:
                return []
            self.restart_at = None
            self.child, _ = spawn_serve(self.env, self.logs, port=self.port, name=self.name)
            self.lives.append(Life(now))
            self.starting = True
            return []
        rc = self.child.proc.poll()
        if rc is None and self.starting:
            if ready(client, self.base):
                self.starting = False
                took = now - self.lives[-1].started
                return [f"{self.name:<9} pid {self.child.pid}: {self.base}  (started again, ready in {took:.1f} s)"]
            if now - self.lives[-1].started < READY_WITHIN_S:
                return []
            self.child.kill()
            return self._died(now, f"was not ready within {READY_WITHIN_S:.0f} s and was ended")
        if rc is None:
            return []
        return self._died(now, how_it_ended(rc))

    def _died(self, now: float, how: str) -> list[str]:
        self.lives[-1] = Life(self.lives[-1].started, now)
        self.starting = False
        decision = after_death(self.lives)
        if isinstance(decision, Restart):
            self.restart_at = now + decision.delay_s
        elif isinstance(decision, LeaveDown):
            self.down = True
        return [restart_line(self.name, self.child.pid, how, decision, str(self.child.log_path))]
