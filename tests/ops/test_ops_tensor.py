"""Tensor-manipulation and reduction ops: sprat's shape functions and reference kernels against
onnxruntime.

Every case builds a one-node ONNX model (tests/opcheck.py) and compares shape, dtype and values
(float: max abs err <= 1e-4 * max(1, max|ref|); integer/bool: exact). Inputs that decide an
output shape (axes, starts, pads, k, ...) are initializers, as sprat needs them known before
running; a few tests check the ShapeError raised when they are not.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper
from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented
from opcheck import check_reference, make_node_model, node_from_model, randn

from sprat.errors import ShapeError
from sprat.ir.shapes import infer

F32, F64, I32, I64 = np.float32, np.float64, np.int32, np.int64
INT64_MAX, INT64_MIN = np.iinfo(I64).max, np.iinfo(I64).min


def check(*args, **kwargs):
    """check_reference, skipping (with onnxruntime's reason) when onnxruntime lacks the kernel."""
    try:
        return check_reference(*args, **kwargs)
    except OrtNotImplemented as e:
        pytest.skip(f"onnxruntime has no kernel: {str(e)[:200]}")


def i64(*v):
    return np.array(v, I64)


def ints(*shape, lo=-20, hi=20, dtype=I64, seed=0):
    return np.random.default_rng(seed).integers(lo, hi, size=shape).astype(dtype)


def infer_only(op, inputs, attrs=None, n_outputs=1, const_inputs=()):
    """sprat's shape inference for a single-node model (no onnxruntime run)."""
    model = make_node_model(op, inputs, attrs, n_outputs, None, const_inputs)
    node, infos, _ = node_from_model(model, {k: v for k, v in inputs.items() if v is not None})
    return infer(node, infos)


# ---- concat / split --------------------------------------------------------------------------
@pytest.mark.parametrize("shapes,axis", [
    ([(2, 3), (4, 3)], 0), ([(2, 3, 4), (2, 1, 4), (2, 5, 4)], 1), ([(2, 3), (2, 2)], -1),
    ([(2, 0, 3), (2, 4, 3)], 1), ([(5,)], 0),
])
@pytest.mark.parametrize("dtype", [F32, I64])
def test_concat(shapes, axis, dtype):
    ins = {f"x{k}": (randn(*s, seed=k) * 10).astype(dtype) for k, s in enumerate(shapes)}
    check("Concat", ins, {"axis": axis})


@pytest.mark.parametrize("shape,axis,split", [
    ((6, 4), 0, [2, 4]), ((3, 7), 1, [1, 0, 6]), ((2, 5, 3), -2, [2, 3]), ((4,), 0, [4]),
])
def test_split_input(shape, axis, split):
    check("Split", {"x": randn(*shape), "split": np.array(split, I64)}, {"axis": axis},
          n_outputs=len(split), const_inputs={"split"})


@pytest.mark.parametrize("dim,n", [(6, 3), (7, 3), (5, 2), (4, 4)])
def test_split_num_outputs(dim, n):
    check("Split", {"x": randn(2, dim)}, {"axis": 1, "num_outputs": n}, n_outputs=n)


def test_split_unknown_sizes_raise():
    with pytest.raises(ShapeError, match="split"):
        infer_only("Split", {"x": randn(4, 2), "split": i64(1, 3)}, {"axis": 0}, n_outputs=2)


# ---- slice -----------------------------------------------------------------------------------
_SLICES = [
    ((1,), (3,), None, None),
    ((-3,), (-1,), None, None),
    ((0, 1), (INT64_MAX, 3), (0, 2), None),
    ((-1,), (INT64_MIN,), (1,), (-1,)),
    ((4,), (0,), (0,), (-2,)),
    ((1, 0), (100, 5), (-1, -3), (2, 3)),
    ((10,), (20,), (0,), None),          # start past the end: empty
    ((-100,), (100,), (2,), None),       # clamped to the whole axis
    ((3,), (1,), (1,), None),            # end before start with step 1: empty
    ((2,), (-100,), (2,), (-1,)),        # negative step down to the first element
    ((INT64_MAX,), (INT64_MIN,), (0,), (-3,)),
]


@pytest.mark.parametrize("starts,ends,axes,steps", _SLICES)
def test_slice(starts, ends, axes, steps):
    ins = {"x": randn(5, 4, 6), "starts": i64(*starts), "ends": i64(*ends),
           "axes": None if axes is None else i64(*axes),
           "steps": None if steps is None else i64(*steps)}
    if axes is None and steps is not None:
        ins["axes"] = None
    check("Slice", ins, const_inputs={k for k, v in ins.items() if k != "x" and v is not None})


def test_slice_int32_params_and_int_data():
    ins = {"x": ints(6, 3), "starts": np.array([5], I32), "ends": np.array([0], I32),
           "axes": np.array([0], I32), "steps": np.array([-2], I32)}
    check("Slice", ins, const_inputs={"starts", "ends", "axes", "steps"})


def test_slice_unknown_starts_raise():
    with pytest.raises(ShapeError, match="Slice starts"):
        infer_only("Slice", {"x": randn(4), "starts": i64(1), "ends": i64(3)},
                   const_inputs={"ends"})


# ---- gather / scatter ------------------------------------------------------------------------
@pytest.mark.parametrize("dshape,ishape,axis", [
    ((5, 4), (3,), 0), ((5, 4), (2, 3), 1), ((3, 4, 5), (), -1), ((3, 4, 5), (2, 2), -2),
    ((6,), (4, 1), 0),
])
@pytest.mark.parametrize("itype", [I64, I32])
def test_gather(dshape, ishape, axis, itype):
    dim = dshape[axis]
    idx = ints(*ishape, lo=-dim, hi=dim, dtype=itype, seed=3)
    check("Gather", {"x": randn(*dshape), "i": idx}, {"axis": axis})


@pytest.mark.parametrize("dshape,ishape,axis", [
    ((4, 5), (4, 5), 0), ((4, 5), (2, 3), 1), ((3, 4, 5), (3, 2, 5), -2), ((6,), (9,), 0),
])
def test_gather_elements(dshape, ishape, axis):
    dim = dshape[axis]
    idx = ints(*ishape, lo=-dim, hi=dim, seed=4)
    check("GatherElements", {"x": ints(*dshape), "i": idx}, {"axis": axis})


@pytest.mark.parametrize("dshape,ishape,batch_dims", [
    ((4, 5), (3, 1), 0), ((4, 5), (3, 2), 0), ((2, 3, 4), (2, 2, 3), 0), ((2, 3, 4), (5, 2), 0),
    ((2, 3, 4), (2, 1), 1), ((2, 3, 4), (2, 5, 2), 1), ((2, 3, 4, 5), (2, 3, 2, 1), 2),
    ((4, 5), (3, 0), 0),
])
def test_gather_nd(dshape, ishape, batch_dims):
    k = ishape[-1]
    dims = np.array(dshape[batch_dims:batch_dims + k])
    rng = np.random.default_rng(5)
    idx = (rng.integers(-(2**30), 2**30, size=ishape) % np.maximum(dims, 1)).astype(I64)
    idx = np.where(rng.random(ishape) < 0.3, idx - dims, idx)  # some negative indices
    check("GatherND", {"x": randn(*dshape), "i": idx.astype(I64)}, {"batch_dims": batch_dims})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dshape,idx", [
    ((4, 3), [[1], [3]]), ((4, 3, 2), [[0, 2], [3, 1], [-1, 0]]), ((5,), [[4], [0], [-2]]),
])
def test_scatter_nd(reduction, dshape, idx):
    idx = np.array(idx, I64)
    ushape = idx.shape[:-1] + dshape[idx.shape[-1]:]
    check("ScatterND", {"x": randn(*dshape), "i": idx, "u": randn(*ushape, seed=1)},
          {"reduction": reduction})


