"""The program: `python -m edgespec` and the `edgespec` script (pyproject's entry point) run `main`.

The Ctrl-C handler goes in before the command line is imported: that import takes a few hundred
milliseconds, and a Ctrl-C in it would otherwise end in a traceback (see edgespec.interrupts).
"""

from edgespec import interrupts


def main() -> None:
    interrupts.install()
    try:
        from edgespec.cli import main as command_line

        command_line()  # exits through SystemExit; each command reports its own Ctrl-C (error_boundary)
    except KeyboardInterrupt:  # in the import, before a command's error boundary took over
        interrupts.exit_interrupted()
    finally:
        interrupts.finishing()


if __name__ == "__main__":
    main()
