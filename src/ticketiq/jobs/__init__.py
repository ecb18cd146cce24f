"""Background jobs: the job worker, the kinds it runs, and their fenced statements (issue 10).

May import intake, engine, agents, tools, model, auth, values, storage and the base modules. Never
leader, process, console, entries or the CLI (`ticketiq jobs watch` is `cli/jobs.py`, above).
"""
