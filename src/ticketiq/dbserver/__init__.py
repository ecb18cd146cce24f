"""Database servers, as processes: the embedded Postgres of TICKETIQ_HOME (`embedded.py`, `postmaster.py`
for its pid file and start failures, `watch.py` to start it again), where a process finds its database
(`target.py`), the pg_auto_failover formation (`formation/`) and the declared schema's writer.

May import storage (for its SQL), runtime and the base modules. Storage never imports it: rows and SQL
start no process.
"""
