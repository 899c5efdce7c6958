"""The package version, in a module of its own so that any module can name it without importing
the package's `__init__` (which imports most of steer)."""

__version__ = "0.1.0"
