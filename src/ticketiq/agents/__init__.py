"""The agents file (TICKETIQ_AGENTS): its agents (`catalog.py`) and workflows (`workflows.py`), checked
once at load.

May import values and the base modules (errors, settings). The engine reads an agent from here, so
nothing here imports the engine.
"""
