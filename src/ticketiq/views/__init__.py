"""What people see of runs, above the run core: the run list and its counts (`run_list.py`), a run's
timeline and its feed (`timeline.py`, `timeline_feed.py`, `timeline_cursor.py`), the event streams and
long waits held open, capped and ended with their credential (`follows.py`), status changes heard as they
happen (`run_events.py`), `RunViews` (`runs.py`), which the API, the console and A2A read through, and the
export of ended runs in the API's shapes (`run_export.py`, over `RunReads`: the database alone).

May import the engine, storage and everything below them; it only reads. Never intake, jobs, leader,
process, console or entries, which read runs through it.
"""
