"""order policies (one module per registered name)."""
