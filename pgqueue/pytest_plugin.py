"""The pytest plugin of :mod:`pgqueue.testing` (being built: issue 17)."""
