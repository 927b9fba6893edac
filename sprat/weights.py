"""Compressed weights: ``sprat convert --weights fp16|int8`` (MNN ``MNNConvert --fp16`` and
``--weightQuantBits 8``), expanded back to float32 once when a model is loaded.

Which tensors: float32 constants of at least ``MIN_ELEMENTS`` elements that every reader uses
as a weight of a contraction — Conv/ConvTranspose ``W``, MatMul/Gemm ``A`` or ``B``, LSTM/GRU/RNN
``W``/``R``, and the table of a Gather along axis 0 (embeddings). Biases, normalisation
parameters, shapes, indices and every constant an elementwise op reads (anchor grids,
position codes: numbers such as pixel coordinates, where float16's 11-bit mantissa would show)
stay as they are.

How they are stored: as ONNX ops over smaller constants, so the ``.sprat`` format (version 1)
does not change and every reader of it computes the same values; each such node carries the
sprat-internal attribute ``_expand=True`` (``sprat.ir.fused``):

- ``fp16``: ``W = Cast(W16, to=FLOAT)``, ``W16`` the float16 nearest to each weight (round half
  to even; a weight beyond float16's finite range keeps float32 — the tensor is left alone).
  Exact when the source weights were float16 already (MediaPipe's TFLite files, whose
  ``DEQUANTIZE`` the TFLite importer folds to float32 with the same cast).
- ``int8``: ``W = DequantizeLinear(Q, S, axis=a, block_size=B)`` (ONNX DequantizeLinear-21,
  blocked quantization, zero point 0), then a ``Reshape`` for conv weights. Symmetric, one
  float32 scale per block of ``B`` consecutive elements along the reduction axis ``a`` (the
  input-channel x kernel axis of a conv weight flattened to (O, I*kh*kw), K of a MatMul/Gemm
  weight, the input axis of an RNN weight, the embedding axis of a Gather table):
  ``S = max|W_block| / 127``, ``Q = clip(round_half_even(W / S), -127, 127)`` (0 where S is 0),
  so ``|W - Q*S| <= S/2``. ``block=0`` is one block per output channel. The
  last block of an axis may be shorter (``ceil(D/B)`` scales, as DequantizeLinear-21 says).

Sizes: fp16 halves the weight bytes; int8 stores 1 byte + 4/B bytes of scale per weight
(B=64: 0.266 of fp32, B=0: ~0.25). Accuracy: ``accuracy()`` (printed by ``sprat convert``).

Loading (``Interpreter``): ``expand`` folds these nodes once into float32 constants (checked:
dtypes, scale shapes, finite non-negative scales, int8 values in [-127, 127], a ModelFormatError
otherwise), so the kernels see exactly what an fp32 file gives them and pack as usual; with
``spill=True`` the results are written to an unlinked temporary file and mapped, file-backed
like a float32 file's weights (docs/weights.md: memory and cold start).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import mmap
import tempfile
from dataclasses import dataclass, field

import numpy as np

from .errors import ModelFormatError
from .ir.fused import EXPAND, is_compressed
from .ir.graph import MISSING, Graph, Value
from .memory import pages

log = logging.getLogger(__name__)

MODES = ("fp16", "int8")
DEFAULT_BLOCK = 64
MIN_ELEMENTS = 256  # smaller weights stay float32: ~1 KB each, about a node's own bytes
QMAX = 127
MARK = EXPAND
METADATA_KEY = "sprat_weights"
_F16_MAX = float(np.finfo(np.float16).max)
_F32 = np.dtype(np.float32)
ALIGN = 64
SPILL_MIN_BYTES = 1 << 16  # smaller expanded weights stay in memory (a page each at least)


# ---- the int8 scheme ---------------------------------------------------------------------------
def block_size(dim: int, block: int) -> int:
    """The DequantizeLinear ``block_size`` for an axis of ``dim`` elements: ``block`` capped at
    ``dim``, or ``dim`` itself for ``block=0`` (one block per output channel)."""
    return dim if block == 0 else max(1, min(block, dim))


def quantize_int8(w: np.ndarray, axis: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric block-wise int8 quantization of ``w`` (float32, any shape) along ``axis``.

    Returns ``(q, scale)``: ``q`` int8 of ``w``'s shape with values in [-127, 127]; ``scale``
    float32 of ``w``'s shape except ``ceil(D / B)`` along ``axis`` (``B = block_size(D,
    block)``): ``scale = max|w| / 127`` over each block of ``B`` consecutive elements along
    ``axis`` and ``q = clip(rint(w / scale), -127, 127)`` (0 in an all-zero block). Then
    ``dequantize_int8(q, scale, axis, B)`` is ONNX DequantizeLinear-21 of them."""
    w = np.asarray(w, _F32)
    pre, d, post = _split(w.shape, axis)
    b = block_size(d, block)
    nb = -(-d // b)
    padded = np.zeros((pre, nb * b, post), _F32)
    padded[:, :d] = w.reshape(pre, d, post)
    blocks = padded.reshape(pre, nb, b, post)
    scale = (np.abs(blocks).max(axis=2) / np.float32(QMAX)).astype(_F32)
    div = np.where(scale > 0, scale, np.float32(1))[:, :, None, :]
    q = np.clip(np.rint(blocks / div), -QMAX, QMAX).astype(np.int8)
    q = q.reshape(pre, nb * b, post)[:, :d].reshape(w.shape)
    sshape = list(w.shape)
    sshape[axis] = nb
    return np.ascontiguousarray(q), scale.reshape(sshape)


def dequantize_int8(q: np.ndarray, scale: np.ndarray, axis: int, block: int) -> np.ndarray:
    """ONNX DequantizeLinear-21 with zero point 0 and ``block_size=block`` (>= 1): float32
    ``q * scale`` (each scale repeated over its block along ``axis``), written into one new
    array with no full-size temporary. Shapes are not checked here (``expand`` does)."""
    pre, d, post = _split(q.shape, axis)
    nb = scale.shape[axis]
    q3 = q.reshape(pre, d, post)
    s3 = scale.reshape(pre, nb, post)
    out = empty_aligned((pre, d, post))
    full = d // block
    if full:
        np.multiply(q3[:, :full * block].reshape(pre, full, block, post), s3[:, :full, None, :],
                    out=out[:, :full * block].reshape(pre, full, block, post))
    if full * block < d:
        np.multiply(q3[:, full * block:], s3[:, full:full + 1], out=out[:, full * block:])
    return out.reshape(q.shape)


def empty_aligned(shape) -> np.ndarray:
    """An uninitialised float32 array starting on a 64-byte boundary, as weights read from a
    ``.sprat`` file do (``sprat.format``: blobs are 64-byte aligned)."""
    n = math.prod(shape) * _F32.itemsize
    buf = np.empty(n + ALIGN, np.uint8)
    off = -buf.ctypes.data % ALIGN
    return buf[off:off + n].view(_F32).reshape(shape)


def _split(shape, axis: int) -> tuple[int, int, int]:
    return (math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:]))


