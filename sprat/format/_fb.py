"""The flatc-generated schema code, importable as ``sprat.format._fb``.

flatc 2.0.8 writes absolute imports named after the schema namespace (``from sprat_fb.Tensor
import Tensor``) inside the generated accessors. They resolve to the package under
``_generated/`` because it is registered in ``sys.modules`` as ``sprat_fb`` here.
"""

from __future__ import annotations

import sys

from ._generated import sprat_fb
from ._generated.sprat_fb import (
    Attribute,
    Graph,
    KeyValue,
    Model,
    Node,
    Tensor,
)
from ._generated.sprat_fb import AttrKind as _attr_kind
from ._generated.sprat_fb import ByteOrder as _byte_order
from ._generated.sprat_fb import DataLocation as _data_location

# NOTE: aliasing (rather than a sys.path entry) keeps one copy of each generated module.
sys.modules.setdefault("sprat_fb", sprat_fb)
for _mod in (Attribute, Graph, KeyValue, Model, Node, Tensor, _attr_kind, _byte_order,
             _data_location):
    sys.modules.setdefault("sprat_fb." + _mod.__name__.rsplit(".", 1)[1], _mod)

AttrKind = _attr_kind.AttrKind
ByteOrder = _byte_order.ByteOrder
DataLocation = _data_location.DataLocation
