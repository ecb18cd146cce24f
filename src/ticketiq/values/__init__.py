"""Plain values and their rules, pure and below everything that reads them: text Postgres can store
(`storable.py`, I16), when a cron expression fires (`schedules.py`), and a workflow's paths, templates
and conditions (`workflow_values.py`). The agents file is checked with them (agents/) and the engine,
intake and jobs act on them, so they live beneath all of those and import none.

May import only the base modules (errors, settings) and libraries.
"""
