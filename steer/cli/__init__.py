"""The `steer` command line: commands parse options, call the library and print; nothing else lives here.

`app` holds the group, the shared options and `main`; `running` the engine and run-config options;
`judging` the LLM judge options of `steer eval`;
each other module holds one phase's commands.
"""

from steer.cli import evaluation, experiments, exporting, instructing, profiling, serving, training, transfer  # noqa: F401  (registers the commands)
from steer.cli.app import cli, main

__all__ = ["cli", "main"]
