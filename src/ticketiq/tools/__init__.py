"""The tools a model may call: the registry, each tool's schema and class (`base.py`), and one adapter
per vendor (executor and, where the vendor allows, reader) that speaks the vendor's API and never
decides whether to resend.

May import storage, values, runtime and the base modules (settings, errors). Never the engine: it decides
what to do with a call from its class.
"""
