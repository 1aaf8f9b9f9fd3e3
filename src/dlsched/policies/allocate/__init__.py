"""allocate policies (one module per registered name)."""
