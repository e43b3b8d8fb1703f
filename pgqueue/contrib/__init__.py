"""Integrations with web frameworks, each an extra: ``django``, ``starlette``, ``flask``.

Each module imports its framework (``fastapi`` uses the Starlette one); the rest of pgqueue
never does.
"""
