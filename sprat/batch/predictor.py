"""Step 3 of a batch job: run batches of rows (a dict of NumPy columns, Ray Data's "numpy"
batch format) through sprat sessions (``sprat.batch`` describes the whole job)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ..errors import InputError, ShapeError
from .inputs import ID, batch_mode


class BatchPredictor:
    """Run batches of rows (a dict of NumPy columns) through a sprat session.

    ``session``: a Session, or any object with its ``inputs``, ``outputs`` and ``run`` (and
    ``resize`` when it has one). ``__call__(batch)`` takes ``{column: (rows, ...) array}``
    and returns ``{id_column and pass_through columns as given, output name: (rows, ...)
    array}``. Steps: ``preprocess(batch) -> batch`` if given (it may decode, and may change
    the number of rows: the id and pass-through columns are read from what it returns); the
    feed of each model input is the column ``input_columns.get(name, name)``; the outputs of
    ``session.run`` keep the model's dtypes; ``postprocess(outputs) -> outputs`` if given. A
    batch of a shape not seen before goes through ``Session.resize`` (the short last batch of
    a job); a model whose batch dim is fixed at 1 runs row by row (``batch_mode``).

    ``new_session``: makes another session of the same model (sharing its weights). With it,
    up to ``max_sessions`` sessions stay prepared, one per batch shape, most recent kept: Ray
    Data cuts blocks into batches such as 64 + 11 rows, and a single session would resize
    (re-plan, about 6 ms here, and run its next batch cold) twice per block.

    Raises InputError (a missing column naming the columns there are, columns of different
    lengths, an output named like a passed-through column), ShapeError (an output whose
    first dim is not the number of rows), and whatever ``Session.run`` raises.
    """

    def __init__(self, session, *, id_column: str | None = ID, pass_through: Sequence[str] = (),
                 input_columns: Mapping[str, str] | None = None,
                 preprocess: Callable | None = None, postprocess: Callable | None = None,
                 new_session: Callable | None = None, max_sessions: int = 4):
        self.session = session
        self.inputs = list(session.inputs)
        self.output_names = [s.name for s in session.outputs]
        self.mode = batch_mode(self.inputs)
        self.keep = [c for c in (id_column, *pass_through) if c is not None]
        clash = sorted(set(self.keep) & set(self.output_names))
        if clash:
            raise InputError(f"column(s) {clash} are passed through and also model outputs; "
                             f"rename the id/pass-through column")
        self.columns = {s.name: s.name for s in self.inputs}
        self.columns.update(input_columns or {})
        self.preprocess = preprocess
        self.postprocess = postprocess
        self._new_session = new_session
        self.max_sessions = max_sessions
        self._spare = [session]  # NOTE: sessions not yet prepared for any batch shape
        self.prepared: OrderedDict[tuple, object] = OrderedDict()  # input shapes -> session

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.preprocess is not None:
            batch = self.preprocess(batch)
        missing = [c for c in (*self.keep, *self.columns.values()) if c not in batch]
        if missing:
            raise InputError(f"batch has no column(s) {missing}; its columns are "
                             f"{sorted(batch)}")
        feeds = {name: _as_tensor(batch[col], col) for name, col in self.columns.items()}
        n = _rows(batch, [*self.keep, *self.columns.values()])
        outputs = self.run(feeds, n)
        if self.postprocess is not None:
            outputs = dict(self.postprocess(outputs))
        result = {c: batch[c] for c in self.keep}
        result.update(outputs)
        _rows(result, list(result))
        return result

    def run(self, feeds: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        """``{output name: (n, ...) array}`` for ``n`` rows of ``feeds``."""
        if n == 0:
            return {s.name: np.zeros((0,), s.dtype) for s in self.session.outputs}
        if self.mode == "rows":
            return self._run_rows(feeds, n)
        outs = self._session_for({k: x.shape for k, x in feeds.items()}).run(feeds)
        for name, y in outs.items():
            if np.ndim(y) == 0 or y.shape[0] != n:
                raise ShapeError(f"output {name!r} has shape {list(np.shape(y))} for a batch "
                                 f"of {n} rows: its first dim is not the batch dim, so it "
                                 f"cannot be split into rows")
        return {name: outs[name] for name in self.output_names}

    def _run_rows(self, feeds, n: int) -> dict[str, np.ndarray]:
        session = self._session_for({k: (1, *x.shape[1:]) for k, x in feeds.items()})
        per_row = [session.run({k: x[i:i + 1] for k, x in feeds.items()}) for i in range(n)]
        out = {}
        for name in self.output_names:
            ys = [np.asarray(r[name]) for r in per_row]
            # NOTE: an output with a leading dim of 1 is that row's batch of one; any other
            # shape (no batch dim) is one row as a whole
            lead = all(y.ndim > 0 and y.shape[0] == 1 for y in ys)
            out[name] = np.concatenate(ys) if lead else np.stack(ys)
        return out

    def _session_for(self, shapes: dict[str, tuple[int, ...]]):
        """The session prepared for ``shapes``: one kept from before, a new or spare one
        resized, or the least recently used one resized."""
        if not hasattr(self.session, "resize"):
            return self.session  # NOTE: a ParallelRunner's sessions resize themselves
        key = tuple(sorted((k, tuple(v)) for k, v in shapes.items()))
        session = self.prepared.get(key)
        if session is not None:
            self.prepared.move_to_end(key)
            return session
        if self._spare:
            session = self._spare.pop()
        elif self._new_session is not None and len(self.prepared) < self.max_sessions:
            session = self._new_session()
        else:
            _, session = self.prepared.popitem(last=False)
        session.resize(dict(key))
        self.prepared[key] = session
        return session


def _as_tensor(column, name: str) -> np.ndarray:
    """A column as one ndarray; an object column of equal-shaped arrays (how Ray Data gives
    variable-shaped tensor columns) is stacked. Raises InputError for ragged rows."""
    x = np.asarray(column)
    if x.dtype == object and x.ndim == 1 and len(x) and isinstance(x[0], np.ndarray):
        shapes = {np.shape(v) for v in x}
        if len(shapes) != 1:
            raise InputError(f"column {name!r} has rows of different shapes "
                             f"{sorted(shapes)[:4]}; one batch must share one shape")
        x = np.stack(list(x))
    return np.ascontiguousarray(x)


def _rows(batch: Mapping[str, np.ndarray], columns: list[str]) -> int:
    lengths = {c: len(batch[c]) for c in columns}
    if len(set(lengths.values())) > 1:
        raise InputError(f"columns have different numbers of rows: {lengths}")
    return next(iter(lengths.values()), 0)


class _RunnerSession:
    """A ParallelRunner seen as a session: each ``run`` takes a free worker session (which
    resizes itself when the feed shapes change)."""

    def __init__(self, runner):
        self._runner = runner
        self.inputs = runner.sessions[0].inputs
        self.outputs = runner.sessions[0].outputs

    def run(self, feeds):
        return self._runner.run(feeds)
