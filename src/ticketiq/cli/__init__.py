"""The `ticketiq` command: its parser and every subcommand (`main.py`), the API client the subcommands
share (`client.py`), how they print runs and jobs (`render.py`), `runs`, `jobs`, `db ha` and `demo`.

May import everything: it is the top of the house. Nothing in the package imports it.
"""
