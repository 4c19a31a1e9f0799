"""The one exception type of a run that cannot start as asked.

A bad key, value or combination, a missing or malformed data set, a run directory that holds another run:
each raises :class:`UsageError` before any work is done, with one line naming what is wrong. The command line
prints that line and exits with status 2; any other exception is a bug and keeps its traceback.
"""


class UsageError(ValueError):
    """A run asked for something it cannot do (a ``ValueError``: ``except ValueError`` catches it too)."""
