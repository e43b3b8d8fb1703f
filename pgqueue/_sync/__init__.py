"""The sync implementation, generated from ``pgqueue/_async`` by ``tools/async_to_sync.py``."""
