"""The one database boundary: the pool, the embedded server, numbered migrations and the named SQL
(`queries/*.sql`, the only SQL), and the stores that make every statement with its fence (I3) and
return typed rows (`rows.py`).

May import auth, values and the base modules (settings, errors, background, metrics, stall).
Everything above reaches Postgres through it.
"""