# ---- which constants are weights ---------------------------------------------------------------
def _weight_role(node, k: int, w: np.ndarray) -> tuple[bool, int] | None:
    """``(flatten to 2-D first, reduction axis)`` when input ``k`` of ``node`` is a weight of a
    contraction, else None."""
    op, a = node.op_type, node.attrs
    if op in ("Conv", "ConvTranspose") and k == 1 and w.ndim >= 3:
        return True, 1
    if op == "MatMul" and k in (0, 1) and w.ndim >= 2:
        return False, w.ndim - 2 if k == 1 else w.ndim - 1
    if op == "Gemm" and k in (0, 1) and w.ndim == 2:
        trans = a.get("transB" if k == 1 else "transA", 0)
        return False, (1 if trans else 0) if k == 1 else (0 if trans else 1)
    if op in ("LSTM", "GRU", "RNN") and k in (1, 2) and w.ndim == 3:
        return False, 2
    if op == "Gather" and k == 0 and w.ndim == 2 and a.get("axis", 0) in (0, -2):
        return False, 1
    return None


@dataclass
class Summary:
    """What ``compress`` did: ``compressed`` tensors and their float32 bytes (``fp32_bytes``)
    against the bytes stored for them (``stored_bytes``: data and scales); ``kept``: float32
    weights left as they were, with the reason."""

    mode: str
    block: int
    compressed: int = 0
    fp32_bytes: int = 0
    stored_bytes: int = 0
    kept: dict[str, str] = field(default_factory=dict)


