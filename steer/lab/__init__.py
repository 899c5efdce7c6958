"""The lab: the experiment harness behind `steer run`, `steer tune` and `steer report` — run configs,
the runner and its parts, tuning, the run store, tables and reports.

Importing `steer.lab` loads no torch: `steer report` and reading a config stay light.
"""
