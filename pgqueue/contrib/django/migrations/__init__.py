"""The migrations of the table of task results."""
