"""TicketIQ: agent runs that survive the death of their process.

Each package owns one room of the house and imports only the rooms below it; the layers, top down, are
the `[tool.importlinter]` contract in pyproject.toml, which `lint-imports` (and tests/unit/test_layers.py)
checks: cli; operate | standins; entries; console; process; leader | jobs; intake | views; engine;
agents | tools | model | dbserver; storage; auth | values; runtime | metrics; settings | client; errors. A second
contract allows no import circle anywhere. docs/architecture.md, "The map of the code", draws the map.
"""
