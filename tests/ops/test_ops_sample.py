"""Shape functions and reference kernels of the sample ops against onnxruntime.

GridSample-22 (every mode x padding_mode x align_corners in 2-D, linear/nearest in 3-D, grid
points inside and outside [-1, 1]), AffineGrid-20 (2-D and 3-D, both align_corners), Hardmax-13,
Swish-24, LpNormalization-22, ReverseSequence-10, CenterCropPad-18, Col2Im-18,
CumProd-26 and BitCast-26. Each case builds a single-node ONNX model
and compares sprat's inferred shapes/dtypes and the reference backend's values with onnxruntime
(tests/opcheck.py; tolerance there: max abs err <= 1e-4 * max(1, max|ref|)). One case per op
also runs the full pipeline (convert -> .sprat -> Session on every backend). GridSample cubic +
border is compared with onnx's ReferenceEvaluator instead (onnxruntime deviates from the spec).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx.reference import ReferenceEvaluator
from opcheck import assert_close, check_op, check_reference, make_node_model, randn

from sprat.backends.reference.ops_sample import grid_sample, reverse_sequence
from sprat.errors import ShapeError
from sprat.ir.graph import Node
from sprat.ir.shapes import infer
from sprat.ir.tensorinfo import TensorInfo


def _grid(shape, seed, spread=1.3):
    """Uniform grid positions in [-spread, spread] (points outside [-1, 1] test padding)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-spread, spread, size=shape).astype(np.float32)


# ---- GridSample ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode, padding_mode, align_corners):
    inputs = {"x": randn(2, 3, 5, 6, seed=1), "grid": _grid((2, 4, 7, 2), seed=2)}
    if mode == "cubic" and padding_mode == "border":
        pytest.skip("onnxruntime differs from the spec here; see test_grid_sample_cubic_border")
    check_reference("GridSample", inputs, {"mode": mode, "padding_mode": padding_mode,
                                           "align_corners": align_corners}, opset=22)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_3d(mode, padding_mode, align_corners):
    inputs = {"x": randn(1, 2, 3, 4, 5, seed=3), "grid": _grid((1, 2, 3, 4, 3), seed=4)}
    check_reference("GridSample", inputs, {"mode": mode, "padding_mode": padding_mode,
                                           "align_corners": align_corners}, opset=22)


@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_cubic_border(align_corners):
    # onnxruntime's cubic + border clamps positions outside the image differently from the
    # spec (onnx's reference, whose outputs are the conformance data, clamps them to
    # [0, size - 1] before taking the 4 taps), so this case is checked against onnx's
    # ReferenceEvaluator; the tolerance is the default one of opcheck.
    inputs = {"x": randn(2, 3, 5, 6, seed=1), "grid": _grid((2, 4, 7, 2), seed=2)}
    attrs = {"mode": "cubic", "padding_mode": "border", "align_corners": align_corners}
    model = make_node_model("GridSample", inputs, attrs, opset=22)
    ref = ReferenceEvaluator(model).run(None, inputs)[0]
    got = grid_sample(inputs["x"], inputs["grid"], **attrs)
    assert_close(got, ref)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic", "nearest"])
def test_grid_sample_opset16_names(mode):
    # opset 16 spelled the modes bilinear / bicubic; the kernel accepts both spellings
    inputs = {"x": randn(1, 2, 4, 4, seed=5), "grid": _grid((1, 3, 3, 2), seed=6)}
    check_reference("GridSample", inputs, {"mode": mode}, opset=16)


def test_grid_sample_float64_far_outside():
    # grid points far outside [-1, 1] exercise repeated reflection
    inputs = {"x": randn(1, 1, 3, 4, seed=7, dtype=np.float64),
              "grid": _grid((1, 5, 5, 2), seed=8, spread=6.0).astype(np.float64)}
    check_reference("GridSample", inputs, {"padding_mode": "reflection"}, opset=22)


def test_grid_sample_shape_errors():
    x = TensorInfo((1, 2, 4, 4), np.dtype(np.float32))
    bad_grid = TensorInfo((1, 3, 3, 3), np.dtype(np.float32))
    with pytest.raises(ShapeError, match="grid shape"):
        infer(Node("GridSample", "gs", [0, 1], [2], {}), [x, bad_grid])
    grid = TensorInfo((1, 3, 3, 2), np.dtype(np.float32))
    with pytest.raises(ShapeError, match="mode"):
        infer(Node("GridSample", "gs", [0, 1], [2], {"mode": "area"}), [x, grid])


