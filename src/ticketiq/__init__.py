"""TicketIQ: agent runs that survive the death of their process.

Each package owns one room of the house and imports only the rooms below it; the layers, top down, are
the `[tool.importlinter]` contract in pyproject.toml, which `lint-imports` (and tests/unit/test_layers.py)
checks: the programs (cli, demo, cluster, cli_*, standins), entries, console, process, leader | jobs,
intake, engine, agents | tools | model, storage, auth | values, then the base modules (background,
metrics, stall, json_depth, user_agent; settings; errors). README.md, "Architecture", draws the map.
"""
