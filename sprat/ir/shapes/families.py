"""The explicit table of shape-function families (STYLE §2: registries are explicit tables)."""

from . import (
    attention,
    contrib,
    elementwise,
    extra,
    loss,
    nn,
    quant,
    reduce,
    rnn,
    sample,
    tensor,
    tflite,
)

SHAPES: dict = {}
for _family in (elementwise, tensor, reduce, nn, rnn, attention, loss, quant, sample, extra,
                contrib, tflite):
    _dup = SHAPES.keys() & _family.SHAPES.keys()
    assert not _dup, f"op types registered twice: {_dup}"
    SHAPES.update(_family.SHAPES)
