"""The ``vpol`` command line: check, apply, test, generate and run."""
