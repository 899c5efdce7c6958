"""The one exception users see: `SteerError`, a mistake the user can fix, said in one line."""

from __future__ import annotations


class SteerError(ValueError):
    """A mistake the user can fix: the CLI prints it as one line and exits with code 1.

    Messages name parameters in backticks (`top_k`), as a Python caller knows them; the CLI shows
    each as the option of the command that was run (--top-k)."""
