"""Post-training quantisation of an fp32 ONNX model: ``sprat quantize`` (MNN's
``quantized.out``, MindSpore Lite's FULL_QUANT and DYNAMIC_QUANT).

Static (``mode="static"``): calibration rows are run through the fp32 model; the range of every
activation a quantised op reads or writes is estimated by ``method``:

- ``"minmax"``: the smallest and largest value seen (onnxruntime's ``MinMax`` calibrator);
- ``"percentile"``: the ``percentile`` and ``100 - percentile`` points of a 2048-bin histogram
  over the seen range (onnxruntime's ``Percentile``);
- ``"entropy"``: the clipping threshold of ``|x|`` that minimises the KL divergence between
  the histogram and its 128-level quantisation (Migacz, "8-bit Inference with TensorRT", GTC
  2017; onnxruntime's ``Entropy``), the range clipped to ``[-t, t]``.

Activations become uint8, asymmetric (``scale = (hi - lo) / 255`` with 0 inside the range,
``zero_point = round(-lo / scale)``); weights int8, symmetric, per output channel by default
(``scale = max|w| / 127``, 63 with ``reduce_range``); Conv and Gemm biases int32 with
``scale = x_scale * w_scale``. The result is a QDQ model, the format onnxruntime's
``quantize_static`` writes: QuantizeLinear -> DequantizeLinear after each quantised tensor, its
consumers reading the dequantised value, and DequantizeLinear on the int8 weights. sprat converts
it (``output``) and onnxruntime runs it (``onnx_output``). Quantised ops: Conv, Gemm, MatMul.

Dynamic (``mode="dynamic"``, no calibration): MatMul and Gemm with a constant 2-D weight get
int8 per-column weights and quantise their input per run, as onnxruntime's
``quantize_dynamic`` writes it: DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by
``x_scale * w_scale`` (-> Add of the bias).

Accuracy: the rows held out of calibration (``held_out``) run through the fp32 and the
quantised model; ``QuantizeReport`` gives per model output (and, ``verbose``, per quantised
tensor) the cosine similarity and the relative L2 error ``|q - f| / |f|``, as MNN's tool
prints them. Sources: ONNX QuantizeLinear-13 / DequantizeLinear-13 / DynamicQuantizeLinear-11 /
MatMulInteger-10; onnxruntime ``quantization/calibrate.py`` and ``quant_utils.py``.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import ConvertError, InputError

log = logging.getLogger(__name__)

METHODS = ("minmax", "percentile", "entropy")
MODES = ("static", "dynamic")
STATIC_OPS = ("Conv", "Gemm", "MatMul")
HIST_BINS = 2048
ENTROPY_LEVELS = 128
PER_CHANNEL_OPSET = 13  # DequantizeLinear's ``axis`` (per-channel scales) is opset 13


@dataclass
class Error:
    """How far a quantised tensor is from its fp32 value over the held-out rows."""

    name: str
    cosine: float  #: cosine similarity of the flattened tensors (1 = same direction)
    rel_l2: float  #: ``|q - f|_2 / |f|_2``


@dataclass
class QuantizeReport:
    """What ``quantize`` did and how accurate the result is."""

    mode: str
    method: str | None
    quantized: list[str] = field(default_factory=list)  #: nodes quantised
    kept: list[str] = field(default_factory=list)  #: nodes left in fp32, with the reason
    calibration_rows: int = 0
    evaluation_rows: int = 0
    held_out: bool = True  #: False: too few rows, the accuracy is on the calibration rows
    outputs: list[Error] = field(default_factory=list)
    layers: list[Error] = field(default_factory=list)

    def format(self, verbose: bool = False) -> str:
        """The report as text: per output (and per layer with ``verbose``) the cosine
        similarity and relative L2 error."""
        rows = "held-out" if self.held_out else "calibration (no rows were left to hold out)"
        lines = [f"quantized {len(self.quantized)} node(s) ({self.mode}"
                 f"{', ' + self.method if self.method else ''}), kept {len(self.kept)} in fp32; "
                 f"calibration rows {self.calibration_rows}, accuracy on "
                 f"{self.evaluation_rows} {rows} row(s)",
                 f"{'output':<40} {'cosine':>10} {'rel L2':>10}"]
        lines += [f"{e.name[:40]:<40} {e.cosine:>10.6f} {e.rel_l2:>10.2e}" for e in self.outputs]
        if verbose:
            lines.append(f"{'layer (quantized tensor)':<40} {'cosine':>10} {'rel L2':>10}")
            lines += [f"{e.name[:40]:<40} {e.cosine:>10.6f} {e.rel_l2:>10.2e}"
                      for e in self.layers]
            lines += [f"kept in fp32: {k}" for k in self.kept]
        return "\n".join(lines)


def quantize(model, output: str | os.PathLike | None = None, *,
             calibration: str | os.PathLike | Iterable[Mapping[str, np.ndarray]] | None = None,
             mode: str = "static", method: str = "minmax", percentile: float = 99.999,
             per_channel: bool = True, reduce_range: bool = False,
             exclude: Sequence[str] = (), held_out: int | None = None,
             onnx_output: str | os.PathLike | None = None, image=None,
             progress: Callable[[int, int], None] | None = None):
    """Quantise the fp32 ONNX ``model`` (a path or an ``onnx.ModelProto``).

    Args:
        output: where to write the quantised ``.sprat`` (None: not written).
        calibration: the calibration rows: a folder, glob or file of ``.npy``/``.npz``/images/
            Parquet as ``sprat batch`` reads them (``image``: its ``ImageOptions``), or an
            iterable of feed dicts ``{input name: array}``; required for ``"static"``, used
            only for the accuracy report with ``"dynamic"``.
        mode: ``"static"`` or ``"dynamic"`` (see the module docstring).
        method: ``"minmax"``, ``"percentile"`` or ``"entropy"`` (static only).
        percentile: for ``"percentile"``, in (50, 100].
        per_channel: int8 weights with one scale per output channel (a model below opset 13
            is converted to 13 first); False: one scale per weight.
        reduce_range: 7-bit weights (+-63), for int8 kernels that saturate u8 x s8 pairs
            (onnxruntime's advice on CPUs without VNNI).
        exclude: names of nodes to keep in fp32.
        held_out: rows kept out of calibration for the accuracy report (default: a fifth,
            at least one when there are two rows or more).
        onnx_output: also write the quantised model as ONNX (QDQ), which onnxruntime runs.
        progress: called ``progress(done, total)`` as calibration rows are run.

    Returns: ``(onnx.ModelProto of the quantised model, QuantizeReport)``.
    Raises: InputError (bad arguments, unreadable or mismatched calibration rows, naming
    them), ConvertError (not an ONNX model; per-channel weights for a model that does not
    convert to opset 13).
    """
    import onnx

    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}")
    if not 50.0 < percentile <= 100.0:
        raise InputError(f"percentile must be in (50, 100], got {percentile}")
    if mode == "static" and calibration is None:
        raise InputError("static quantization needs calibration rows (calibration=...)")
    src = _constants_as_initializers(_load_onnx(model))
    opset = next((o.version for o in src.opset_import if o.domain in ("", "ai.onnx")), 0)
    if per_channel and opset < PER_CHANNEL_OPSET:
        # NOTE: DequantizeLinear's axis is opset 13: the model is converted to it first (onnx's
        # version converter, as onnxruntime's quantizer does for per-channel QDQ)
        try:
            src = onnx.version_converter.convert_version(src, PER_CHANNEL_OPSET)
        except Exception as e:
            raise ConvertError(f"per-channel weights need opset >= {PER_CHANNEL_OPSET} and the "
                               f"model (opset {opset}) does not convert to it ({e}): quantize "
                               f"with per_channel=False (--per-tensor)") from None
        log.info("converted the model from opset %d to %d for per-channel weights", opset,
                 PER_CHANNEL_OPSET)
    bad = [k for k in exclude if k not in {n.name for n in src.graph.node}]
    if bad:
        raise InputError(f"exclude names no node of the model: {bad}")
    report = QuantizeReport(mode, method if mode == "static" else None)
    if mode == "static":
        src = fold_batchnorm(src)
        plan = _static_plan(src, set(exclude), report)
        watch = sorted(plan.tensors)
    else:
        watch = [n.output[0] for n in src.graph.node
                 if n.op_type in ("MatMul", "Gemm") and n.domain in ("", "ai.onnx")]
    # NOTE: the fp32 model is converted once, with every tensor calibration or the report reads
    # as an output: it gives the input specs, the ranges and the reference of the report
    fp32 = _Runner(src, watch)
    feeds = _calibration_feeds(calibration, fp32.session, image) if calibration is not None \
        else []
    n_eval = held_out if held_out is not None else (max(1, len(feeds) // 5)
                                                    if len(feeds) > 1 else 0)
    if n_eval < 0 or (len(feeds) and n_eval >= len(feeds) and mode == "static"):
        raise InputError(f"held_out={n_eval} leaves no calibration rows of {len(feeds)}")
    calib, evaluation = feeds[:len(feeds) - n_eval], feeds[len(feeds) - n_eval:]
    report.calibration_rows = len(calib) if mode == "static" else 0
    if not evaluation:
        evaluation, report.held_out = calib, False
    report.evaluation_rows = len(evaluation)
    qmax = 63 if reduce_range else 127
    if mode == "static":
        ranges = _calibrate(fp32, watch, calib, method, percentile, progress)
        dst = _static_model(src, plan, ranges, per_channel, qmax)
        probes = sorted(t for t in plan.tensors if t not in plan.graph_inputs)
    else:
        dst, probes = _dynamic_model(src, set(exclude), per_channel, qmax, report)
    if _valid(src):  # NOTE: a model the checker already refuses (e.g. outputs without
        onnx.checker.check_model(dst)  # shapes) cannot be checked after either
    if evaluation:
        _accuracy(fp32, src, dst, probes, evaluation, report)
    if onnx_output is not None:
        onnx.save(dst, os.fspath(onnx_output))
    if output is not None:
        from .converter import convert

        convert(dst, output)
    return dst, report


def _valid(model) -> bool:
    import onnx

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        return False
    return True


# ---- inputs ---------------------------------------------------------------------------------
def _load_onnx(model):
    import onnx

    if isinstance(model, onnx.ModelProto):
        return copy.deepcopy(model)
    path = os.fspath(model)
    if not path.lower().endswith(".onnx"):
        raise ConvertError(f"{path}: sprat quantize takes an fp32 ONNX model (.onnx)")
    try:
        return onnx.load(path)
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ConvertError(f"{path}: cannot read as ONNX: {type(e).__name__}: {e}") from None


def _constants_as_initializers(model):
    """``model`` with its Constant nodes holding a tensor (``value``) made initializers, as
    exporters such as Paddle2ONNX write weights: the quantizer finds weights among them."""
    g = model.graph
    keep = []
    for n in g.node:
        attrs = {a.name: a for a in n.attribute}
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and set(attrs) == {"value"} \
                and len(n.output) == 1:
            t = copy.deepcopy(attrs["value"].t)
            t.name = n.output[0]
            g.initializer.append(t)
        else:
            keep.append(n)
    if len(keep) != len(g.node):
        del g.node[:]
        g.node.extend(keep)
    return model


class _Runner:
    """The model converted by sprat, with ``extra`` tensors added as outputs."""

    def __init__(self, model, extra: Sequence[str]):
        import onnx

        from .converter import convert
        from .runtime.interpreter import Interpreter

        m = copy.deepcopy(model)
        have = {o.name for o in m.graph.output}
        for name in extra:
            if name not in have:
                m.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
        self.session = Interpreter.from_buffer(convert(m)).create_session()

    def run(self, feeds) -> dict[str, np.ndarray]:
        return self.session.run(feeds)


def _calibration_feeds(calibration, session, image) -> list[dict[str, np.ndarray]]:
    """The calibration rows as feed dicts (one row each, batch dim 1)."""
    names = [s.name for s in session.inputs]
    if not isinstance(calibration, (str, os.PathLike)):
        feeds = [dict(f) for f in calibration]
        for k, f in enumerate(feeds):
            if set(f) != set(names):
                raise InputError(f"calibration row {k} has inputs {sorted(f)}; the model "
                                 f"takes {sorted(names)}")
        return feeds
    from .batch import _columns, _probe
    from .batch.inputs import ERROR, ID, Decoder, ImageOptions, find_inputs, make_units, row_specs

    image = image if image is not None else ImageOptions()
    kind, files = find_inputs(calibration)
    units, _ = make_units(kind, files)
    names_only = Decoder(kind, {s.name: ((), s.dtype) for s in session.inputs}, image)
    specs = row_specs(session.inputs, kind, image,
                      probe=lambda: _probe(names_only, units, kind, "fail"))
    decoder = Decoder(kind, specs, image)
    rows = decoder(_columns(units))
    bad = [f"{rid}: {err}" for rid, err in zip(rows[ID], rows[ERROR]) if err]
    if bad:
        raise InputError(f"{len(bad)} calibration row(s) cannot be used: " + "; ".join(bad[:5]))
    return [{n: rows[n][k:k + 1] for n in specs} for k in range(len(rows[ID]))]


def fold_batchnorm(model):
    """``model`` with each inference BatchNormalization that alone reads a Conv's output folded
    into that Conv's weights and bias (``w * g / sqrt(var + eps)``, ``(b - mean) * g /
    sqrt(var + eps) + beta``), as onnxruntime's ``quant_pre_process`` does before quantising:
    the quantised tensor is then the normalised one. Returns a new model."""
    from onnx import numpy_helper

    m = copy.deepcopy(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    outputs = {o.name for o in g.output}
    drop = []
    for bn in g.node:
        if bn.op_type != "BatchNormalization" or len(bn.output) != 1 or \
                any(i not in inits for i in bn.input[1:5]):
            continue
        conv = producer.get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or conv.input[1] not in inits \
                or readers.get(bn.input[0]) != 1 or bn.input[0] in outputs \
                or (len(conv.input) > 2 and conv.input[2] and conv.input[2] not in inits):
            continue
        gamma, beta, mean, var = (numpy_helper.to_array(inits[i]).astype(np.float64)
                                  for i in bn.input[1:5])
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        w = numpy_helper.to_array(inits[conv.input[1]]).astype(np.float64)
        b = (numpy_helper.to_array(inits[conv.input[2]]).astype(np.float64)
             if len(conv.input) > 2 and conv.input[2] else np.zeros(w.shape[0]))
        k = gamma / np.sqrt(var + eps)
        names = _NameSource(m)
        wn, bn_name = names.new(f"{conv.input[1]}_bn"), names.new(f"{conv.name}_bias_bn")
        g.initializer.extend([
            numpy_helper.from_array((w * k.reshape(-1, *[1] * (w.ndim - 1))).astype(np.float32),
                                    wn),
            numpy_helper.from_array(((b - mean) * k + beta).astype(np.float32), bn_name)])
        del conv.input[1:]
        conv.input.extend([wn, bn_name])
        del conv.output[:]
        conv.output.append(bn.output[0])
        drop.append(bn)
    for bn in drop:
        g.node.remove(bn)
    _drop_unused_initializers(g, [])
    return m


# ---- static: what to quantise -----------------------------------------------------------------
@dataclass
class _Plan:
    nodes: list = field(default_factory=list)  #: (node index, weight positions, bias position)
    tensors: set = field(default_factory=set)  #: activations to quantise (names)
    graph_inputs: set = field(default_factory=set)


def _static_plan(model, exclude: set, report: QuantizeReport) -> _Plan:
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    plan = _Plan(graph_inputs={i.name for i in g.input})
    for index, node in enumerate(g.node):
        if node.op_type not in STATIC_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if node.name in exclude:
            report.kept.append(f"{node.name} ({node.op_type}): excluded")
            continue
        why = _static_refusal(node, inits)
        if why:
            report.kept.append(f"{node.name} ({node.op_type}): {why}")
            continue
        weights = [k for k in ((1,) if node.op_type in ("Conv", "Gemm") else (0, 1))
                   if node.input[k] in inits]
        bias = 2 if node.op_type in ("Conv", "Gemm") and len(node.input) > 2 \
            and node.input[2] in inits and _bias_ok(node, inits) else None
        plan.nodes.append((index, weights, bias))
        acts = [node.input[k] for k in range(2) if k not in weights]
        plan.tensors.update(acts)
        plan.tensors.update(o for o in node.output if o)
        report.quantized.append(node.name)
    return plan


def _static_refusal(node, inits) -> str | None:
    from onnx import numpy_helper

    if node.op_type in ("Conv", "Gemm") and node.input[1] not in inits:
        return "its weight is not a constant"
    if node.op_type == "Gemm":
        attrs = {a.name: a for a in node.attribute}
        if "transA" in attrs and attrs["transA"].i:
            return "transA"
        if "alpha" in attrs and attrs["alpha"].f != 1.0:
            return "alpha != 1"
    for k in range(2):
        if node.input[k] in inits and numpy_helper.to_array(inits[node.input[k]]).dtype \
                != np.float32:
            return "its weight is not float32"
    return None


def _bias_ok(node, inits) -> bool:
    from onnx import numpy_helper

    b = numpy_helper.to_array(inits[node.input[2]])
    if b.dtype != np.float32 or b.ndim != 1:
        return False
    if node.op_type == "Gemm":
        beta = next((a.f for a in node.attribute if a.name == "beta"), 1.0)
        return beta == 1.0
    return True


# ---- static: calibration --------------------------------------------------------------------
def _calibrate(runner: _Runner, tensors: list[str], feeds, method: str, percentile: float,
               progress) -> dict[str, tuple[float, float]]:
    """``{tensor: (lo, hi)}`` over the calibration ``feeds`` run by ``runner`` (the fp32 model
    with ``tensors`` as outputs; a second pass of histograms for the percentile and entropy
    methods)."""
    if not feeds:
        raise InputError("no calibration rows")
    passes = 1 if method == "minmax" else 2
    total, done = passes * len(feeds), 0
    lo = dict.fromkeys(tensors, np.inf)
    hi = dict.fromkeys(tensors, -np.inf)
    for f in feeds:
        outs = runner.run(f)
        for t in tensors:
            x = _float_output(outs, t)
            if x.size:
                lo[t], hi[t] = min(lo[t], float(x.min())), max(hi[t], float(x.max()))
        done += 1
        if progress is not None:
            progress(done, total)
    for t in tensors:
        if not np.isfinite(lo[t]):  # NOTE: empty every time: any range does
            lo[t], hi[t] = 0.0, 0.0
    if method == "minmax":
        return {t: (lo[t], hi[t]) for t in tensors}
    hist = {t: np.zeros(HIST_BINS, np.int64) for t in tensors}
    for f in feeds:
        outs = runner.run(f)
        for t in tensors:
            x = _float_output(outs, t)
            if method == "entropy":
                amax = max(abs(lo[t]), abs(hi[t]))
                # NOTE: exact zeros (half of a ReLU's outputs) are left out: zero is exact in
                # any asymmetric range, and their spike in the first bin made the search clip
                # a half-normal at 1.9 sigma
                h, _ = np.histogram(np.abs(x[x != 0]), HIST_BINS, (0.0, amax or 1.0))
            else:
                h, _ = np.histogram(x, HIST_BINS, (lo[t], hi[t] if hi[t] > lo[t] else lo[t] + 1))
            hist[t] += h
        done += 1
        if progress is not None:
            progress(done, total)
    out = {}
    for t in tensors:
        if method == "percentile":
            out[t] = percentile_range(hist[t], lo[t], hi[t], percentile)
        else:
            amax = max(abs(lo[t]), abs(hi[t]))
            th = entropy_threshold(hist[t], amax)
            out[t] = (max(lo[t], -th), min(hi[t], th))
    return out


def _float_output(outs: dict, name: str) -> np.ndarray:
    x = outs[name]
    if x.dtype != np.float32:
        raise InputError(f"tensor {name!r} is {x.dtype}, not float32: it cannot be quantized "
                         f"(exclude its node)")
    return x


def percentile_range(hist: np.ndarray, lo: float, hi: float, p: float) -> tuple[float, float]:
    """``(lo, hi)``: the ``100 - p`` and ``p`` percentile points of ``hist`` (bins evenly
    spread over ``[lo, hi]``), at bin edges."""
    total = hist.sum()
    if total == 0 or hi <= lo:
        return lo, hi
    cdf = np.cumsum(hist) / total
    edges = np.linspace(lo, hi, len(hist) + 1)
    a = int(np.searchsorted(cdf, (100.0 - p) / 100.0, side="left"))
    b = int(np.searchsorted(cdf, p / 100.0, side="left"))
    return float(edges[a]), float(edges[min(b + 1, len(hist))])


def entropy_threshold(hist: np.ndarray, amax: float, levels: int = ENTROPY_LEVELS) -> float:
    """The threshold ``t`` in ``(0, amax]`` of a histogram of ``|x|`` (bins over
    ``[0, amax]``) whose clipped distribution loses least information when quantised to
    ``levels`` levels: minimises KL(P || Q), P the histogram up to ``t`` with the clipped mass
    added to its last bin, Q its ``levels``-level quantisation spread over P's non-empty bins
    (Migacz 2017)."""
    n = len(hist)
    if hist.sum() == 0 or amax <= 0:
        return amax
    width = amax / n
    h = hist.astype(np.float64)
    tail = np.concatenate([np.cumsum(h[::-1])[::-1], [0.0]])  # tail[i] = h[i:].sum()
    best, best_i = np.inf, n
    # NOTE: every few bins (about 256 candidates): the threshold to 0.4 % of the range, at an
    # eighth of the cost of trying each bin
    for i in [*range(levels, n, max(1, (n - levels) // 256)), n]:
        p = h[:i].copy()
        p[-1] += tail[i]
        nz = p > 0
        # NOTE: ``levels`` groups of (almost) equal width over the first i bins
        starts = (np.arange(levels) * i) // levels
        sums = np.add.reduceat(h[:i], starts)
        counts = np.add.reduceat((h[:i] > 0).astype(np.float64), starts)
        group = np.repeat(np.arange(levels), np.diff(np.append(starts, i)))
        q = np.where(h[:i] > 0, (sums / np.maximum(counts, 1))[group], 0.0)
        # NOTE: P's clipped mass sits in a bin Q may leave empty: those bins get a little mass
        q = np.where(nz & (q == 0), 1e-4, q)
        ps, qs = p[nz] / p.sum(), q[nz] / q[nz].sum()
        kl = float(np.sum(ps * np.log(ps / qs)))
        if kl < best:
            best, best_i = kl, i
    return (best_i + 0.5) * width if best_i < n else amax


def activation_qparams(lo: float, hi: float) -> tuple[np.float32, np.uint8]:
    """uint8 asymmetric ``(scale, zero_point)`` of the range ``[lo, hi]`` widened to hold 0
    (onnxruntime ``compute_scale_zp``, ``symmetric=False``)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / 255.0)
    if scale == 0 or not np.isfinite(scale):
        return np.float32(1.0), np.uint8(0)
    zp = np.clip(np.round(-lo / float(scale)), 0, 255)
    return scale, np.uint8(zp)


