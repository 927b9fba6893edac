"""The broad benchmark suite: models of the families users run, built with ``onnx.helper``.

No kernel of sprat is tuned on these (issue 12, part 1): they are the check that a speed-up
found on the zoo's models carries to families of shapes. Each builder returns
``(onnx.ModelProto, feeds)`` with seeded random weights in the op patterns PyTorch's exporter
emits at opset 17 (Conv + BatchNormalization + activation, Sigmoid * Mul for SiLU, HardSwish,
LayerNormalization, MatMul + Add, Erf-GELU, Softmax, GRU/LSTM). Weights are He-initialised and
BatchNormalization keeps unit statistics with scales below one, so activations stay in range
through deep residual stacks (``tests/models/test_suite_models.py`` checks the outputs are
finite and not flat).

``size`` scales the input's spatial size (1.0: the size the real model uses); the tests use
small sizes, the benchmark the real ones. Architectures: ResNet-18 (He et al., 2016, basic
blocks), MobileNetV2 (Sandler et al., 2018), MobileNetV3-Small (Howard et al., 2019: SE,
hard-swish), EfficientNet-B0 (Tan & Le, 2019: MBConv, SiLU, SE), ViT-Ti/16 (Dosovitskiy et al.,
2021, pre-norm), a YOLOv8-n style backbone and neck (C2f, SPPF, upsample + concat), a
GRU and an LSTM audio model over log-mel frames, a 1-D conv stack (a keyword-spotting CNN), and
a BERT encoder at MiniLM size (hidden 384, 6 layers).
"""

from __future__ import annotations

import math

import numpy as np


