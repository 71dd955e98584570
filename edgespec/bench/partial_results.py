"""A long measurement that Ctrl-C (or SIGTERM, SIGHUP: `util/interrupts.py`) stops part way still
reports what it finished: a bench of many prompts, a tune of many layouts."""

from __future__ import annotations

from collections.abc import Callable


def until_interrupted(work: Callable[[], object], close: Callable[[], None]) -> bool:
    """Run `work`, then `close` whatever happens; True when an interrupt stopped `work` part way.
    What `work` finished stays where it put it, for the caller to report (and write) before it
    raises KeyboardInterrupt again, so the command still ends as an interrupted one. An interrupt
    during `close` is not caught: the command ends at once, as it would without this."""
    try:
        work()
    except KeyboardInterrupt:
        return True
    finally:
        close()
    return False
