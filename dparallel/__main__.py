"""``python -m dparallel`` runs the command-line interface."""

from dparallel.cli.main import entry

entry()
