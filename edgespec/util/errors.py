"""User-facing errors: each becomes one line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations


class EdgespecError(Exception):
    """Anything the user can fix or must know about; the message is one line, no traceback."""

    exit_code = 1


class UsageError(EdgespecError):
    """Bad flags or missing input: exit code 2, like click's own usage errors."""

    exit_code = 2


class SettingError(UsageError):
    """A setting's value is invalid. The core says what is wrong and which setting (`setting`, e.g.
    "draft"); the command line names the flag, so the core never speaks of flags."""

    def __init__(self, message: str, setting: str | None = None):
        super().__init__(message)
        self.setting = setting
