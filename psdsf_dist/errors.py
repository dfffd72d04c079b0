"""Typed exceptions and warnings raised by the library."""

from __future__ import annotations


def one_line(text: str) -> str:
    """``text`` with every character that is not printable (line breaks, control, format and
    bidi characters, lone surrogates) written as its escape, e.g. ``\\n`` or ``\\u202e``: what
    a message quotes from its input can neither break it over lines, reorder it on a terminal,
    nor fail to encode."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace")
                   .decode("ascii") if not 0xD800 <= ord(c) <= 0xDFFF else f"\\u{ord(c):04x}"
                   for c in text)


class PsdsfError(Exception):
    """Base class of every error this package raises on purpose."""


class ScenarioError(PsdsfError, ValueError):
    """A scenario (file or Python description) is invalid.

    ``str(err)`` is one line naming the source and the field, e.g.
    ``cluster.yaml: users[2].weight: must be > 0, got -1``.
    """

    def __init__(self, field: str, message: str, source: str | None = None) -> None:
        self.field = field
        self.message = message
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = f"{one_line(self.source)}: " if self.source else ""
        field, message = one_line(self.field), one_line(self.message)
        return f"{where}{field}: {message}" if field else f"{where}{message}"

    def __reduce__(self) -> tuple[type[ScenarioError], tuple[str, str, str | None]]:
        # rebuild from the fields (args holds only the rendered line), so the error survives
        # pickling, e.g. when raised inside a Ray actor
        return (ScenarioError, (self.field, self.message, self.source))

    def with_source(self, source: str) -> ScenarioError:
        return ScenarioError(self.field, self.message, source)


class SolverError(PsdsfError, RuntimeError):
    """A solver could not reach a certified allocation within its budget."""


class ScenarioWarning(UserWarning):
    """Something in a scenario is legal but probably not what was meant."""


class FeasibilityError(PsdsfError, AssertionError):
    """A server adopted a column exceeding one of its capacities (a bug, never bad input)."""
