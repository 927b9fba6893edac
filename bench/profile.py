"""Where sprat loses, by family and op kind: per-op times of sprat and onnxruntime on the models of
the broad suite, summed by kind of op (issue 15, part 1).

    python bench/profile.py [--models resnet18,mobilenet_v2,...] [--threads 1] [--runs 20]

sprat: ``Session.run_with_callback`` (per-op times of an observed run, ``RunState.op_times``);
onnxruntime: its own profiler (``enable_profiling``, the ``*_kernel_time`` events), default
graph optimizations. Both measure each op with a clock around it, so their totals sit above the
plain runs of ``bench/run.py``; compare kinds within a model, not the totals with other tables.

Kinds: convolutions by shape (depthwise, 1x1, kxk stride 1, strided; a 1-D conv counts as 2-D
with H = 1), then the op type. Default models: the conv families (see ``MODELS``). Fused nodes
are counted under the conv they start from: sprat keeps the conv's name; onnxruntime names a
fused node after the chain's last node, which is walked back through its single-input
producers (BatchNormalization, activations) to the conv.
The transformer families (``TRANSFORMERS``: ``bert_minilm``, ``vit_tiny``, and
``bert_encoder`` of ``bench/run.py``) are grouped instead by what each runtime ran (``groups``):
both fuse, but into different nodes (sprat: ``Attention``, MatMul with its bias, residual and
GELU as epilogue; onnxruntime: ``FusedMatMul`` for the scaled QK^T, ``BiasGelu``/``Gelu``,
``SkipLayerNormalization``, MatMul+Add as ``Gemm``), so each executed node is put in a group by
its op type, whether its second operand is a weight, and its rank, and the groups are summed.
Run it under the shared lock: ``flock /tmp/sprat-bench.lock python bench/profile.py``.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import sprat  # noqa: E402
from sprat.testing.families import build  # noqa: E402

MODELS = ("resnet18,mobilenet_v2,mobilenet_v3_small,efficientnet_b0,yolo_c2f_neck,conv1d_stack,"
          "bert_minilm,vit_tiny")
TRANSFORMERS = ("bert_minilm", "vit_tiny", "bert_encoder")
CHAIN = {"BatchNormalization", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Mul",
         "LeakyRelu", "Add"}


def kinds(model) -> dict[str, str]:
    """``{node name: kind}`` for every node of the ONNX ``model``."""
    from onnx import numpy_helper

    import onnx

    shapes = {t.name: tuple(numpy_helper.to_array(t).shape) for t in model.graph.initializer}
    # NOTE: a weight computed from constants (onnx's light models: ConstantOfShape) has the
    # shape onnx's inference gives it
    for vi in onnx.shape_inference.infer_shapes(model).graph.value_info:
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes.setdefault(vi.name, tuple(d.dim_value for d in dims))
    out = {}
    for n in model.graph.node:
        kind = n.op_type
        if n.op_type == "Conv" and n.input[1] in shapes:
            w = np.empty(shapes[n.input[1]], np.float32)
            attrs = {a.name: a for a in n.attribute}
            group = attrs["group"].i if "group" in attrs else 1
            k = "x".join(str(d) for d in w.shape[2:])
            strided = "strides" in attrs and any(s > 1 for s in attrs["strides"].ints)
            if group > 1 and w.shape[1] == 1 and w.shape[0] == group:
                kind = f"Conv depthwise {k}"
            elif all(d == 1 for d in w.shape[2:]):
                kind = "Conv 1x1" + (" strided" if strided else "")
            else:
                kind = f"Conv {k}" + (" strided" if strided else "")
        out[n.name] = kind
    return out


def conv_of(model) -> dict[str, str]:
    """``{node name: the conv its fused chain starts from}`` (itself when not in one)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    by_name = {n.name: n for n in model.graph.node}
    out = {}
    for name, n in by_name.items():
        cur = n
        while cur.op_type in CHAIN and cur.input and cur.input[0] in producer:
            cur = producer[cur.input[0]]
        out[name] = cur.name if cur.op_type == "Conv" else name
    return out


GROUPS = ("MatMul/Gemm (weights)", "attention (QK^T, scale, mask, softmax, AV)", "LayerNorm",
          "GELU", "bias/residual Add", "transposes/reshapes/copies", "other")
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "Softmax"}
LAYERNORM_OPS = {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                 "SkipSimplifiedLayerNormalization"}
GELU_OPS = {"Gelu", "BiasGelu", "FastGelu", "Erf"}
MATMUL_OPS = {"MatMul", "FusedMatMul", "Gemm"}
COPY_OPS = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "ReorderOutput",
            "ReorderInput", "Concat", "Identity"}


def group(op: str, weights: bool, rank: int) -> str:
    """The group of one executed node of a transformer: ``op`` its type, ``weights`` whether
    an operand past the first is a constant (a weight), ``rank`` its output's rank. Unfused
    attention is the products of two activations and the rank-4 elementwise ops (scale,
    mask); the fused epilogues of sprat's MatMuls (bias, residual, GELU) count as MatMul."""
    if op in ATTENTION_OPS or (op in MATMUL_OPS and not weights):
        return GROUPS[1]
    if op in MATMUL_OPS:
        return GROUPS[0]
    if op in LAYERNORM_OPS:
        return GROUPS[2]
    if op in GELU_OPS:
        return GROUPS[3]
    if op in ("Add", "Mul", "Div", "Sub"):
        return GROUPS[1] if rank == 4 else GROUPS[4]
    if op in COPY_OPS:
        return GROUPS[5]
    return GROUPS[6]


