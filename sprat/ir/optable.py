"""An op table split over family modules, each imported the first time a lookup needs it.

The reference kernels and the shape functions are both ``{op type: function}`` tables spread over
a dozen family modules (STYLE §2: registries are explicit tables, here the tuple of module
names). A session's first run looks up only the op types of its model, and most of those live
in the first families (elementwise, tensor, nn): importing the other modules (attention, loss,
quant, contrib, TFLite, ...) would cost a few milliseconds of every cold start for nothing.
"""

from __future__ import annotations

import importlib


class FamilyTable:
    """``{op type: function}`` merged from ``package``'s ``modules`` (in order), each ending
    with a dict named ``attr``. ``table`` is the merged dict (filled as families load); an op
    type registered by two families raises AssertionError when the second one loads."""

    def __init__(self, package: str, modules: tuple[str, ...], attr: str, table: dict):
        self.package = package
        self.pending = list(modules)
        self.attr = attr
        self.table = table

    def _load_next(self) -> None:
        module = importlib.import_module(f"{self.package}.{self.pending.pop(0)}")
        family = getattr(module, self.attr)
        dup = self.table.keys() & family.keys()
        assert not dup, f"op types registered twice: {dup}"
        self.table.update(family)

    def get(self, op_type: str):
        """The function of ``op_type``, or None when no family has it (then all are loaded)."""
        fn = self.table.get(op_type)
        while fn is None and self.pending:
            self._load_next()
            fn = self.table.get(op_type)
        return fn

    def load_all(self) -> dict:
        """Every family loaded: the whole table."""
        while self.pending:
            self._load_next()
        return self.table