def compress(graph: Graph, mode: str, block: int = DEFAULT_BLOCK) -> tuple[Graph, Summary]:
    """A copy of ``graph`` whose weights are stored as ``mode`` (``"fp16"`` or ``"int8"``,
    module docstring); ``graph`` itself is not changed. ``block``: int8 block length along
    the reduction axis (``0``: one block per output channel). Only the main graph is
    compressed (subgraph bodies keep theirs).

    Returns ``(graph, Summary)``. Raises ValueError for an unknown mode or a negative block.
    """
    if mode not in MODES:
        raise ValueError(f"unknown weight mode {mode!r}; allowed: {', '.join(MODES)}")
    if not isinstance(block, int) or isinstance(block, bool) or block < 0:
        raise ValueError(f"block must be an int >= 0 (0: per output channel), got {block!r}")
    g = Graph(list(graph.values), list(graph.nodes), list(graph.inputs), list(graph.outputs),
              dict(graph.metadata))
    summary = Summary(mode, block)
    roles: dict[int, set] = {}
    for node in graph.nodes:
        for k, i in enumerate(node.inputs):
            v = graph.values[i] if i != MISSING else None
            if v is None or v.data is None or v.data.dtype != _F32:
                continue
            roles.setdefault(i, set()).add(_weight_role(node, k, v.data))
    outputs = set(graph.outputs)
    for i, found in roles.items():
        v = graph.values[i]
        if v.data.size < MIN_ELEMENTS or None in found or i in outputs:
            continue
        w = np.ascontiguousarray(v.data)
        if not np.isfinite(w).all():
            summary.kept[v.name] = "non-finite values"
            continue
        if mode == "int8" and len(found) == 1:
            (flat, axis), = found
            _int8_nodes(g, i, w, flat, axis, block, summary)
        elif np.abs(w).max() > _F16_MAX:
            summary.kept[v.name] = "values beyond float16's range"
            continue
        else:  # NOTE: int8 for a tensor two contractions read along different axes: fp16
            _fp16_nodes(g, i, w, summary)
        summary.compressed += 1
        summary.fp32_bytes += w.nbytes
    n = len(graph.nodes)
    g.nodes = g.nodes[n:] + g.nodes[:n]  # NOTE: the new nodes first: they read constants only
    g.metadata[METADATA_KEY] = mode if mode == "fp16" else f"int8 block {block or 'channel'}"
    return g, summary


def _fp16_nodes(g: Graph, i: int, w: np.ndarray, summary: Summary) -> None:
    name = g.values[i].name
    w16 = g.add_const(f"{name}/fp16", w.astype(np.float16))
    summary.stored_bytes += g.values[w16].data.nbytes
    g.values[i] = Value(name, _F32, tuple(w.shape), None)
    g.add_node("Cast", [w16], [i], {"to": 1, MARK: True}, g.unique_name(f"{name}/expand"))


def _int8_nodes(g: Graph, i: int, w: np.ndarray, flat: bool, axis: int, block: int,
                summary: Summary) -> list:
    name = g.values[i].name
    x = w.reshape(w.shape[0], -1) if flat else w
    q, scale = quantize_int8(x, axis, block)
    qi = g.add_const(f"{name}/int8", q)
    si = g.add_const(f"{name}/scale", scale)
    summary.stored_bytes += q.nbytes + scale.nbytes
    attrs = {"axis": axis, "block_size": block_size(x.shape[axis], block), MARK: True}
    if flat:
        dq = g.add_value(g.unique_name(f"{name}/dequantized"), _F32, tuple(x.shape))
        g.add_node("DequantizeLinear", [qi, si], [dq], attrs, g.unique_name(f"{name}/expand"))
        shape = g.add_const(f"{name}/shape", np.array(w.shape, np.int64))
        g.add_node("Reshape", [dq, shape], [i], {MARK: True}, g.unique_name(f"{name}/reshape"))
    else:
        g.add_node("DequantizeLinear", [qi, si], [i], attrs, g.unique_name(f"{name}/expand"))
    g.values[i] = Value(name, _F32, tuple(w.shape), None)


