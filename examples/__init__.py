"""Runnable example programs (each is also an end-to-end test in tests/test_scenarios.py)."""