def weight_qparams(w: np.ndarray, axis: int | None, qmax: int = 127):
    """int8 symmetric ``(w_q, scale)``: per ``axis`` (one scale per index) or per tensor."""
    a = np.abs(w.astype(np.float64))
    amax = a.max(axis=tuple(d for d in range(w.ndim) if d != axis)) if axis is not None \
        else a.max(initial=0.0)
    scale = np.where(amax > 0, amax / qmax, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -qmax, qmax).astype(np.int8)
    return q, scale


# ---- static: the QDQ model ----------------------------------------------------------------------
def _static_model(src, plan: _Plan, ranges, per_channel: bool, qmax: int):
    from onnx import helper, numpy_helper

    m = copy.deepcopy(src)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    names = _NameSource(m)
    qparams = {t: activation_qparams(*ranges[t]) for t in plan.tensors}
    new_inits, consts = [], {}
    after: dict[str, list] = {}
    dq_name = {}
    for t in sorted(plan.tensors):
        s, z = qparams[t]
        sn, zn = names.new(f"{t}_scale"), names.new(f"{t}_zero_point")
        new_inits += [numpy_helper.from_array(np.array(s, np.float32), sn),
                      numpy_helper.from_array(np.array(z, np.uint8), zn)]
        qn, dn = names.new(f"{t}_quantized"), names.new(f"{t}_dequantized")
        after[t] = [helper.make_node("QuantizeLinear", [t, sn, zn], [qn], names.new(f"{t}_Q")),
                    helper.make_node("DequantizeLinear", [qn, sn, zn], [dn], names.new(f"{t}_DQ"))]
        dq_name[t] = dn
    weight_nodes = []
    for index, weights, bias in plan.nodes:
        node = g.node[index]
        w_scale = None
        for k in weights:
            w = numpy_helper.to_array(inits[node.input[k]])
            axis = _weight_axis(node, k, w) if per_channel else None
            key = (node.input[k], axis)
            if key not in consts:
                q, sc = weight_qparams(w, axis, qmax)
                consts[key] = (_dq_const(names, node.input[k], q, sc, np.zeros_like(sc, np.int8),
                                         axis, new_inits, weight_nodes), sc)
            node.input[k], sc = consts[key]
            if k == 1:
                w_scale = sc
        if bias is not None:
            b = numpy_helper.to_array(inits[node.input[bias]]).astype(np.float64)
            sc = (np.float32(qparams[node.input[0]][0]) * w_scale).astype(np.float32)
            per_axis = sc.size > 1
            sc = np.broadcast_to(sc, b.shape).astype(np.float32) if per_axis else sc
            bq = np.clip(np.round(b / np.where(sc > 0, sc, 1.0)), -2**31, 2**31 - 1)
            node.input[bias] = _dq_const(names, node.input[bias], bq.astype(np.int32), sc,
                                         np.zeros(np.shape(sc), np.int32),
                                         0 if per_axis else None, new_inits, weight_nodes)
    # consumers read the dequantised values (graph outputs keep the fp32 tensors)
    for node in g.node:
        for k, name in enumerate(node.input):
            if name in dq_name:
                node.input[k] = dq_name[name]
    nodes = [*weight_nodes]
    for t in sorted(plan.tensors & plan.graph_inputs):
        nodes += after[t]
    for node in g.node:
        nodes.append(node)
        for o in node.output:
            nodes += after.get(o, [])
    del g.node[:]
    g.node.extend(nodes)
    _drop_unused_initializers(g, new_inits)
    return m