# ---- loading -----------------------------------------------------------------------------------
def expand(graph: Graph, spill: bool = False) -> Graph:
    """``graph`` with its compressed weights folded into float32 constants (read-only arrays),
    each computed once; ``graph`` itself when it has none (it is never changed).

    ``spill=True`` (what the Interpreter does): each expanded weight of at least
    ``SPILL_MIN_BYTES`` is written to an unlinked temporary file (``tempfile``'s directory)
    and mapped read-only, so the expanded weights are file-backed pages like a float32 file's
    weights: the planner gives back the pages of the weights kernels pack
    (``sprat.memory.pages``) and the OS can reclaim them; only one weight is held in anonymous
    memory at a time. When the file cannot be written (no space, read-only), the weights stay
    in memory (logged at debug level).

    Raises ModelFormatError naming the weight and the node when a compressed weight is not
    what ``compress`` writes: other dtypes, a scale shape that does not match its data, a
    scale that is negative or not finite, an int8 value of -128, a float16 value that is not
    finite, a result whose shape differs from the declared one.
    """
    if not is_compressed(graph):
        return graph
    values = list(graph.values)
    made: set[int] = set()
    nodes = []
    # NOTE: an output another compressed-weight node reads (a DequantizeLinear before its
    # Reshape) is an intermediate: not spilled, dropped once read
    chained = {i for n in graph.nodes if n.attrs.get(MARK) for i in n.inputs}
    store = _Spill() if spill else None
    for node in graph.nodes:
        if not node.attrs.get(MARK):
            nodes.append(node)
            continue
        where = f"compressed weight node {node.name!r} ({node.op_type})"
        if len(node.outputs) != 1 or any(i == MISSING or values[i].data is None
                                         for i in node.inputs):
            raise ModelFormatError(f"{where}: expected constant inputs and one output")
        out = _expand_node(node, [values[i] for i in node.inputs], made, where)
        if node.op_type != "Reshape":
            pages.release(values[i].data for i in node.inputs)
        o = node.outputs[0]
        v = values[o]
        if v.data is not None or (v.shape is not None and tuple(v.shape) != out.shape) \
                or (v.dtype is not None and v.dtype != _F32):
            raise ModelFormatError(f"{where}: computes float32{list(out.shape)}, but "
                                   f"{v.name!r} is declared {v.dtype}{list(v.shape or ())}"
                                   f"{' with data' if v.data is not None else ''}")
        if store is not None and o not in chained and out.nbytes >= SPILL_MIN_BYTES:
            out = store.put(out)
        out.flags.writeable = False
        values[o] = Value(v.name, _F32, tuple(out.shape), out)
        made.add(o)
        for i in node.inputs:
            if i in made:  # NOTE: the intermediate's bytes now live in ``out`` (or the file)
                values[i] = Value(values[i].name, _F32, values[i].shape, None)
    if store is not None:
        store.close()
    # NOTE: compact drops the compressed data (and its views of the file); it renumbers the
    # nodes in place, so they are copies (``graph`` may be the caller's)
    nodes = [dataclasses.replace(n, inputs=list(n.inputs), outputs=list(n.outputs))
             for n in nodes]
    return Graph(values, nodes, list(graph.inputs), list(graph.outputs),
                 dict(graph.metadata)).compact()


