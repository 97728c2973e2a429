"""The ``cdcflow`` command line."""
