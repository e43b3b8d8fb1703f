"""The hand-written asyncio implementation; ``pgqueue/_sync`` is generated from it."""
