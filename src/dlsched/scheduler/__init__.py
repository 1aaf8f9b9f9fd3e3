"""The scheduler core: extension points, registry, transaction, round loop."""
