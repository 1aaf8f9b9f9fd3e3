"""The dlsched command line."""
