"""What a verify report says as a whole (``ProblemsReport``): ``ok`` when it lists no problem, and the dict the CLI
prints as JSON. ``pystore verify`` has two reports, the store's (``pystore.engine.verify``) and the archive's
(``pystore.archive.verify``); both are dataclasses with ``problems`` and ``problems_dropped`` built on this."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ProblemsReport"]


class ProblemsReport:
    """The base of a verify report dataclass with ``problems`` (each a dataclass) and ``problems_dropped``."""

    problems: Sequence[object]
    problems_dropped: int

    @property
    def ok(self) -> bool:
        return not self.problems and not self.problems_dropped

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = dict(self.__dict__)
        d["problems"] = [dict(vars(p)) for p in self.problems]
        d["ok"] = self.ok
        return d