# ---- AffineGrid ------------------------------------------------------------------------------

# NOTE: a spatial size of 1 with align_corners=1 is left out: the spec does not define it and
# onnxruntime (+1), onnx's reference (-1, as here) and PyTorch (0) all differ.
@pytest.mark.parametrize("size,align_corners", [
    ([2, 3, 5, 4], 0), ([2, 3, 5, 4], 1), ([2, 1, 3, 4, 5], 0), ([2, 1, 3, 4, 5], 1),
    ([1, 1, 1, 3], 0)])
def test_affine_grid(size, align_corners):
    r = len(size) - 2
    inputs = {"theta": randn(size[0], r, r + 1, seed=9),
              "size": np.array(size, dtype=np.int64)}
    check_reference("AffineGrid", inputs, {"align_corners": align_corners}, opset=20,
                    const_inputs={"size"})


def test_affine_grid_unknown_size():
    theta = TensorInfo((2, 2, 3), np.dtype(np.float32))
    size = TensorInfo((4,), np.dtype(np.int64))
    with pytest.raises(ShapeError, match="must be known"):
        infer(Node("AffineGrid", "ag", [0, 1], [2], {}), [theta, size])


# ---- Hardmax / Swish / LpNormalization -------------------------------------------------------

@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_hardmax(axis):
    x = randn(3, 4, 5, seed=10)
    x[0, 0, :2] = 7.0                  # a tie: the first maximum wins
    check_reference("Hardmax", {"x": x}, {"axis": axis}, opset=13)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_swish(alpha, dtype):
    x = randn(4, 7, seed=11, dtype=dtype, scale=4.0)
    check_reference("Swish", {"x": x}, {"alpha": alpha}, opset=24)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_normalization(p, axis):
    x = randn(3, 4, 5, seed=12)
    x[1, :, 2] = 0.0                   # a zero vector along axis 1
    x[2, 3, :] = 0.0                   # and along axis -1
    x[:, 0, 0] = 0.0                   # and along axis 0
    check_reference("LpNormalization", {"x": x}, {"p": p, "axis": axis}, opset=22)


def test_lp_normalization_bad_p():
    with pytest.raises(ShapeError, match="p must be 1 or 2"):
        infer(Node("LpNormalization", "lp", [0], [1], {"p": 3}),
              [TensorInfo((2, 3), np.dtype(np.float32))])


# ---- ReverseSequence -------------------------------------------------------------------------

@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    shape = (5, 4, 3) if time_axis == 0 else (4, 5, 3)
    inputs = {"x": randn(*shape, seed=13),
              "lens": np.array([5, 1, 0, 3], dtype=np.int64)}
    check_reference("ReverseSequence", inputs,
                    {"batch_axis": batch_axis, "time_axis": time_axis}, opset=10)


def test_reverse_sequence_int_and_rank2():
    x = np.arange(12, dtype=np.int32).reshape(4, 3)
    inputs = {"x": x, "lens": np.array([2, 4, 3], dtype=np.int64)}
    out = check_reference("ReverseSequence", inputs, {}, opset=10)[0]
    assert out[:, 0].tolist() == [3, 0, 6, 9]


def test_reverse_sequence_bad_length():
    with pytest.raises(ValueError, match="outside"):
        reverse_sequence(np.zeros((3, 2)), np.array([4, 1]))


# ---- CenterCropPad / Col2Im -----------------------------------------------------------------