def test_scatter_nd_duplicates_add():
    idx = np.array([[1], [1], [0], [1]], I64)
    check("ScatterND", {"x": ints(3, 2), "i": idx, "u": ints(4, 2, seed=1)},
          {"reduction": "add"})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction, axis):
    x = randn(4, 5)
    ishape = (3, 2)
    dim = x.shape[axis]
    idx = ints(*ishape, lo=-dim, hi=dim, seed=6)
    if reduction == "none":  # duplicates have no defined order without a reduction
        idx = np.stack([np.random.default_rng(c).permutation(dim)[:ishape[axis % 2]]
                        for c in range(ishape[1 - axis % 2])], axis=1 - axis % 2).astype(I64)
    check("ScatterElements", {"x": x, "i": idx, "u": randn(*ishape, seed=2)},
          {"axis": axis, "reduction": reduction})


# ---- reshapes --------------------------------------------------------------------------------
@pytest.mark.parametrize("xshape,shape,allowzero", [
    ((2, 3, 4), (4, 6), 0), ((2, 3, 4), (0, -1), 0), ((2, 3, 4), (-1,), 0),
    ((2, 3, 4), (2, 0, 2, 2), 0), ((6,), (1, 2, 1, 3), 0), ((0, 4), (0, 2, 2), 1),
    ((0, 4), (4, 0), 1), ((2, 3), (0, 0), 0), ((1,), (), 0),
])
def test_reshape(xshape, shape, allowzero):
    check("Reshape", {"x": randn(*xshape), "s": np.array(shape, I64)}, {"allowzero": allowzero},
          const_inputs={"s"})


