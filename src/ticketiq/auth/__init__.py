"""Who a caller is and what it may do (DESIGN.md, "Who may do what"): pure rules, no I/O. Bearer
tokens, roles and permissions (`tokens.py`), what a Bot Framework token must say (`bot_tokens.py`),
and a signed delivery's HMAC (`webhook_signature.py`). The HTTP side is `entries/auth.py` (and each
signed route); the CLI, the console, intake and the jobs that start runs as a principal ask the same
rules.

May import only the base modules (errors, settings); everything above may import it.
"""