@pytest.mark.parametrize("shape,axes", [
    ([3, 5, 4], None),            # crop, pad (odd surplus) and keep
    ([8, 2], [0, 2]),             # pad even / crop even
    ([1, 7], [-1, -2]),           # negative axes, crop odd / pad odd
])
def test_center_crop_pad(shape, axes):
    inputs = {"x": randn(4, 6, 5, seed=14), "shape": np.array(shape, dtype=np.int64)}
    attrs = {} if axes is None else {"axes": axes}
    check_reference("CenterCropPad", inputs, attrs, opset=18, const_inputs={"shape"})


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [1, 5], {}),
    ([5, 6], [2, 3], {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    ([4, 5, 6], [2, 2, 3], {"strides": [1, 2, 2]}),
])
def test_col2im(image, block, attrs):
    r = len(image)
    dil = attrs.get("dilations", [1] * r)
    pads = attrs.get("pads", [0] * (2 * r))
    strides = attrs.get("strides", [1] * r)
    n_pos = int(np.prod([(image[d] + pads[d] + pads[d + r] - dil[d] * (block[d] - 1) - 1)
                         // strides[d] + 1 for d in range(r)]))
    inputs = {"x": randn(2, 3 * int(np.prod(block)), n_pos, seed=15),
              "image_shape": np.array(image, dtype=np.int64),
              "block_shape": np.array(block, dtype=np.int64)}
    check_reference("Col2Im", inputs, attrs, opset=18,
                    const_inputs={"image_shape", "block_shape"})


def test_col2im_bad_length():
    x = TensorInfo((1, 4, 7), np.dtype(np.float32))
    img = TensorInfo((2,), np.dtype(np.int64), np.array([3, 3]))
    blk = TensorInfo((2,), np.dtype(np.int64), np.array([2, 2]))
    with pytest.raises(ShapeError, match="does not fit"):
        infer(Node("Col2Im", "c2i", [0, 1, 2], [3], {}), [x, img, blk])


# ---- CumProd / BitCast ----------------------------------------------------------------------

@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_cum_prod(exclusive, reverse, axis, dtype):
    rng = np.random.default_rng(16)
    x = rng.uniform(0.5, 1.5, size=(3, 5)).astype(dtype) if dtype == np.float32 else (
        rng.integers(-3, 4, size=(3, 5)).astype(dtype))
    inputs = {"x": x, "axis": np.array(axis, dtype=np.int64)}
    check_reference("CumProd", inputs, {"exclusive": exclusive, "reverse": reverse},
                    opset=26, const_inputs={"axis"})


@pytest.mark.parametrize("x,to", [
    (randn(3, 4, seed=17), 6),                                        # float32 -> int32
    (np.array([1, -2, 3], dtype=np.int64), 11),                       # int64 -> float64
    (np.array(2.5, dtype=np.float32), 12),                            # scalar -> uint32
    (np.array([[1, 255], [128, 0]], dtype=np.uint8), 3),              # uint8 -> int8
])
def test_bit_cast(x, to):
    check_reference("BitCast", {"x": x}, {"to": to}, opset=26)


def test_bit_cast_width_mismatch():
    with pytest.raises(ShapeError, match="bit widths differ"):
        infer(Node("BitCast", "bc", [0], [1], {"to": 7}),
              [TensorInfo((2,), np.dtype(np.float32))])


# ---- full pipeline ---------------------------------------------------------------------------

@pytest.mark.parametrize("op,inputs,attrs,opset,const", [
    ("GridSample", {"x": randn(1, 2, 5, 6, seed=20), "grid": _grid((1, 3, 4, 2), seed=21)},
     {"mode": "cubic", "padding_mode": "reflection"}, 22, ()),
    ("AffineGrid", {"theta": randn(2, 2, 3, seed=22),
                    "size": np.array([2, 3, 4, 5], dtype=np.int64)}, {}, 20, ("size",)),
    ("Hardmax", {"x": randn(3, 6, seed=23)}, {"axis": 1}, 13, ()),
    ("Swish", {"x": randn(3, 6, seed=24)}, {"alpha": 0.7}, 24, ()),
    ("LpNormalization", {"x": randn(3, 6, seed=25)}, {"p": 1}, 22, ()),
    ("ReverseSequence", {"x": randn(4, 3, 2, seed=26),
                         "lens": np.array([4, 2, 1], dtype=np.int64)}, {}, 10, ()),
    ("CenterCropPad", {"x": randn(4, 5, 3, seed=27), "shape": np.array([6, 2], dtype=np.int64)},
     {"axes": [0, 1]}, 18, ("shape",)),
    ("Col2Im", {"x": randn(1, 8, 9, seed=28), "image_shape": np.array([4, 4], dtype=np.int64),
                "block_shape": np.array([2, 2], dtype=np.int64)}, {}, 18,
     ("image_shape", "block_shape")),
    ("CumProd", {"x": randn(3, 4, seed=29), "axis": np.array(1, dtype=np.int64)},
     {"reverse": 1}, 26, ("axis",)),
    ("BitCast", {"x": randn(3, 4, seed=30)}, {"to": 6}, 26, ()),
])
def test_pipeline(op, inputs, attrs, opset, const):
    check_op(op, inputs, attrs, opset=opset, const_inputs=const)
