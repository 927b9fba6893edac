"""``sprat.InferenceSession``: the onnxruntime-shaped entry point over Interpreter/Session.

Source: onnxruntime's Python API (``onnxruntime.InferenceSession``, ``SessionOptions``,
``RunOptions``). What has a meaning in sprat is honoured; what has none raises instead of being
dropped silently.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import NamedTuple

import numpy as np

from ..errors import InputError
from .cache import load_or_convert
from .config import ScheduleConfig
from .interpreter import Interpreter

log = logging.getLogger("sprat")

_ONNX_TYPE = {np.dtype(np.float32): "tensor(float)", np.dtype(np.float16): "tensor(float16)",
              np.dtype(np.float64): "tensor(double)", np.dtype(np.int64): "tensor(int64)",
              np.dtype(np.int32): "tensor(int32)", np.dtype(np.int8): "tensor(int8)",
              np.dtype(np.uint8): "tensor(uint8)", np.dtype(np.bool_): "tensor(bool)"}

CPU_PROVIDER = "CPUExecutionProvider"
# onnxruntime's GraphOptimizationLevel and ExecutionMode values (ints, so that onnxruntime's
# enums and plain ints both compare)
ORT_DISABLE_ALL = 0
ORT_PARALLEL = 1


class NodeArg(NamedTuple):
    """onnxruntime's NodeArg: ``name``, ``shape`` (ints, or str for symbolic dims), ``type``
    such as "tensor(float)"."""

    name: str
    shape: list
    type: str


class ModelMetadata(NamedTuple):
    """onnxruntime's ModelMetadata, from the model's metadata (what the converter recorded)."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict


def _is_sprat(data: bytes) -> bool:
    from ..format import MAGIC

    return bytes(data[:len(MAGIC)]) == MAGIC


def _int(v) -> int:
    """An onnxruntime enum member or a plain int, as an int."""
    return int(getattr(v, "value", v))


def _providers(providers, provider_options) -> list[str]:
    """Check ``providers`` / ``provider_options`` as onnxruntime does; sprat runs on the CPU.

    A provider sprat does not have is skipped with a warning, as onnxruntime does for a
    provider not in its build. Raises ValueError for malformed arguments or CPU options."""
    if providers is None:
        if provider_options is not None:
            raise ValueError("provider_options given without providers")
        return [CPU_PROVIDER]
    if isinstance(providers, str):
        raise ValueError(f"providers must be a list of provider names, got the string "
                         f"{providers!r}; use [{providers!r}]")
    names, options = [], []
    for p in providers:
        if isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str):
            names.append(p[0])
            options.append(dict(p[1]))
        elif isinstance(p, str):
            names.append(p)
            options.append({})
        else:
            raise ValueError(f"a provider is a name or a (name, options dict) pair, got {p!r}")
    if provider_options is not None:
        if any(options):
            raise ValueError("provider options given both in providers and provider_options")
        if len(provider_options) != len(names):
            raise ValueError(f"provider_options has {len(provider_options)} entries for "
                             f"{len(names)} providers")
        options = [dict(o) for o in provider_options]
    for name, opts in zip(names, options):
        if name != CPU_PROVIDER:
            log.warning("provider %r is not available in sprat (available: %r); it is skipped",
                        name, CPU_PROVIDER)
        elif opts:
            raise ValueError(f"{CPU_PROVIDER} in sprat takes no provider options, got "
                             f"{sorted(opts)}; set threads and modes with sprat.ScheduleConfig")
    return [CPU_PROVIDER]


def _apply_options(config: ScheduleConfig, so) -> tuple[ScheduleConfig, bool]:
    """``config`` updated from an onnxruntime ``SessionOptions``-like object, and whether graph
    optimizations are on. ``intra_op_num_threads`` (0: keep) -> ``num_threads``;
    ``enable_profiling`` -> ``profiling``; ``graph_optimization_level`` ORT_DISABLE_ALL -> no
    passes; ``execution_mode`` ORT_PARALLEL runs sequentially (sprat parallelises inside ops)
    with a warning. Memory options (arena, pattern, reuse) are what sprat always does. Raises
    ValueError for a negative thread count."""
    changes = {}
    threads = _int(getattr(so, "intra_op_num_threads", 0) or 0)
    if threads < 0:
        raise ValueError(f"intra_op_num_threads must be >= 0, got {threads}")
    if threads > 0:
        changes["num_threads"] = threads
    if getattr(so, "enable_profiling", False):
        changes["profiling"] = True
    if _int(getattr(so, "execution_mode", 0) or 0) == ORT_PARALLEL:
        log.warning("execution_mode ORT_PARALLEL: sprat runs ops in order and splits the work "
                    "inside each op across num_threads")
    level = getattr(so, "graph_optimization_level", None)
    optimize = level is None or _int(level) != ORT_DISABLE_ALL
    return (dataclasses.replace(config, **changes) if changes else config), optimize