class _Spill:
    """Expanded weights written to an unlinked temporary file, each mapped read-only on its
    own (page-aligned offsets: 64-byte aligned arrays, as a ``.sprat`` file's)."""

    def __init__(self):
        self.file = None
        self.end = 0
        self.failed = False

    def put(self, a: np.ndarray) -> np.ndarray:
        """``a``'s contents as a read-only view of the file, or ``a`` itself when the file
        cannot be written."""
        if self.failed:
            return a
        try:
            if self.file is None:
                self.file = tempfile.TemporaryFile(prefix="sprat-weights-")
            off = -(-self.end // mmap.ALLOCATIONGRANULARITY) * mmap.ALLOCATIONGRANULARITY
            self.file.seek(off)
            self.file.write(memoryview(np.ascontiguousarray(a)).cast("B"))
            self.file.flush()
            mm = mmap.mmap(self.file.fileno(), a.nbytes, offset=off, access=mmap.ACCESS_READ)
        except OSError as e:
            log.debug("expanded weights kept in memory: the temporary file failed: %s", e)
            self.failed = True
            return a
        self.end = off + a.nbytes
        return np.frombuffer(mm, a.dtype, a.size).reshape(a.shape)

    def close(self) -> None:
        """Close the file (the mappings keep it until the last view of it is gone)."""
        if self.file is not None:
            self.file.close()


def _expand_node(node, ins: list[Value], made: set, where: str) -> np.ndarray:
    op = node.op_type
    x = ins[0].data
    if op == "Cast":
        if len(ins) != 1 or x.dtype != np.float16 or node.attrs.get("to") != 1:
            raise ModelFormatError(f"{where}: expected a float16 tensor cast to float32, got "
                                   f"{x.dtype} to type {node.attrs.get('to')}")
        out = _widen(x)
        if not np.isfinite(out).all():  # NOTE: on float32: 3x faster than on float16
            raise ModelFormatError(f"{where}: {ins[0].name!r} holds values that are not "
                                   f"finite (corrupt data)")
        return out
    if op == "DequantizeLinear":
        return _dequantize_checked(node, ins, where)
    if op == "Reshape":
        shape = ins[1].data if len(ins) == 2 else None
        if (node.inputs[0] not in made or shape is None or shape.dtype != np.int64
                or shape.ndim != 1 or (shape < 1).any()
                or math.prod(int(d) for d in shape) != x.size):
            raise ModelFormatError(f"{where}: expected a reshape of a dequantized weight to a "
                                   f"fixed shape of {x.size} elements")
        return x.reshape(tuple(int(d) for d in shape))
    raise ModelFormatError(f"{where}: not a compressed-weight op (Cast, DequantizeLinear, "
                           f"Reshape)")


def _widen(x: np.ndarray) -> np.ndarray:
    """float16 -> float32 (exact), into a 64-byte aligned array: the cpu backend's F16C loop
    when it is built (3x NumPy's cast: 13.5 M weights in ~12 ms instead of ~40), else NumPy."""
    out = empty_aligned(x.shape)
    try:
        from .backends.cpu.compiled import kernels as ck
    except ImportError:  # pragma: no cover - a source tree without the compiled kernels
        np.copyto(out, x)
        return out
    ck.widen_f16(np.ascontiguousarray(x).reshape(-1).view(np.uint16), out.reshape(-1))
    return out


def _dequantize_checked(node, ins: list[Value], where: str) -> np.ndarray:
    if len(ins) != 2:
        raise ModelFormatError(f"{where}: expected 2 inputs (data, scale; zero point 0), got "
                               f"{len(ins)}")
    q, scale = ins[0].data, ins[1].data
    axis, b = node.attrs.get("axis", 1), node.attrs.get("block_size", 0)
    if q.dtype != np.int8 or scale.dtype != _F32 or q.ndim == 0:
        raise ModelFormatError(f"{where}: expected int8 data and float32 scales, got "
                               f"{q.dtype} and {scale.dtype}")
    if not isinstance(axis, int) or not 0 <= axis < q.ndim or not isinstance(b, int) or b < 1:
        raise ModelFormatError(f"{where}: axis {axis!r} / block_size {b!r} do not fit data of "
                               f"shape {list(q.shape)}")
    want = list(q.shape)
    want[axis] = -(-q.shape[axis] // b)
    if list(scale.shape) != want:
        raise ModelFormatError(f"{where}: scale {ins[1].name!r} has shape {list(scale.shape)}, "
                               f"data {list(q.shape)} with block_size {b} needs {want}")
    if not (np.isfinite(scale).all() and (scale >= 0).all()):
        raise ModelFormatError(f"{where}: scale {ins[1].name!r} holds negative or non-finite "
                               f"values (corrupt data)")
    if q.size and q.min() < -QMAX:
        raise ModelFormatError(f"{where}: {ins[0].name!r} holds -128, outside the symmetric "
                               f"range [-127, 127] (corrupt data)")
    return dequantize_int8(q, scale, axis, b)


# ---- accuracy ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Accuracy:
    """One output of a compressed model against the float32 model, worst over the inputs:
    ``cosine`` similarity (1 = same direction) and ``rel_l2`` = ||y - y32|| / ||y32||
    (flattened, in float64), and ``max_abs`` difference."""

    cosine: float
    rel_l2: float
    max_abs: float


def accuracy(reference: Graph, compressed: Graph, feeds: list[dict], num_threads: int = 1
             ) -> dict[str, Accuracy]:
    """Run both graphs on every feed dict of ``feeds`` (same shapes) and compare each output.

    Returns ``{output name: Accuracy}`` (the worst value of each measure over the feeds).
    Raises what ``Session.run`` raises for bad feeds.
    """
    from .runtime.config import ScheduleConfig
    from .runtime.interpreter import Interpreter

    config = ScheduleConfig(num_threads=num_threads)
    sessions = [Interpreter.from_graph(g).create_session(config) for g in (reference, compressed)]
    worst: dict[str, list[float]] = {}
    for feed in feeds:
        ref, got = (s.run(feed) for s in sessions)
        for name, y32 in ref.items():
            cos, rel, mx = _compare(y32, got[name])
            w = worst.setdefault(name, [1.0, 0.0, 0.0])
            w[0], w[1], w[2] = min(w[0], cos), max(w[1], rel), max(w[2], mx)
    return {name: Accuracy(*w) for name, w in worst.items()}


def _compare(y32: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(cosine, rel L2, max |diff|); the first two as ``sprat quantize`` reports them."""
    from .quantize import compare

    if y32.size == 0:
        return 1.0, 0.0, 0.0
    err = compare("", y32, y)
    return err.cosine, err.rel_l2, float(np.abs(y32.astype(np.float64) - y).max())
