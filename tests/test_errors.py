"""`steer.errors`: the library's mistakes are ValueErrors."""

from __future__ import annotations

from steer.errors import SteerError


def test_steer_error_is_a_value_error() -> None:
    """Python callers can catch the library's mistakes as ValueError."""
    assert issubclass(SteerError, ValueError)
