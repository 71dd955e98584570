"""One TOML table of models.toml being validated: each value checked for type, choices and a rule,
and every error one line that names the file, the entry and the key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgespec.models.registry import ConfigError

_MISSING = object()
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "a table"}


class Table:
    """One TOML table being validated; every error it raises names the file, the entry and the key."""

    def __init__(self, file: str, where: str, raw: Any, keys: tuple[str, ...], prefix: str = ""):
        self.file, self.where, self.prefix = file, where, prefix
        if not isinstance(raw, dict):
            raise self.error(f"expected a table, got {show(raw)}")
        unknown = [k for k in raw if k not in keys]
        if unknown:
            raise self.error(f'unknown key "{prefix}{unknown[0]}"; valid keys: {", ".join(keys)}')
        self.raw = raw

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.file}: {self.where}: {message}" if self.where else f"{self.file}: {message}")

    def key_error(self, key: str, message: str) -> ConfigError:
        return self.error(f'key "{self.prefix}{key}": {message}')

    def sub(self, key: str, raw: Any, keys: tuple[str, ...]) -> Table:
        """A nested table (`source`, `sampling`); its keys are reported as "source.parts"."""
        return Table(self.file, self.where, raw, keys, prefix=f"{self.prefix}{key}.")

    def get(
        self,
        key: str,
        kind: type,
        default: Any = _MISSING,
        *,
        choices: tuple[str, ...] = (),
        check: Callable[[Any], str | None] | None = None,
    ) -> Any:
        """The value at `key`, checked for type, choices and `check` (which returns a problem or None)."""
        if key not in self.raw:
            if default is _MISSING:
                raise self.error(f'missing key "{self.prefix}{key}"')
            return default
        value = self.raw[key]
        if not _is_a(value, kind):
            raise self.key_error(key, f"expected {_TYPE_NAMES[kind]}, got {show(value)}")
        if kind is float:
            value = float(value)
        if choices and value not in choices:
            raise self.key_error(key, f"{show(value)} is not one of {', '.join(choices)}")
        problem = check(value) if check else None
        if problem:
            raise self.key_error(key, problem)
        return value


def _is_a(value: Any, kind: type) -> bool:
    if isinstance(value, bool):  # TOML's true/false must not pass for numbers (bool is an int in Python)
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def show(value: Any) -> str:
    """A value as it was written in TOML, for error messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return str(value)


def within(low: float, high: float, meaning: str = "") -> Callable[[float], str | None]:
    """The rule of a number the runtime takes only in [low, high] (nan and inf fail it): the error
    gives the range, and `meaning` what the number is."""

    def check(value: float) -> str | None:
        if low <= value <= high:
            return None
        return f"{show(value)} is not in {_number(low)} to {_number(high)}" + (f" ({meaning})" if meaning else "")

    return check


def _number(n: float) -> str:
    return f"{n:,}" if isinstance(n, int) or n.is_integer() and abs(n) < 1e15 else f"{n:g}"
