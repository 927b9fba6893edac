"""Batch inference on Ray Data with sprat (``pip install "sprat[ray]"``).

The shape of Ray's own batch-inference examples (a callable class: the model is loaded once
per actor in ``__init__``, ``__call__`` maps a batch of NumPy columns to output columns), with
sprat inside::

    import ray
    from sprat.ray import SpratPredictor, put_model

    model = put_model("classifier.onnx")   # converted once, here; the .sprat bytes go to the
                                           # object store (once per node), not to every actor
    ds = ray.data.read_parquet("s3://bucket/images/")       # columns "id", "x": (N, 3, H, W)
    out = ds.map_batches(SpratPredictor, fn_constructor_kwargs={"model": model},
                         batch_size=64, compute=ray.data.ActorPoolStrategy(size=4), num_cpus=2)
    out.write_parquet("s3://bucket/scores/")                 # columns "id" + the model outputs

``map_batches(..., concurrency=4)`` is the older spelling of ``compute=ActorPoolStrategy(size=4)``.
Actors that die are restarted and their batches retried: Ray Data's actor pools default to
``max_restarts=-1, max_task_retries=-1`` (tests/sessions/test_ray.py kills one to check).

Importing ``sprat`` never imports this module or ray; importing this module imports ray.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from .batch import ERROR, ID, INDEX, BatchPredictor
from .errors import InputError, SpratError
from .runtime.config import ScheduleConfig
from .runtime.interpreter import Interpreter

try:
    import ray
    import ray.data
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("sprat.ray needs Ray Data: pip install 'sprat[ray]'") from e

log = logging.getLogger(__name__)


def put_model(model) -> ray.ObjectRef:
    """Put a model into Ray's object store as ``.sprat`` bytes, for ``SpratPredictor``.

    ``model``: a ``.sprat`` path (read), an ONNX or TFLite path (converted here, once, on the
    driver), or ``.sprat`` bytes. Returns the ObjectRef of a uint8 NumPy array: each actor
    reads it from its node's shared memory without a copy (Ray's zero-copy NumPy arrays) and
    maps the model from there. Keep the ref alive while the dataset runs: restarted actors
    read it again.

    Raises FileNotFoundError, ConvertError/UnsupportedOpError (conversion), ModelFormatError.
    """
    from .batch import model_bytes

    return ray.put(np.frombuffer(model_bytes(model), dtype=np.uint8))


def assigned_cpus() -> int:
    """The CPUs Ray gave the calling actor or task (``get_assigned_resources()["CPU"]``,
    rounded down, at least 1); 1 outside a Ray worker."""
    if not ray.is_initialized():
        return 1
    ctx = ray.get_runtime_context()
    if getattr(ctx.worker, "mode", None) != ray.WORKER_MODE:  # NOTE: the driver has none
        return 1
    return max(1, int(ctx.get_assigned_resources().get("CPU", 1)))


class SpratPredictor(BatchPredictor):
    """A callable class for ``ray.data.Dataset.map_batches``: one sprat session per actor.

    ``model``: an ObjectRef from ``put_model`` (the model is read from the object store), a
    ``.sprat`` path every node can read (mapped with ``Interpreter.from_file``), or ``.sprat``
    bytes. An ONNX/TFLite path is refused: converting in every actor is what ``put_model``
    avoids. ``num_threads``: the session's threads (default: the CPUs the actor was given,
    ``num_cpus`` of ``map_batches``).

    ``__call__(batch)`` takes Ray's "numpy" batch format, ``{column: (rows, ...) ndarray}``,
    and returns ``{id_column: as given, pass_through columns: as given, output name: (rows,
    ...) ndarray}`` (model output dtypes). The feed of each model input is the column named
    like it (or ``input_columns[name]``); ``preprocess(batch) -> batch`` and
    ``postprocess(outputs) -> outputs`` run around the model when given (they are pickled to
    the actors). Batches of any size, the short last one included, go through
    ``Session.resize``; a model whose batch dim is fixed at 1 runs each row on its own. Up to
    ``max_sessions`` sessions of the model (sharing its weights) stay prepared, one per batch
    shape, so that Ray Data's uneven batches (64 + 11 rows per block, say) do not re-plan one
    session twice per block. ``id_column=None`` passes no id through.

    Raises (in the actor, surfacing from the dataset): InputError for a missing column, an
    ONNX path, or an output named like a kept column; ShapeError and KernelError from the
    run; ModelFormatError for a corrupt model.
    """

    def __init__(self, model, *, num_threads: int | None = None, id_column: str | None = ID,
                 pass_through: Sequence[str] = (), input_columns: Mapping[str, str] | None = None,
                 preprocess: Callable | None = None, postprocess: Callable | None = None,
                 max_sessions: int = 4):
        self.interpreter = load_interpreter(model)
        threads = num_threads if num_threads is not None else assigned_cpus()
        config = ScheduleConfig(num_threads=threads)
        super().__init__(self.interpreter.create_session(config), id_column=id_column,
                         pass_through=pass_through, input_columns=input_columns,
                         preprocess=preprocess, postprocess=postprocess,
                         new_session=lambda: self.interpreter.create_session(config),
                         max_sessions=max_sessions)


def load_interpreter(model) -> Interpreter:
    """The Interpreter of ``model`` as ``SpratPredictor`` takes it (ObjectRef, ``.sprat``
    path, bytes or uint8 array). Raises InputError for a path that is not a ``.sprat`` file,
    TypeError for anything else, ModelFormatError for a corrupt model."""
    from .format import MAGIC

    if isinstance(model, ray.ObjectRef):
        model = ray.get(model)
    if isinstance(model, np.ndarray):
        return Interpreter.from_buffer(memoryview(model))
    if isinstance(model, (bytes, bytearray, memoryview)):
        return Interpreter.from_buffer(model)
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            head = f.read(len(MAGIC))
        if head != MAGIC:
            raise InputError(f"{os.fspath(model)} is not a .sprat file: convert it once on the "
                             f"driver with sprat.ray.put_model(path) and pass the ref")
        return Interpreter.from_file(model)
    raise TypeError(f"model must be an ObjectRef from put_model, a .sprat path or bytes, "
                    f"got {type(model).__name__}")


# ---- the `sprat batch` engine -----------------------------------------------------------------
def run_units(units: list[dict], data: bytes, decoder, *, workers: int | None, threads: int,
              batch_size: int, address: str | None, per_unit: bool) -> Iterator[dict]:
    """Result batches of ``sprat batch`` on Ray: the units go to a dataset, each of
    ``workers`` actors (``threads`` CPUs each) decodes its batches with ``decoder`` and runs
    them; batches arrive in completion order. Uses the Ray instance this process has, else
    connects to ``address`` (``"auto"``: the cluster ``ray start`` made on this machine), else
    starts a local one for the job (shut down at the end).

    Raises InputError when the cluster has fewer CPUs than ``workers * threads``; a SpratError
    raised in an actor is re-raised here as itself.
    """
    started = not ray.is_initialized()
    if started:
        # NOTE: ray.init() with no address joins the last cluster `ray start` made on this
        # machine (even a dead one: it then waits); "local" always starts the job's own
        ray.init(address=address if address is not None else "local", include_dashboard=False,
                 log_to_driver=False, logging_level=logging.ERROR)
    try:
        with _job_data_context():
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if workers is None:
                workers = max(1, cpus // threads)
            if workers * threads > cpus:
                raise InputError(f"{workers} worker(s) x {threads} thread(s) need "
                                 f"{workers * threads} CPUs; the Ray cluster has {cpus}")
            model = ray.put(np.frombuffer(data, dtype=np.uint8))
            log.info("running on Ray: %d actor(s) x %d CPU(s), cluster CPUs %d", workers,
                     threads, cpus)
            ds = ray.data.from_items(units)
            # NOTE: no max_restarts / max_task_retries here: Ray Data's actor pools default to
            # -1 / -1 (a dead actor is restarted, its batch retried), and passing them as
            # ray_remote_args is deprecated since Ray 2.60
            ds = ds.map_batches(
                SpratPredictor,
                fn_constructor_kwargs={"model": model, "num_threads": threads,
                                       "preprocess": decoder, "pass_through": (INDEX, ERROR)},
                batch_size=1 if per_unit else batch_size,
                compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=threads)
            try:
                yield from ds.iter_batches(batch_format="numpy", batch_size=None)
            except Exception as e:
                cause = sprat_cause(e)
                if cause is not None:
                    raise cause from None
                raise
    finally:
        if started:
            ray.shutdown()


@contextlib.contextmanager
def _job_data_context():
    """Ray Data settings for a ``sprat batch`` job, restored afterwards: no Ray Data progress
    bars or INFO lines (the job draws its own bar), and an error raised in an actor (say, an
    InputError for a missing column) reaching the driver as itself
    (``raise_original_map_exception``), not as a UserCodeException that loses it when
    pickled."""
    ctx = ray.data.DataContext.get_current()
    names = ("enable_progress_bars", "print_on_execution_start", "raise_original_map_exception")
    saved = {k: getattr(ctx, k) for k in names if hasattr(ctx, k)}
    ray_data_log = logging.getLogger("ray.data")
    level = ray_data_log.level
    try:
        ray_data_log.setLevel(logging.ERROR)
        for k in saved:
            setattr(ctx, k, k == "raise_original_map_exception")
        yield
    finally:
        for k, v in saved.items():
            setattr(ctx, k, v)
        ray_data_log.setLevel(level)


def sprat_cause(e: BaseException) -> SpratError | None:
    """The SpratError a Ray error wraps (raised in a task or actor), if any."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, SpratError) and not isinstance(e, ray.exceptions.RayError):
            return e
        inner = getattr(e, "cause", None)
        if isinstance(inner, SpratError):
            return inner
        e = inner if isinstance(inner, BaseException) else (e.__cause__ or e.__context__)
    return None