@pytest.mark.parametrize("shape,perm", [((2, 3, 4), None), ((2, 3, 4), [1, 0, 2]),
                                        ((2, 3, 4, 5), [0, 2, 3, 1]), ((5,), None), ((), None)])
def test_transpose(shape, perm):
    check("Transpose", {"x": randn(*shape)}, {} if perm is None else {"perm": perm})


@pytest.mark.parametrize("shape,axes", [((1, 3, 1, 4), None), ((1, 3, 1, 4), (0,)),
                                        ((1, 3, 1, 4), (-2, 0)), ((1,), (0,)), ((2, 3), None)])
def test_squeeze(shape, axes):
    # NOTE: the axes input is left out rather than given as "": onnxruntime 1.31's Squeeze
    # fails on a trailing empty input name ("Axes input is null").
    ins = {"x": randn(*shape)} if axes is None else {"x": randn(*shape), "axes": i64(*axes)}
    check("Squeeze", ins, const_inputs={"axes"} if axes is not None else ())


def test_squeeze_non_one_dim_raises():
    with pytest.raises(ShapeError, match="dim 3"):
        infer_only("Squeeze", {"x": randn(1, 3), "axes": i64(1)}, const_inputs={"axes"})


@pytest.mark.parametrize("shape,axes", [((3, 4), (0,)), ((3, 4), (-1,)), ((3, 4), (1, 3)),
                                        ((3, 4), (3, 1)), ((), (0, 1)), ((2,), (-1, 0))])
def test_unsqueeze(shape, axes):
    check("Unsqueeze", {"x": randn(*shape), "axes": i64(*axes)}, const_inputs={"axes"})


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), 3),
                                        ((2, 3, 4), -1), ((2, 0, 4), 2), ((5,), 1)])
def test_flatten(shape, axis):
    check("Flatten", {"x": randn(*shape)}, {"axis": axis})


@pytest.mark.parametrize("xshape,shape", [((3, 1), (2, 1, 4)), ((3, 1), (3, 4)), ((2, 3), (3,)),
                                          ((1,), (2, 3)), ((4, 1, 2), (1, 5, 1)), ((), (2, 2))])
def test_expand(xshape, shape):
    check("Expand", {"x": randn(*xshape), "s": np.array(shape, I64)}, const_inputs={"s"})


@pytest.mark.parametrize("shape,reps", [((2, 3), (2, 1)), ((2, 3), (1, 3)), ((4,), (0,)),
                                        ((1, 2, 3), (2, 2, 2))])
def test_tile(shape, reps):
    check("Tile", {"x": ints(*shape), "r": np.array(reps, I64)}, const_inputs={"r"})


