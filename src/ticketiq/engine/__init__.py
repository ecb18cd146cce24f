"""The run core: what the entry points ask of a process (`Engine`: submit, stop, decide, give input) and
the driver of each run: its step loop, the sealed checkpoint (I1, I17), the in-doubt mark and a write's
window (I2, I14), settlement and resume (I6, I9), gates and approvals, step keys (I11), run keys, leases
and their renewal (I4), delegation to a child run, and the transcript entries a step writes.

May import agents, tools, model, values, storage, runtime and the base modules (settings, errors,
metrics). Never views, intake, jobs, leader, process, console or entries: they import the engine.
"""
