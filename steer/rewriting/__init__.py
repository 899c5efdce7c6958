"""The product: the rewrite service behind `steer transfer`, `steer serve` and `steer.rewrite` — one
opened profile, the recipe choice, the service, `-o FILE` with resume, records, and Ray.

Importing `steer.rewrite` loads no torch: reading records and partial files stays light.
"""
