"""Operations: the processes a machine runs and what stands in front of them. Starting `ticketiq serve`
and `ticketiq standins` as children (`launch.py`), the HAProxy edge (`edge.py`, its runtime API in
`edge_admin.py`) and a local cluster of app processes behind it (`cluster.py`), which starts a dead one
again (`supervise.py`, `slots.py`) and rolls them one at a time (`roll.py`).

May import the database-server room (`dbserver`), storage and the base modules; it starts processes
and never imports what runs inside them (entries, engine). Only the CLI imports it.
"""