class InferenceSession:
    """Like ``onnxruntime.InferenceSession``: a path to a ``.sprat``, ``.onnx`` or ``.tflite``
    file, or its bytes.

    ONNX models are converted in memory (needs the ``onnx`` package); with
    ``ScheduleConfig(cache_dir=d)`` the optimized graph comes from the compiled cache when it
    holds a valid entry (``sprat.runtime.cache``: then ``onnx`` is not even imported).
    ``config`` is a ScheduleConfig (default: 1 thread, cpu backend).

    onnxruntime's arguments: ``sess_options`` (an ``onnxruntime.SessionOptions`` or any object
    with its attributes) sets ``intra_op_num_threads`` -> ``num_threads``, ``enable_profiling``
    (then ``end_profiling()`` writes a Chrome trace), ``graph_optimization_level``
    (``ORT_DISABLE_ALL`` converts without sprat's passes; a ``.sprat`` file is already
    optimized), ``optimized_model_filepath`` (the optimized model is written there as a
    ``.sprat`` file); ``providers`` / ``provider_options`` accept ``CPUExecutionProvider``
    (others are skipped with a warning, as onnxruntime does for a provider it lacks).

    Raises FileNotFoundError, ModelFormatError, UnsupportedOpError, ValueError (bad provider
    arguments or options), TypeError (a keyword argument sprat does not have).
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 config: ScheduleConfig | None = None, **kwargs):
        from ..converter import convert_graph

        if kwargs:
            raise TypeError(f"InferenceSession got unexpected keyword argument(s) "
                            f"{sorted(kwargs)}; sprat accepts sess_options, providers, "
                            f"provider_options and config (a sprat.ScheduleConfig)")
        if isinstance(sess_options, ScheduleConfig) and config is None:
            sess_options, config = None, sess_options  # NOTE: sprat's own second argument
        self._providers = _providers(providers, provider_options)
        self._sess_options = sess_options
        config = config if config is not None else ScheduleConfig()
        optimize = True
        if sess_options is not None:
            config, optimize = _apply_options(config, sess_options)
        cached = config.cache_dir is not None and optimize
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            is_sprat, path = _is_sprat(path_or_bytes), None
        else:
            path = os.fspath(path_or_bytes)
            with open(path, "rb") as f:
                is_sprat = _is_sprat(f.read(16))
        if is_sprat:
            if not optimize:
                log.warning("graph_optimization_level ORT_DISABLE_ALL: a .sprat file holds "
                            "the graph as optimized at convert time")
            interp = (Interpreter.from_file(path) if path is not None
                      else Interpreter.from_buffer(path_or_bytes))
        elif cached:
            src = path if path is not None else path_or_bytes
            graph, buffer, store = load_or_convert(src, config)
            interp = Interpreter(graph, buffer, path, pack_store=store)
        else:
            src = path if path is not None else bytes(path_or_bytes)
            interp = Interpreter.from_graph(convert_graph(src, optimize=optimize))
        target = getattr(sess_options, "optimized_model_filepath", "") if sess_options else ""
        if target:
            from ..format import write_model

            write_model(interp.graph, os.fspath(target))
        self.interpreter = interp
        self.session = interp.create_session(config)
        self._profile_start = time.time()

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs as declared (symbolic dims are strings)."""
        return [NodeArg(s.name, list(s.shape or []), _ONNX_TYPE.get(s.dtype, str(s.dtype)))
                for s in self.session.inputs]

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs as declared (symbolic dims are strings)."""
        g = self.interpreter.graph
        specs = [g.values[i] for i in g.outputs]
        return [NodeArg(v.name, list(v.shape or []), _ONNX_TYPE.get(v.dtype, str(v.dtype)))
                for v in specs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Always empty: sprat folds initializers into the model (onnxruntime lists the
        initializers that are also graph inputs)."""
        return []

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        return {p: {} for p in self._providers}

    def get_session_options(self):
        """The ``sess_options`` given (None when none was)."""
        return self._sess_options

    def get_modelmeta(self) -> ModelMetadata:
        """Producer, version and custom metadata the converter recorded from the source file."""
        meta = dict(self.interpreter.graph.metadata)
        producer = str(meta.pop("producer", ""))
        custom = {str(k): str(v) for k, v in meta.items()}
        return ModelMetadata(producer, "", "", "", "", 0, custom)

    def run(self, output_names, input_feed, run_options=None) -> list[np.ndarray]:
        """onnxruntime's ``run``: ``output_names`` None (or empty) for all outputs; returns a
        list in that order. ``run_options`` (an ``onnxruntime.RunOptions``): a set
        ``terminate`` flag stops the call before it starts, as in onnxruntime; its logging
        fields have no meaning here. Raises InputError, KernelError, SessionBusyError."""
        if run_options is not None and getattr(run_options, "terminate", False):
            raise InputError("run_options.terminate is set: the run was not started")
        names = list(output_names) if output_names else [o.name for o in self.get_outputs()]
        result = self.session.run(input_feed, names)
        return [result[n] for n in names]

    def end_profiling(self) -> str:
        """Write the last profiled run as a Chrome trace JSON (onnxruntime's profile file:
        ``<profile_file_prefix>_<date>.json`` in the working directory) and return its path.
        Raises ValueError when profiling is off (``SessionOptions.enable_profiling``)."""
        trace = self.session.trace()
        prefix = getattr(self._sess_options, "profile_file_prefix", None) or "sprat_profile"
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(self._profile_start))
        path = f"{prefix}_{stamp}.json"
        with open(path, "w") as f:
            json.dump(trace, f)
        return path