def _weight_axis(node, k: int, w: np.ndarray) -> int | None:
    """The output-channel axis of a weight: Conv (M, C, ...) 0; Gemm B 0 with transB else 1;
    MatMul B (..., K, N) its last axis; MatMul A (a constant left operand) per tensor."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return w.ndim - 1 if k == 1 and w.ndim >= 2 else None


def _dq_const(names, base: str, q, scale, zp, axis, new_inits, nodes) -> str:
    """An int initializer ``q`` with its DequantizeLinear (per ``axis`` when ``scale`` has
    more than one element); returns the dequantised tensor's name."""
    from onnx import helper, numpy_helper

    qn, sn, zn = names.new(f"{base}_quantized"), names.new(f"{base}_scale"), \
        names.new(f"{base}_zero_point")
    per_axis = axis is not None
    s = np.asarray(scale, np.float32) if per_axis else np.float32(np.asarray(scale).reshape(-1)[0])
    z = np.asarray(zp) if per_axis else np.asarray(zp).reshape(-1)[0]
    new_inits += [numpy_helper.from_array(np.asarray(q), qn),
                  numpy_helper.from_array(np.asarray(s), sn),
                  numpy_helper.from_array(np.asarray(z), zn)]
    out = names.new(f"{base}_dequantized")
    attrs = {"axis": int(axis)} if per_axis and axis is not None else {}
    nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [out],
                                  names.new(f"{base}_DQ"), **attrs))
    return out


