"""A local pg_auto_failover formation (a monitor, a primary and its synchronous standby on 127.0.0.1),
for `ticketiq db ha` and the kill trials that fail it over.

- `plan.py`: pure: where its files live, its ports, URLs, server settings, keeper timeouts, commands.
- `synchrony.py`: pure: whether commits are on two nodes now, from the monitor's node table.
- `monitor.py` (with `formation.sql`): reads the monitor's node table; probes the URL with a write.
- `processes.py`: the user it runs as, starting pg_autoctl, a node's processes found and signalled by pid.
- `credentials.py`: its password (a passfile), the roles given it, pg_hba.conf that asks for it.
- `formation.py`: `up`, `down` and `Formation`, the API of the trials.

Part of the database-server room; it runs SQL on the monitor through storage's parser, and imports only
storage, errors, psutil and the room's ports and authentication.
"""

from ticketiq.dbserver.formation.formation import Down, Formation, Node, Status, Up, down, up
from ticketiq.dbserver.formation.plan import FormationError
from ticketiq.dbserver.formation.synchrony import Process, Synchrony, Verdict

__all__ = [
    "Down",
    "Formation",
    "FormationError",
    "Node",
    "Process",
    "Status",
    "Synchrony",
    "Up",
    "Verdict",
    "down",
    "up",
]
