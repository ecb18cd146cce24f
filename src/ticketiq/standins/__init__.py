"""The stand-in model and vendors: a separate app (`ticketiq standins`) speaking the real protocols over
real sockets, which records every write it receives in Postgres (schema `standin`).

May import dbserver, storage and the base modules only. Nothing but the CLI imports it: the engine never
does.
"""
