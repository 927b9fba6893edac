"""A small BERT-style transformer encoder built with ``onnx.helper``.

Token and position embeddings (Gather), LayerNormalization, ``layers`` encoder blocks of
multi-head self-attention (MatMul, scale, additive attention mask, Softmax, MatMul) and an
Erf-GELU feed-forward network, each with a residual add and LayerNormalization — the structure
of BERT (Devlin et al., 2019) as exported by PyTorch at opset 17.

Inputs: ``input_ids`` int64 [batch, seq], ``attention_mask`` int64 [batch, seq] (1 keep, 0 pad).
Output: ``last_hidden_state`` float32 [batch, seq, hidden].
"""

from __future__ import annotations

import numpy as np


def build_encoder(vocab: int = 1000, hidden: int = 128, heads: int = 4, layers: int = 2,
                  ffn: int = 512, max_len: int = 128, seed: int = 0, opset: int = 17):
    """Return an ``onnx.ModelProto`` of the encoder with seeded random weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits, nodes = [], []
    dh = hidden // heads

    def w(name, *shape, scale=0.05):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale)
                                             .astype(np.float32), name))
        return name

    def c(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def layer_norm(x, prefix):
        g = c(f"{prefix}.gamma", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        b = c(f"{prefix}.beta", (0.1 * rng.standard_normal(hidden)).astype(np.float32))
        return node("LayerNormalization", [x, g, b], f"{prefix}.out", axis=-1, epsilon=1e-12)

    def linear(x, n_in, n_out, prefix):
        y = node("MatMul", [x, w(f"{prefix}.weight", n_in, n_out)], f"{prefix}.mm")
        return node("Add", [y, w(f"{prefix}.bias", n_out)], f"{prefix}.out")

    # embeddings
    tok = node("Gather", [w("embed.tokens", vocab, hidden, scale=0.5), "input_ids"], "embed.tok",
               axis=0)
    shape = node("Shape", ["input_ids"], "embed.shape")
    seq = node("Gather", [shape, c("one", np.array(1, np.int64))], "embed.seq", axis=0)
    pos_ids = node("Range", [c("zero", np.array(0, np.int64)), seq,
                             c("step", np.array(1, np.int64))], "embed.pos_ids")
    pos = node("Gather", [w("embed.positions", max_len, hidden, scale=0.5), pos_ids],
               "embed.pos", axis=0)
    x = layer_norm(node("Add", [tok, pos], "embed.sum"), "embed.ln")

    # additive mask [batch, 1, 1, seq]: 0 where kept, -10000 where padded
    m = node("Cast", ["attention_mask"], "mask.f", to=TensorProto.FLOAT)
    m = node("Sub", [c("one_f", np.array(1.0, np.float32)), m], "mask.inv")
    m = node("Mul", [m, c("neg", np.array(-10000.0, np.float32))], "mask.add")
    m = node("Unsqueeze", [m, c("mask.axes", np.array([1, 2], np.int64))], "mask.bias")

    heads_shape = c("heads_shape", np.array([0, 0, heads, dh], np.int64))
    merge_shape = c("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = c("scale", np.array(1.0 / np.sqrt(dh), np.float32))
    for i in range(layers):
        p = f"layer{i}"
        split = {}
        for name in ("q", "k", "v"):
            t = linear(x, hidden, hidden, f"{p}.{name}")
            t = node("Reshape", [t, heads_shape], f"{p}.{name}.heads")
            perm = [0, 2, 3, 1] if name == "k" else [0, 2, 1, 3]
            split[name] = node("Transpose", [t], f"{p}.{name}.t", perm=perm)
        s = node("MatMul", [split["q"], split["k"]], f"{p}.scores")
        s = node("Mul", [s, scale], f"{p}.scaled")
        s = node("Add", [s, m], f"{p}.masked")
        s = node("Softmax", [s], f"{p}.probs", axis=-1)
        a = node("MatMul", [s, split["v"]], f"{p}.ctx")
        a = node("Transpose", [a], f"{p}.ctx.t", perm=[0, 2, 1, 3])
        a = node("Reshape", [a, merge_shape], f"{p}.ctx.merged")
        a = linear(a, hidden, hidden, f"{p}.attn_out")
        x = layer_norm(node("Add", [a, x], f"{p}.res1"), f"{p}.ln1")
        h = linear(x, hidden, ffn, f"{p}.ffn1")
        # GELU(h) = 0.5 * h * (1 + erf(h / sqrt(2)))
        e = node("Div", [h, c(f"{p}.sqrt2", np.array(np.sqrt(2.0), np.float32))], f"{p}.gelu.d")
        e = node("Erf", [e], f"{p}.gelu.erf")
        e = node("Add", [e, c(f"{p}.one", np.array(1.0, np.float32))], f"{p}.gelu.p1")
        e = node("Mul", [h, e], f"{p}.gelu.m")
        e = node("Mul", [e, c(f"{p}.half", np.array(0.5, np.float32))], f"{p}.gelu.out")
        h = linear(e, ffn, hidden, f"{p}.ffn2")
        x = layer_norm(node("Add", [h, x], f"{p}.res2"), f"{p}.ln2")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))

    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "seq", hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="sprat.testing")
    model.ir_version = 8
    return model


def sample_inputs(batch: int = 1, seq: int = 64, vocab: int = 1000, seed: int = 0):
    """Random token ids and a mask whose last quarter of each row is padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[:, seq - seq // 4:] = 0
    return {"input_ids": ids, "attention_mask": mask}
