"""The ``pgqueue`` management command."""