class _NameSource:
    """Names not used by any value or node of the model."""

    def __init__(self, model):
        g = model.graph
        self.used = {v for n in g.node for v in (*n.input, *n.output, n.name)}
        self.used |= {t.name for t in g.initializer} | {i.name for i in g.input}

    def new(self, base: str) -> str:
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def _drop_unused_initializers(g, new_inits) -> None:
    used = {v for n in g.node for v in n.input} | {o.name for o in g.output}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep + [t for t in new_inits if t.name in used])


# ---- dynamic --------------------------------------------------------------------------------
def _dynamic_model(src, exclude: set, per_channel: bool, qmax: int, report: QuantizeReport):
    from onnx import helper, numpy_helper

    m = copy.deepcopy(src)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    names = _NameSource(m)
    new_inits, nodes, probes = [], [], []
    for node in g.node:
        kind = node.op_type if node.domain in ("", "ai.onnx") else None
        if kind not in ("MatMul", "Gemm"):
            nodes.append(node)
            continue
        why = _dynamic_refusal(node, inits, exclude)
        if why:
            report.kept.append(f"{node.name} ({node.op_type}): {why}")
            nodes.append(node)
            continue
        w = numpy_helper.to_array(inits[node.input[1]])
        trans_b = kind == "Gemm" and next((a.i for a in node.attribute if a.name == "transB"),
                                          0)
        kn = w.T if trans_b else w  # (K, N)
        q, s = weight_qparams(np.ascontiguousarray(kn), 1 if per_channel else None, qmax)
        base = node.input[1]
        qn, sn, zn = (names.new(f"{base}_quantized"), names.new(f"{base}_scale"),
                      names.new(f"{base}_zero_point"))
        new_inits += [numpy_helper.from_array(q, qn),
                      numpy_helper.from_array(np.asarray(s, np.float32) if per_channel
                                              else np.float32(s.reshape(-1)[0]), sn),
                      numpy_helper.from_array(np.zeros(q.shape[1], np.int8) if per_channel
                                              else np.int8(0), zn)]
        x = node.input[0]
        y = node.output[0]
        xq, xs, xz = (names.new(f"{x}_quantized"), names.new(f"{x}_scale"),
                      names.new(f"{x}_zero_point"))
        acc, accf, scale = (names.new(f"{y}_MatMulInteger"), names.new(f"{y}_float"),
                            names.new(f"{y}_scale"))
        pre = names.new(f"{y}_nobias") if kind == "Gemm" and len(node.input) > 2 else y
        nodes += [
            helper.make_node("DynamicQuantizeLinear", [x], [xq, xs, xz], names.new(f"{x}_DQL")),
            helper.make_node("MatMulInteger", [xq, qn, xz, zn], [acc],
                             names.new(f"{node.name}_quant")),
            helper.make_node("Cast", [acc], [accf], names.new(f"{y}_cast"),
                             to=helper.np_dtype_to_tensor_dtype(np.dtype(np.float32))),
            helper.make_node("Mul", [xs, sn], [scale], names.new(f"{y}_scale_mul")),
            helper.make_node("Mul", [accf, scale], [pre], names.new(f"{y}_mul"))]
        if pre != y:
            nodes.append(helper.make_node("Add", [pre, node.input[2]], [y],
                                          names.new(f"{y}_bias")))
        report.quantized.append(node.name)
        probes.append(y)
    del g.node[:]
    g.node.extend(nodes)
    _drop_unused_initializers(g, new_inits)
    if not any(o.domain in ("", "ai.onnx") and o.version >= 11 for o in m.opset_import):
        raise ConvertError("dynamic quantization writes DynamicQuantizeLinear (opset 11): the "
                           "model's opset is older")
    return m, probes