# ---- generators ------------------------------------------------------------------------------
@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, I64), (10, 2, -2, I32), (5, 5, 1, I64), (5, 1, 1, I32),
    (0.5, 3.3, 0.7, F32), (1.0, -2.0, -0.25, F64),
])
def test_range(start, limit, delta, dtype):
    ins = {"a": np.array(start, dtype), "b": np.array(limit, dtype), "c": np.array(delta, dtype)}
    check("Range", ins, const_inputs={"a", "b", "c"})


@pytest.mark.parametrize("shape,value", [((2, 3), None), ((4,), np.array([7], I64)),
                                         ((), np.array([1.5], F32)), ((2, 0), None),
                                         ((3, 1), np.array([True]))])
def test_constant_of_shape(shape, value):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    check("ConstantOfShape", {"s": np.array(shape, I64)}, attrs, const_inputs={"s"})


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 10},
                                   {"start": 3, "end": 1}, {"start": -10}])
def test_shape(attrs):
    check("Shape", {"x": randn(2, 3, 4, 5)}, attrs)


def test_size():
    check("Size", {"x": randn(2, 3, 4)})
    check("Size", {"x": randn(0, 3)})


@pytest.mark.parametrize("shape,attrs", [((3, 3), {}), ((4, 2), {"k": 1}), ((2, 5), {"dtype": 7}),
                                         ((3, 4), {"k": -2, "dtype": 1})])
def test_eye_like(shape, attrs):
    check("EyeLike", {"x": randn(*shape)}, attrs)


# ---- pad, trilu, one-hot ---------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [((1, 2, 2, 1), None), ((0, 0, 1, 2, 0, 3), None),
                                       ((2, 1), (-1,)), ((1, 0, 0, 2), (0, 2))])
def test_pad(mode, pads, axes):
    ins = {"x": randn(3, 4, 5), "pads": i64(*pads),
           "value": np.array(1.5, F32) if mode == "constant" else None,
           "axes": None if axes is None else i64(*axes)}
    if len(pads) == 4 and axes is None:
        ins["x"] = randn(4, 5)
    check("Pad", ins, {"mode": mode}, const_inputs={"pads", "axes"} & {
        k for k, v in ins.items() if v is not None})


def test_pad_negative_crops():
    ins = {"x": randn(4, 5), "pads": i64(-1, 2, 1, -2)}
    check("Pad", ins, const_inputs={"pads"})


def test_pad_int_default_value():
    check("Pad", {"x": ints(3, 3), "pads": i64(1, 1, 1, 1)}, const_inputs={"pads"})


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("shape,k", [((4, 4), None), ((3, 5), 1), ((2, 5, 3), -1), ((4, 4), 7),
                                     ((4, 4), -7)])
def test_trilu(upper, shape, k):
    ins = {"x": randn(*shape), "k": None if k is None else i64(k)}
    check("Trilu", ins, {"upper": upper}, const_inputs={"k"} if k is not None else ())


@pytest.mark.parametrize("ishape,axis", [((5,), -1), ((2, 3), 0), ((2, 3), 1), ((2, 3), -2)])
def test_one_hot(ishape, axis):
    ins = {"i": ints(*ishape, lo=-4, hi=6), "d": np.array(5, I64),
           "v": np.array([-1.0, 2.5], F32)}
    check("OneHot", ins, {"axis": axis}, const_inputs={"d"})


def test_one_hot_int_values_float_indices():
    ins = {"i": np.array([[0.0, 2.0], [1.0, 3.0]], F32), "d": np.array([4], I32),
           "v": np.array([0, 9], I64)}
    check("OneHot", ins, const_inputs={"d"})


# ---- data-dependent --------------------------------------------------------------------------
@pytest.mark.parametrize("x", [randn(3, 4) > 0.3, np.array([0, 2, 0, 5], I64),
                               np.zeros((2, 3), F32)])
def test_non_zero(x):
    check("NonZero", {"x": x}, const_inputs={"x"})


def test_non_zero_scalar():
    check("NonZero", {"x": np.array(3.0, F32)}, const_inputs={"x"})


