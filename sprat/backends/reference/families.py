"""The explicit table of reference-kernel families (STYLE §2: registries are explicit tables)."""

from . import (
    ops_attention,
    ops_contrib,
    ops_elementwise,
    ops_extra,
    ops_loss,
    ops_nn,
    ops_quant,
    ops_reduce,
    ops_rnn,
    ops_sample,
    ops_tensor,
    ops_tflite,
)

OPS: dict = {}
for _family in (ops_elementwise, ops_tensor, ops_reduce, ops_nn, ops_rnn, ops_attention,
                ops_loss, ops_quant, ops_sample, ops_extra, ops_contrib, ops_tflite):
    _dup = OPS.keys() & _family.OPS.keys()
    assert not _dup, f"op types registered twice: {_dup}"
    OPS.update(_family.OPS)