def _dynamic_refusal(node, inits, exclude) -> str | None:
    from onnx import numpy_helper

    if node.name in exclude:
        return "excluded"
    if len(node.input) < 2 or node.input[1] not in inits:
        return "its weight is not a constant"
    w = numpy_helper.to_array(inits[node.input[1]])
    if w.dtype != np.float32 or w.ndim != 2:
        return "its weight is not a 2-D float32 constant"
    if node.op_type == "Gemm":
        attrs = {a.name: a for a in node.attribute}
        if attrs.get("transA") is not None and attrs["transA"].i:
            return "transA"
        if attrs.get("alpha") is not None and attrs["alpha"].f != 1.0:
            return "alpha != 1"
        if len(node.input) > 2 and node.input[2] and attrs.get("beta") is not None \
                and attrs["beta"].f != 1.0:
            return "beta != 1"
    return None


# ---- accuracy ---------------------------------------------------------------------------------
def _accuracy(f32: _Runner, src, dst, probes: list[str], feeds, report: QuantizeReport) -> None:
    """Per output of ``src`` and per probe tensor: the quantized ``dst`` against the fp32 run
    ``f32`` (which has the probes among its outputs) on ``feeds``, into ``report``."""
    outputs = [o.name for o in src.graph.output]
    probes = [p for p in probes if p not in outputs]
    q = _Runner(dst, probes)
    got: dict[str, list] = {}
    want: dict[str, list] = {}
    for f in feeds:
        a, b = f32.run(f), q.run(f)
        for name in outputs + probes:
            want.setdefault(name, []).append(np.asarray(a[name], np.float64).ravel())
            got.setdefault(name, []).append(np.asarray(b[name], np.float64).ravel())
    for name in outputs + probes:
        err = compare(name, np.concatenate(want[name]), np.concatenate(got[name]))
        (report.outputs if name in outputs else report.layers).append(err)


def compare(name: str, ref: np.ndarray, got: np.ndarray) -> Error:
    """Cosine similarity and relative L2 error of ``got`` against ``ref`` (flattened)."""
    ref, got = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    nr, ng = np.linalg.norm(ref), np.linalg.norm(got)
    cos = float(ref @ got / (nr * ng)) if nr > 0 and ng > 0 else float(nr == ng)
    rel = float(np.linalg.norm(got - ref) / nr) if nr > 0 else float(np.linalg.norm(got))
    return Error(name, cos, rel)