class _Builder:
    """A small graph builder: unique names, seeded weights, one op per call."""

    def __init__(self, seed: int):
        from onnx import helper

        self.h = helper
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr, base: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def op(self, op: str, ins: list[str], n_out: int = 1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(self.h.make_node(op, ins, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    # ---- layers ------------------------------------------------------------------------------
    def conv(self, x, cin, cout, k=3, stride=1, group=1, bias=False, dims=2, pad=None):
        fan_in = cin // group * k ** dims
        w = self.rng.standard_normal((cout, cin // group, *([k] * dims))) * math.sqrt(2 / fan_in)
        ins = [x, self.const(w.astype(np.float32), "w")]
        if bias:
            ins.append(self.const(np.zeros(cout, np.float32), "b"))
        return self.op("Conv", ins, kernel_shape=[k] * dims, strides=[stride] * dims,
                       pads=[k // 2 if pad is None else pad] * (2 * dims), group=group)

    def bn(self, x, c, gain=0.7):
        r = self.rng
        return self.op("BatchNormalization", [
            x, self.const((gain * (0.8 + 0.4 * r.random(c))).astype(np.float32), "s"),
            self.const((0.05 * r.standard_normal(c)).astype(np.float32), "beta"),
            self.const((0.05 * r.standard_normal(c)).astype(np.float32), "mean"),
            self.const((0.9 + 0.2 * r.random(c)).astype(np.float32), "var")])

    def act(self, x, kind):
        if kind == "relu":
            return self.op("Relu", [x])
        if kind == "relu6":
            return self.op("Clip", [x, self.const(np.float32(0)), self.const(np.float32(6))])
        if kind == "hswish":
            return self.op("HardSwish", [x])
        if kind == "silu":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        assert kind is None, kind
        return x

    def cba(self, x, cin, cout, k=3, stride=1, group=1, act="relu", dims=2):
        """Conv + BatchNormalization + activation."""
        return self.act(self.bn(self.conv(x, cin, cout, k, stride, group, dims=dims), cout), act)

    def se(self, x, c, squeeze, gate="sigmoid", inner="relu"):
        """Squeeze-and-excitation: global pool, two 1x1 convs, gate, scale."""
        s = self.op("GlobalAveragePool", [x])
        s = self.act(self.conv(s, c, squeeze, 1, bias=True), inner)
        s = self.conv(s, squeeze, c, 1, bias=True)
        s = self.op("HardSigmoid", [s], alpha=1 / 6, beta=0.5) if gate == "hsigmoid" \
            else self.op("Sigmoid", [s])
        return self.op("Mul", [x, s])

    def linear(self, x, din, dout, bias=True):
        w = (self.rng.standard_normal((din, dout)) * math.sqrt(1 / din)).astype(np.float32)
        y = self.op("MatMul", [x, self.const(w, "w")])
        if bias:
            y = self.op("Add", [y, self.const(np.zeros(dout, np.float32), "b")])
        return y

    def model(self, inputs, outputs):
        from onnx import TensorProto

        g = self.h.make_graph(
            self.nodes, "suite",
            [self.h.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
            [self.h.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
            self.inits)
        m = self.h.make_model(g, opset_imports=[self.h.make_opsetid("", 17)],
                              producer_name="sprat.testing.families")
        m.ir_version = 8
        return m


def _image(size: float, base: int = 224, ch: int = 3, seed: int = 0):
    hw = max(32, int(round(base * size / 32)) * 32)
    x = np.random.default_rng(seed).standard_normal((1, ch, hw, hw)).astype(np.float32)
    return [("x", list(x.shape))], {"x": x}


def _head(b: _Builder, x, c, classes=1000):
    p = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    return b.op("Gemm", [p, b.const((b.rng.standard_normal((classes, c)) * math.sqrt(1 / c))
                                    .astype(np.float32), "fc"),
                         b.const(np.zeros(classes, np.float32), "fcb")], transB=1)


def resnet18(size: float = 1.0):
    b = _Builder(1)
    inputs, feeds = _image(size)
    x = b.cba("x", 3, 64, 7, 2)
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for blk in range(2):
            s = stride if blk == 0 else 1
            y = b.cba(x, cin, cout, 3, s)
            y = b.bn(b.conv(y, cout, cout, 3), cout, gain=0.3)
            short = x if (s == 1 and cin == cout) else b.bn(b.conv(x, cin, cout, 1, s), cout)
            x = b.op("Relu", [b.op("Add", [y, short])])
            cin = cout
    return b.model(inputs, [_head(b, x, 512)]), feeds


def _inverted_residual(b, x, cin, cout, mid, k, stride, act, se=False, se_gate="sigmoid"):
    """1x1 expansion to ``mid`` channels (none when ``mid == cin``), depthwise ``k`` x ``k``,
    optional squeeze-excite, linear 1x1 projection, residual add when the shape allows."""
    y = b.cba(x, cin, mid, 1, act=act) if mid != cin else x
    y = b.cba(y, mid, mid, k, stride, group=mid, act=act)
    if se:
        y = b.se(y, mid, max(8, mid // 4), gate=se_gate,
                 inner="relu" if se_gate == "hsigmoid" else "silu")
    y = b.bn(b.conv(y, mid, cout, 1), cout, gain=0.3)
    return b.op("Add", [x, y]) if stride == 1 and cin == cout else y


def _stages(b, x, cin, stages, act, se=False):
    """Inverted-residual stages ``(expansion t, kernel k, stride s, out c, repeats n)``, as the
    MobileNetV2 and EfficientNet papers tabulate them. Returns ``(x, channels)``."""
    for t, k, s, c, n in stages:
        for i in range(n):
            x = _inverted_residual(b, x, cin, c, cin * t, k, s if i == 0 else 1, act, se=se)
            cin = c
    return x, cin


def mobilenet_v2(size: float = 1.0):
    b = _Builder(2)
    inputs, feeds = _image(size)
    x = b.cba("x", 3, 32, 3, 2, act="relu6")
    x, cin = _stages(b, x, 32, ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 3, 2, 32, 3),
                                (6, 3, 2, 64, 4), (6, 3, 1, 96, 3), (6, 3, 2, 160, 3),
                                (6, 3, 1, 320, 1)), "relu6")
    x = b.cba(x, cin, 1280, 1, act="relu6")
    return b.model(inputs, [_head(b, x, 1280)]), feeds


def mobilenet_v3_small(size: float = 1.0):
    b = _Builder(3)
    inputs, feeds = _image(size)
    x = b.cba("x", 3, 16, 3, 2, act="hswish")
    cin = 16
    # (kernel, expanded, out, SE, activation, stride) of MobileNetV3-Small
    for k, exp, c, se, act, s in ((3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2),
                                  (3, 88, 24, False, "relu", 1), (5, 96, 40, True, "hswish", 2),
                                  (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
                                  (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1),
                                  (5, 288, 96, True, "hswish", 2), (5, 576, 96, True, "hswish", 1),
                                  (5, 576, 96, True, "hswish", 1)):
        x = _inverted_residual(b, x, cin, c, exp, k, s, act, se=se, se_gate="hsigmoid")
        cin = c
    x = b.cba(x, cin, 576, 1, act="hswish")
    return b.model(inputs, [_head(b, x, 576)]), feeds


def efficientnet_b0(size: float = 1.0):
    b = _Builder(4)
    inputs, feeds = _image(size)
    x = b.cba("x", 3, 32, 3, 2, act="silu")
    x, cin = _stages(b, x, 32, ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2),
                                (6, 3, 2, 80, 3), (6, 5, 1, 112, 3), (6, 5, 2, 192, 4),
                                (6, 3, 1, 320, 1)), "silu", se=True)
    x = b.cba(x, cin, 1280, 1, act="silu")
    return b.model(inputs, [_head(b, x, 1280)]), feeds


def vit_tiny(size: float = 1.0, depth: int = 12, dim: int = 192, heads: int = 3):
    b = _Builder(5)
    inputs, feeds = _image(size)
    hw = feeds["x"].shape[-1]
    tokens = (hw // 16) ** 2
    x = b.conv("x", 3, dim, 16, 16, bias=True, pad=0)
    x = b.op("Transpose", [b.op("Reshape", [x, b.const(np.array([1, dim, tokens], np.int64))])],
             perm=[0, 2, 1])
    cls = b.const((0.02 * b.rng.standard_normal((1, 1, dim))).astype(np.float32), "cls")
    x = b.op("Concat", [cls, x], axis=1)
    x = b.op("Add", [x, b.const((0.02 * b.rng.standard_normal((1, tokens + 1, dim)))
                                .astype(np.float32), "pos")])
    dh = dim // heads

    def ln(v):
        return b.op("LayerNormalization", [v, b.const(np.ones(dim, np.float32)),
                                           b.const(np.zeros(dim, np.float32))], axis=-1,
                    epsilon=1e-6)

    def split_heads(v):
        v = b.op("Reshape", [v, b.const(np.array([1, tokens + 1, heads, dh], np.int64))])
        return b.op("Transpose", [v], perm=[0, 2, 1, 3])

    for _ in range(depth):
        y = ln(x)
        q, k, v = (split_heads(b.linear(y, dim, dim)) for _ in range(3))
        a = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
        a = b.op("Softmax", [b.op("Mul", [a, b.const(np.float32(1 / math.sqrt(dh)))])], axis=-1)
        o = b.op("Transpose", [b.op("MatMul", [a, v])], perm=[0, 2, 1, 3])
        o = b.op("Reshape", [o, b.const(np.array([1, tokens + 1, dim], np.int64))])
        x = b.op("Add", [x, b.linear(o, dim, dim)])
        y = b.linear(ln(x), dim, 4 * dim)
        y = b.op("Mul", [b.op("Mul", [y, b.op("Add", [b.op("Erf", [
            b.op("Div", [y, b.const(np.float32(math.sqrt(2)))])]), b.const(np.float32(1))])]),
            b.const(np.float32(0.5))])
        x = b.op("Add", [x, b.linear(y, 4 * dim, dim)])
    x = ln(x)
    first = b.op("Gather", [x, b.const(np.array(0, np.int64))], axis=1)
    return b.model(inputs, [b.linear(first, dim, 1000)]), feeds


def yolo_c2f_neck(size: float = 1.0, w: int = 16):
    """A YOLOv8-n style backbone (Conv, C2f) with SPPF and an FPN/PAN neck, SiLU, at 416."""
    b = _Builder(6)
    inputs, feeds = _image(size, base=416)

    def c2f(x, cin, cout, n, shortcut):
        y = b.cba(x, cin, cout, 1, act="silu")
        half = cout // 2
        parts = b.op("Split", [y, b.const(np.array([half, half], np.int64))], n_out=2, axis=1)
        outs = list(parts)
        cur = parts[1]
        for _ in range(n):
            z = b.cba(b.cba(cur, half, half, 3, act="silu"), half, half, 3, act="silu")
            cur = b.op("Add", [cur, z]) if shortcut else z
            outs.append(cur)
        return b.cba(b.op("Concat", outs, axis=1), (2 + n) * half, cout, 1, act="silu")

    def sppf(x, c):
        y = b.cba(x, c, c // 2, 1, act="silu")
        pools = [y]
        for _ in range(3):
            pools.append(b.op("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1],
                              pads=[2, 2, 2, 2]))
        return b.cba(b.op("Concat", pools, axis=1), 2 * c, c, 1, act="silu")

    def up(x):
        return b.op("Resize", [x, "", b.const(np.array([1, 1, 2, 2], np.float32))],
                    mode="nearest")

    x = b.cba("x", 3, w, 3, 2, act="silu")
    x = b.cba(x, w, 2 * w, 3, 2, act="silu")
    x = c2f(x, 2 * w, 2 * w, 1, True)
    x = b.cba(x, 2 * w, 4 * w, 3, 2, act="silu")
    p3 = c2f(x, 4 * w, 4 * w, 2, True)
    x = b.cba(p3, 4 * w, 8 * w, 3, 2, act="silu")
    p4 = c2f(x, 8 * w, 8 * w, 2, True)
    x = b.cba(p4, 8 * w, 16 * w, 3, 2, act="silu")
    p5 = sppf(c2f(x, 16 * w, 16 * w, 1, True), 16 * w)
    n4 = c2f(b.op("Concat", [up(p5), p4], axis=1), 24 * w, 8 * w, 1, False)
    n3 = c2f(b.op("Concat", [up(n4), p3], axis=1), 12 * w, 4 * w, 1, False)
    d4 = c2f(b.op("Concat", [b.cba(n3, 4 * w, 4 * w, 3, 2, act="silu"), n4], axis=1),
             12 * w, 8 * w, 1, False)
    d5 = c2f(b.op("Concat", [b.cba(d4, 8 * w, 8 * w, 3, 2, act="silu"), p5], axis=1),
             24 * w, 16 * w, 1, False)
    return b.model(inputs, [n3, d4, d5]), feeds


def _audio_frames(size: float, mels: int = 64):
    frames = max(16, int(200 * size))
    x = np.random.default_rng(7).standard_normal((1, mels, frames)).astype(np.float32)
    return [("x", list(x.shape))], {"x": x}, frames


def _rnn_audio(kind: str, size: float, hidden: int = 128, layers: int = 2):
    b = _Builder(8 if kind == "GRU" else 9)
    inputs, feeds, frames = _audio_frames(size)
    x = b.cba("x", 64, 128, 3, 1, dims=1)
    x = b.op("Transpose", [x], perm=[2, 0, 1])  # (T, N, C), as PyTorch exports
    din = 128
    gates = 3 if kind == "GRU" else 4
    for _ in range(layers):
        s = 1 / math.sqrt(hidden)
        w = b.const((b.rng.uniform(-s, s, (1, gates * hidden, din))).astype(np.float32), "W")
        r = b.const((b.rng.uniform(-s, s, (1, gates * hidden, hidden))).astype(np.float32), "R")
        bias = b.const((b.rng.uniform(-s, s, (1, 2 * gates * hidden))).astype(np.float32), "B")
        attrs = {"hidden_size": hidden}
        if kind == "GRU":
            attrs["linear_before_reset"] = 1
        y = b.op(kind, [x, w, r, bias], **attrs)
        x = b.op("Squeeze", [y, b.const(np.array([1], np.int64))])
        din = hidden
    last = b.op("Gather", [x, b.const(np.array(frames - 1, np.int64))], axis=0)
    return b.model(inputs, [b.linear(last, hidden, 35)]), feeds


def gru_audio(size: float = 1.0):
    return _rnn_audio("GRU", size)


def lstm_audio(size: float = 1.0):
    return _rnn_audio("LSTM", size)


def conv1d_stack(size: float = 1.0):
    """A keyword-spotting style 1-D CNN over 64 log-mel bands."""
    b = _Builder(10)
    inputs, feeds, _ = _audio_frames(size * 5)
    x, cin = "x", 64
    for cout, stride in ((128, 1), (128, 2), (192, 1), (192, 2), (256, 1), (256, 2), (256, 1)):
        x = b.cba(x, cin, cout, 3, stride, dims=1)
        cin = cout
    p = b.op("Flatten", [b.op("GlobalAveragePool", [x])])
    return b.model(inputs, [b.linear(p, cin, 35)]), feeds


def bert_minilm(size: float = 1.0):
    """The encoder of ``sprat.testing.transformer`` at MiniLM-L6 size, 1 x 128 tokens."""
    from .transformer import build_encoder

    seq = max(16, int(128 * size))
    m = build_encoder(vocab=30522 if size >= 1 else 1000, hidden=384, heads=6, layers=6,
                      ffn=1536, max_len=seq)
    rng = np.random.default_rng(11)
    feeds = {"input_ids": rng.integers(0, 1000, (1, seq)),
             "attention_mask": np.ones((1, seq), np.int64)}
    return m, feeds


# NOTE: name -> builder; the order is the table's
FAMILIES = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v3_small": mobilenet_v3_small,
    "efficientnet_b0": efficientnet_b0,
    "vit_tiny": vit_tiny,
    "yolo_c2f_neck": yolo_c2f_neck,
    "gru_audio": gru_audio,
    "lstm_audio": lstm_audio,
    "conv1d_stack": conv1d_stack,
    "bert_minilm": bert_minilm,
}

# NOTE: the models of onnx's own backend test data ("light" versions: the real architectures,
# weights scaled down), shipped inside the onnx package
LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512")


def light_model(name: str):
    """``(onnx path, feeds)`` of an onnx light model, with a seeded input of its shape."""
    import os

    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        f"light_{name}.onnx")
    m = onnx.load(path, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    # NOTE: older models list their initializers among the graph inputs too
    vi = next(i for i in m.graph.input if i.name not in inits)
    shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    x = np.random.default_rng(12).random(shape, np.float32)
    return path, {vi.name: x}


SUITE = (*FAMILIES, *(f"light_{n}" for n in LIGHT_MODELS))


def build(name: str, size: float = 1.0):
    """``(onnx path or ModelProto, feeds)`` of a suite model by name (see ``SUITE``)."""
    if name.startswith("light_"):
        return light_model(name[len("light_"):])
    if name not in FAMILIES:
        raise KeyError(f"unknown suite model {name!r}; known: {', '.join(SUITE)}")
    return FAMILIES[name](size)
