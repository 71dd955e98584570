"""The program: `python -m edgespec` and the `edgespec` script (pyproject's entry point) run `main`.

The signal handler goes in before the command line is imported: that import takes a few hundred
milliseconds, and a Ctrl-C in it would otherwise end in a traceback (see edgespec.util.interrupts).
stdout gets its rule for failed writes (edgespec.util.stdout) there too, so click's own --help and
--version follow it.
"""

import sys

from edgespec.util import interrupts, stdout


def main() -> None:
    interrupts.install()
    stdout.install()
    try:
        # imported once the handlers are in: a Ctrl-C or closed stdout while the CLI imports is caught
        from edgespec.cli.main import main as command_line

        command_line()  # exits through SystemExit; each command reports its own signal (error_boundary)
    except KeyboardInterrupt:  # in the import, before a command's error boundary took over
        interrupts.exit_interrupted()
    except stdout.StdoutFailed as e:  # --help or --version, written outside any command
        print(f"edgespec: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except stdout.PipeClosed as e:
        sys.exit(e.exit_code)
    finally:
        interrupts.finishing()


if __name__ == "__main__":
    main()
