"""The libraries the benchmarks compare, each behind the same small interface (see base.py)."""
