"""The `edgespec` command: run (pipes), chat (TUI), serve (OpenAI API), bench, models, export, history.

One module per command (run.py, chat.py, serve.py, bench.py, models.py, tune.py, export_vllm.py,
history.py), and the options and error handling they share in common.py. The workflows the bench and
the tuner run live in edgespec/bench/; the command modules parse, show progress, print and write.

Commands import the chat app (Textual), the server (FastAPI, uvicorn) and the bench (jsonschema,
pydantic, gguf) when they run, not when this module loads, so `--help` and a bad flag answer before
those load; each such import says so where it stands.
"""

from __future__ import annotations

import click

from edgespec import __version__
from edgespec.cli.bench import bench
from edgespec.cli.chat import chat
from edgespec.cli.common import OneLineErrorGroup
from edgespec.cli.export_vllm import export
from edgespec.cli.history import history
from edgespec.cli.models import models
from edgespec.cli.run import run
from edgespec.cli.serve import serve


@click.group(cls=OneLineErrorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgespec")
def main() -> None:
    """Fast local chat and coding assistance with lossless speculative decoding."""


main.add_command(run)
main.add_command(bench)
main.add_command(models)
main.add_command(chat)
main.add_command(serve)
main.add_command(export)
main.add_command(history)
