"""place policies (one module per registered name)."""
