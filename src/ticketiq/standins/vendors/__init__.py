"""One module per vendor stand-in; each exposes routers that `standins.app` mounts under its prefix.

May import the rest of standins, storage and the base modules, as standins does."""
