"""Rows and SQL, the one database boundary: the pool and how it connects (`database.py`, `hosts.py`,
`outage.py`), numbered migrations and the declared schema, the named SQL (`queries/*.sql`, the only SQL),
and the stores that make every statement with its fence (I3) and return typed rows (`rows.py`).
It starts and signals no process: servers are the `dbserver` room's.

May import auth, values, runtime and the base modules (settings, errors, metrics). Everything above
reaches Postgres through it.
"""
