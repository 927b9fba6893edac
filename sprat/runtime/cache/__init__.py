"""The compiled cache: optimized graphs on disk, so a warm start skips conversion and the passes.

MindSpore Lite's CacheSession and MNN's cache file keep what loading a model computes. Here, with
``ScheduleConfig(cache_dir=d)``, an ONNX model is converted and optimized once; the optimized graph
is stored in ``d`` as a ``.sprat`` file and later loads map that file (zero-copy weights) without
importing ``onnx``, converting or running a pass.

Entry layout in ``cache_dir`` (``<key>`` = 32 hex digits of the sha256 of the source model's
bytes and the config parts: one slot per model and config, so an entry left by another sprat
version or machine is found, reported and replaced, not kept beside the new one)::

    <key>.json                 manifest: LAYOUT, every key part, the model file's name, size
                               and sha256, and the sha256 of each ONNX external-data file
    <key>-<sha16>.sprat        the optimized graph (sprat.format), named by its own checksum

Key parts (``key_parts``): sha256 of the source model bytes, ``sprat.__version__``, a fingerprint
of the code that produces the graph (size and mtime of every file of the converter, frontends,
passes, ir and format packages), the ScheduleConfig fields that may
change the optimized graph (``precision``, ``backends``, ``backup``), the machine, a hash of
the CPU flags, and the numpy version.

Trust: an entry is used only when its manifest matches every key part exactly, the model file
has the recorded size and sha256, it passes the ``.sprat`` verifier, and every external-data
file still has its recorded sha256. Anything else — missing file, truncated or flipped bytes,
an edited manifest, another sprat version or CPU — logs a warning (logger ``"sprat"``), the
model is converted again and the entry rewritten. Writes are atomic (a temporary file renamed
with ``os.replace``; the manifest last), so concurrent processes never read half an entry. A
cache directory that cannot be written logs a warning; the model still runs.

Packed weights (MindSpore Lite's PackWeightManager on disk): the copies kernels make of their
weights at prepare (``PackCache``: transposed GEMM weights, conv weights in the layout of their
algorithm, fp16 weights under ``precision="low"``) are written once into the entry and mapped
back on a warm start, so a warm session packs nothing::

    <key>.packs.json           index: LAYOUT, the key parts, the model file's sha256, a
                               fingerprint of the kernel code (``sprat/backends``), the pack
                               file's name and size
    <key>-<sha16>.packs        the arrays as the constant tensors of a ``.sprat`` file (no
                               nodes), read by the same reader and verifier as any model file
                               (mapped copy-on-write); each tensor is named by the JSON of
                               (node name, tag, list item), its sha256 in the file's metadata

The pack tags name the kernel's choice (e.g. ``pointwise``/``shift``/``im2col`` for a conv,
``b_packed``/``w_f16`` for a Gemm): a warm session that chooses another kernel asks for a key the
file does not hold and packs it itself. Each array is checked against its sha256 when a
session first asks for it; an index that does not match the entry (other model file, other
kernel code, other layout), a pack file of the wrong size or an array with the wrong checksum
is reported (warning), not used, and the file is rewritten. The parts live in ``key`` (what
ties an entry to a model, config, code and machine), ``entry`` (the optimized graph) and
``packs`` (the packed weights). New packs (first start, other
input shapes, other modes) are written when the Interpreter is collected or the process exits.

Not cached: the memory plan (``plan_memory`` costs well under 1 ms on the zoo models, and
depends on the input shapes, which most zoo models leave symbolic), nor the kernels: they are
compiled once, by the package's build, so a fresh process compiles nothing.
"""

from .entry import load_or_convert
from .key import LAYOUT, code_fingerprint, cpu_features, key_of, key_parts
from .packs import PackStore

__all__ = ["LAYOUT", "PackStore", "code_fingerprint", "cpu_features", "key_of", "key_parts",
           "load_or_convert"]
