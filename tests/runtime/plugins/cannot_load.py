"""A program that parses and defines main, but whose import fails on every attempt."""
import dlsched_no_such_module_anywhere  # noqa: F401


def main(ctx):
    pass
