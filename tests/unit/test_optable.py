"""sprat.ir.optable: the op tables loaded one family module at a time."""

from __future__ import annotations

import sys
import types

import pytest

from sprat.ir.optable import FamilyTable


@pytest.fixture
def families(monkeypatch):
    """Three family modules of a throwaway package, registered in sys.modules."""
    pkg = "_optable_case"
    tables = {"a": {"Add": 1, "Sub": 2}, "b": {"Conv": 3}, "c": {"Add": 4}}
    for name, table in tables.items():
        module = types.ModuleType(f"{pkg}.{name}")
        module.OPS = table
        monkeypatch.setitem(sys.modules, f"{pkg}.{name}", module)
    return pkg


def test_lookup_loads_only_the_families_it_needs(families):
    table: dict = {}
    t = FamilyTable(families, ("a", "b"), "OPS", table)
    assert t.get("Sub") == 2 and t.pending == ["b"] and set(table) == {"Add", "Sub"}
    assert t.get("Conv") == 3 and t.pending == []
    assert t.get("Missing") is None


def test_unknown_op_loads_every_family(families):
    t = FamilyTable(families, ("a", "b"), "OPS", {})
    assert t.get("Missing") is None and t.pending == [] and set(t.table) == {"Add", "Sub", "Conv"}
    assert t.load_all() is t.table


def test_op_registered_twice_is_refused(families):
    t = FamilyTable(families, ("a", "c"), "OPS", {})
    assert t.get("Add") == 1  # found in the first family: the second is not loaded yet
    with pytest.raises(AssertionError, match="registered twice"):
        t.load_all()
