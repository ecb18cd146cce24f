"""The HTTP face of every entry point: the API's routes, bearer auth (`auth.py`), Idempotency-Key
(`idempotency.py`), A2A, Teams, webhooks, ticket events, co-pilot, jobs, workflows and schedules. A
handler checks its request and calls the engine or intake; it names no SQL.

May import everything below it: console (mounted by `api.py`), process, jobs, leader, intake, views,
engine, agents, tools, model, dbserver, auth, values, storage, runtime and the base modules. Only the CLI
imports it.
"""
