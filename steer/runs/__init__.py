"""Runs: the application layer — run configs, the rewrite service (plain, steered or reranked, with
provenance and resume), the output store, the runner behind `steer run`/`tune`, Ray, reports, records.

Importing `steer.runs` loads no torch: `steer report` and the record readers stay light.
"""
