"""actions policies (one module per registered name)."""