def model_and_feeds(name: str):
    """The ONNX model and feeds of ``name``: a family, or ``bert_encoder`` as bench/run.py
    builds it."""
    if name == "bert_encoder":
        from bench.run import ENCODER_CONFIG, ENCODER_SEQ
        from sprat.testing.transformer import build_encoder

        rng = np.random.default_rng(0)
        feeds = {"input_ids": rng.integers(0, ENCODER_CONFIG["vocab"], (1, ENCODER_SEQ)),
                 "attention_mask": np.ones((1, ENCODER_SEQ), np.int64)}
        return build_encoder(**ENCODER_CONFIG), feeds
    model, feeds = build(name)
    if isinstance(model, str):  # NOTE: onnx's light models come as a path
        import onnx

        model = onnx.load(model)
        # NOTE: their nodes have no names; both runtimes' profiles are matched by name
        for i, n in enumerate(model.graph.node):
            n.name = n.name or f"{n.op_type}_{i}"
    return model, feeds


def sprat_times(model, feeds, threads: int, runs: int, by_group: bool = False
                ) -> dict[str, float]:
    """``{node name: ms per run}`` from sprat's observed runs (``{group: ms}`` with
    ``by_group``)."""
    sess = sprat.Interpreter.from_buffer(sprat.convert(model)).create_session(
        sprat.ScheduleConfig(num_threads=threads))
    for _ in range(3):
        sess.run(feeds)
    total = None
    for _ in range(runs):
        sess.run_with_callback(feeds, after=lambda *a: True)
        t = np.array(sess.state.op_times)
        total = t if total is None else total + t
    times: dict[str, float] = collections.defaultdict(float)
    plan = sess.plan
    for step, t in zip(plan.steps, total / runs * 1e3):
        if by_group:
            weights = any(i in plan.constants for i in step.ins[1:2])
            rank = len(step.out_infos[0].shape) if step.out_infos else 0
            times[group(step.node.op_type, weights, rank)] += t
        else:
            times[step.node.name] += t
    return times


def ort_times(model, feeds, threads: int, runs: int, by_group: bool = False
              ) -> dict[str, float]:
    """``{node name: ms per run}`` from onnxruntime's profiler (``{group: ms}`` with
    ``by_group``: the event's ``op_name``, its ``parameter_size`` (weight bytes) or a missing
    second input (a pre-packed weight) and its output shape give the group)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        # NOTE: onnxruntime writes its profile into the working directory unless told otherwise
        so.profile_file_prefix = str(pathlib.Path(d) / "ort")
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        for _ in range(3 + runs):
            sess.run(None, feeds)
        events = json.loads(pathlib.Path(sess.end_profiling()).read_text())
    times: dict[str, float] = collections.defaultdict(float)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            if by_group:
                args = e.get("args", {})
                shapes = args.get("output_type_shape") or [{}]
                rank = len(next(iter(shapes[0].values()), []))
                # NOTE: a pre-packed weight drops out of the event's inputs
                weights = (int(args.get("parameter_size", 0)) > 0
                           or len(args.get("input_type_shape", [])) < 2)
                name = group(args.get("op_name", ""), weights, rank)
            for suffix in ("_nchwc", "_token_0"):
                name = name.removesuffix(suffix)
            times[name] += e["dur"] / 1e3 / (3 + runs)
    return times


def table(name: str, threads: int, runs: int) -> str:
    model, feeds = model_and_feeds(name)
    grouped = name in TRANSFORMERS
    kind, head = kinds(model), conv_of(model)
    by_output = {o: n.name for n in model.graph.node for o in n.output}
    rows: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for col, times in enumerate((sprat_times(model, feeds, threads, runs, grouped),
                                 ort_times(model, feeds, threads, runs, grouped))):
        for node, ms in times.items():
            if grouped:
                k = node
            else:
                # NOTE: onnxruntime names a fused node of an unnamed chain by its output
                node = node if node in head else by_output.get(node, node)
                k = kind.get(head.get(node, node), "other (sprat-internal or unmatched)")
            rows[k][col] += ms
    total = [sum(r[i] for r in rows.values()) for i in (0, 1)]
    lines = [f"**{name}**, {threads} thread(s): sprat {total[0]:.2f} ms, onnxruntime "
             f"{total[1]:.2f} ms in ops", "",
             "| kind | sprat ms | ort ms | sprat/ort | share of sprat |",
             "|---|---:|---:|---:|---:|"]
    for k, (s, o) in sorted(rows.items(), key=lambda kv: -kv[1][0]):
        if s < 0.005 and o < 0.005:
            continue
        ratio = f"{s / o:.2f}" if o > 0.005 else "–"
        lines.append(f"| {k} | {s:.2f} | {o:.2f} | {ratio} | {100 * s / total[0]:.0f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args(argv)
    for name in args.models.split(","):
        print(table(name, args.threads, args.runs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
