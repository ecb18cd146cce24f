"""One module per vendor stand-in; each exposes routers that `standins.app` mounts under its prefix."""