def test_gather_out_of_range_raises():
    from sprat.backends.reference import OPS, load_ops

    load_ops()
    with pytest.raises(IndexError, match="out of bounds"):
        OPS["Gather"](randn(3), i64(3))


def test_non_zero_unknown_raises():
    with pytest.raises(ShapeError, match="data-dependent"):
        infer_only("NonZero", {"x": randn(3)})


@pytest.mark.parametrize("axis,cond", [(None, [1, 0, 1, 1]), (0, [0, 1, 1]), (1, [1, 0, 1, 1, 0]),
                                       (-1, [1, 1])])
def test_compress(axis, cond):
    attrs = {} if axis is None else {"axis": axis}
    check("Compress", {"x": randn(3, 5), "c": np.array(cond, bool)}, attrs, const_inputs={"c"})


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [F32, I64])
def test_top_k(axis, largest, dtype):
    x = ints(4, 6, lo=-3, hi=4, dtype=dtype)  # few distinct values: ties must break by index
    k = 3
    check("TopK", {"x": x, "k": i64(k)}, {"axis": axis, "largest": largest}, n_outputs=2,
          const_inputs={"k"})


def test_top_k_full_and_zero():
    check("TopK", {"x": randn(2, 5), "k": i64(5)}, n_outputs=2, const_inputs={"k"})
    check("TopK", {"x": randn(2, 5), "k": i64(0)}, n_outputs=2, const_inputs={"k"})


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique(sorted_, axis):
    x = np.array([[2, 1, 2], [0, 1, 0], [2, 1, 2], [3, 3, 3]], I64)
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    check("Unique", {"x": x}, attrs, n_outputs=4, const_inputs={"x"})


# ---- reductions ------------------------------------------------------------------------------
_REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
               "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


@pytest.mark.parametrize("op", _REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((0, 2), 0), ((-1,), 0), (None, 1),
                                           (None, 0), ((), 1)])
def test_reduce(op, axes, keepdims):
    x = np.random.default_rng(7).uniform(0.5, 1.5, size=(3, 4, 5)).astype(F32)
    if op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSumExp"):
        x = randn(3, 4, 5)
    ins = {"x": x, "axes": None if axes is None else np.array(axes, I64)}
    check(op, ins, {"keepdims": keepdims}, const_inputs={"axes"} if axes is not None else ())


@pytest.mark.parametrize("op", _REDUCE_OPS)
@pytest.mark.parametrize("axes", [None, ()])
def test_reduce_noop_with_empty_axes(op, axes):
    x = np.random.default_rng(8).uniform(0.5, 1.5, size=(2, 3)).astype(F32)
    ins = {"x": x, "axes": None if axes is None else np.array(axes, I64)}
    check(op, ins, {"noop_with_empty_axes": 1}, const_inputs={"axes"} if axes is not None else ())


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceL1", "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", [I32, I64])
def test_reduce_int(op, dtype):
    x = ints(3, 4, lo=-5, hi=6, dtype=dtype)
    check(op, {"x": x, "axes": i64(1)}, {"keepdims": 0}, const_inputs={"axes"})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"])
def test_reduce_empty_set(op):
    check(op, {"x": randn(3, 0, 2), "axes": i64(1)}, const_inputs={"axes"})


def test_reduce_unknown_axes_raise():
    with pytest.raises(ShapeError, match="axes"):
        infer_only("ReduceSum", {"x": randn(3, 4), "axes": i64(1)})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (-2, 0, 1)])
@pytest.mark.parametrize("dtype", [F32, I32])
def test_arg_reduce(op, axis, keepdims, last, dtype):
    x = ints(4, 5, lo=-2, hi=3, dtype=dtype)  # ties everywhere
    check(op, {"x": x}, {"axis": axis, "keepdims": keepdims, "select_last_index": last})


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [F32, I64, I32])
def test_cumsum(axis, exclusive, reverse, dtype):
    x = (randn(3, 4) * 5).astype(dtype)
    check("CumSum", {"x": x, "axis": np.array(axis, I32)},
          {"exclusive": exclusive, "reverse": reverse})
