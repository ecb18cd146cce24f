"""The leader of the app processes and what it runs: election by the `leader` lease, each process's
liveness mark, the sweeps that claim lapsed leases and dead processes' runs (I5), the cron fires and
the inbox and job hand-backs, and taking up the runs a claim gave this process.

May import intake (the scheduler, the Teams turns), engine, storage and the base modules. Never jobs,
process, console or entries.
"""
