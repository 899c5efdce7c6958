"""`python -m steer` (also how `accelerate launch -m steer` starts it)."""

from steer.cli import main

main()
