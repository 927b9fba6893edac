"""What a session checks of what callers give it: feeds, input shapes, output names and arrays.

Every check raises InputError with the expected and the actual value, before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from ..errors import InputError


class TensorSpec(NamedTuple):
    """A graph input or output: name, shape (ints, or str for symbolic dims), numpy dtype."""

    name: str
    shape: tuple
    dtype: np.dtype


def output_names(specs: list[TensorSpec], names) -> set[str] | None:
    """``names`` as a set (None: all outputs); raises InputError for an unknown name."""
    if names is None:
        return None
    known = [s.name for s in specs]
    bad = [n for n in names if n not in known]
    if bad:
        raise InputError(f"unknown output name(s) {bad}; the model's outputs are {known}")
    return set(names)


def feeds(specs: list[TensorSpec], given, lent: set[str]) -> dict[str, np.ndarray]:
    """``{input name: array}`` of ``given`` (a Mapping) checked against the input ``specs``:
    names (every input fed, except those in ``lent``, filled through ``input_buffer``),
    dtypes, ranks and fixed dims. Raises InputError."""
    if not isinstance(given, Mapping):
        raise InputError(f"feeds must be a dict {{input name: array}}, got "
                         f"{type(given).__name__}")
    names = [s.name for s in specs]
    unknown = [k for k in given if k not in names]
    missing = [n for n in names if n not in given and n not in lent]
    if unknown or missing:
        raise InputError(
            f"inputs do not match the model: unknown {unknown}, missing {missing}; "
            f"the model's inputs are {names}")
    out = {}
    for spec in specs:
        if spec.name not in given:
            continue  # filled in place through input_buffer()
        arr = given[spec.name]
        if not isinstance(arr, np.ndarray):
            arr = np.asarray(arr)
        if spec.dtype is not None and arr.dtype != spec.dtype:
            raise InputError(f"input {spec.name!r}: expected dtype {spec.dtype}, got "
                             f"{arr.dtype}")
        shape(spec, tuple(arr.shape))
        out[spec.name] = arr
    return out


def shape(spec: TensorSpec, got: tuple) -> None:
    """Raises InputError when ``got`` contradicts the rank or a fixed dim of ``spec``."""
    if spec.shape is None:
        return
    if len(got) != len(spec.shape):
        raise InputError(f"input {spec.name!r}: expected rank {len(spec.shape)} "
                         f"(shape {list(spec.shape)}), got shape {list(got)}")
    for axis, (want, dim) in enumerate(zip(spec.shape, got)):
        if isinstance(want, int) and want >= 0 and want != dim:
            raise InputError(f"input {spec.name!r}: dim {axis} must be {want} "
                             f"(shape {list(spec.shape)}), got shape {list(got)}")
        if not isinstance(dim, (int, np.integer)) or dim < 0:
            raise InputError(f"input {spec.name!r}: invalid dim {dim!r} in shape {list(got)}")


def complete_shapes(specs: list[TensorSpec], shapes: Mapping[str, tuple],
                    current: Mapping[str, tuple] | None) -> dict[str, tuple[int, ...]]:
    """Every input's shape: from ``shapes``, else the ``current`` plan's, else the declared
    one when fully fixed. Raises InputError for an unknown name, a symbolic shape not given,
    or a shape that contradicts the model."""
    names = [s.name for s in specs]
    unknown = [k for k in shapes if k not in names]
    if unknown:
        raise InputError(f"unknown input name(s) {unknown}; the model's inputs are {names}")
    full = {}
    for spec in specs:
        if spec.name in shapes:
            got = tuple(int(d) for d in shapes[spec.name])
        elif current is not None:
            got = current[spec.name]
        elif spec.shape is not None and all(isinstance(d, int) and d >= 0 for d in spec.shape):
            got = spec.shape
        else:
            raise InputError(f"input {spec.name!r} has symbolic shape "
                             f"{list(spec.shape or [])}; give its shape to resize()")
        shape(spec, got)
        full[spec.name] = got
    return full


def output_array(name: str, dst: np.ndarray, src: np.ndarray) -> None:
    """Raises InputError when ``dst`` cannot hold the output ``src`` (shape, dtype kind)."""
    if dst.shape != src.shape:
        raise InputError(f"output {name!r}: array of shape {list(dst.shape)} cannot "
                         f"hold the result of shape {list(src.shape)}")
    if not np.can_cast(src.dtype, dst.dtype, casting="same_kind"):
        raise InputError(f"output {name!r}: array of dtype {dst.dtype} cannot hold "
                         f"the result of dtype {src.dtype}")


def user_outputs(outputs, planned: dict, dynamic: set[str],
                 bindable) -> dict[str, np.ndarray | None]:
    """``{name: array to bind}`` of the caller's ``outputs`` (None: copy into it after the
    run). ``planned``: ``{name: planned array}``; ``dynamic``: outputs whose shape is known only
    after the run (checked then); ``bindable``: outputs a kernel can write into directly.
    Raises InputError."""
    if outputs is None:
        return {}
    if not isinstance(outputs, Mapping):
        raise InputError(f"outputs must be a dict {{output name: array}}, got "
                         f"{type(outputs).__name__}")
    bad = [n for n in outputs if n not in planned]
    if bad:
        raise InputError(f"unknown output name(s) {bad}; the model's outputs are "
                         f"{list(planned)}")
    user = {}
    for name, dst in outputs.items():
        if not isinstance(dst, np.ndarray):
            raise InputError(f"output {name!r}: expected a numpy array, got "
                             f"{type(dst).__name__}")
        if not dst.flags.writeable:
            raise InputError(f"output {name!r}: the array is read-only")
        if name in dynamic:
            user[name] = None
            continue
        src = planned[name]
        output_array(name, dst, src)
        direct = dst.dtype == src.dtype and dst.flags.c_contiguous and name in bindable
        user[name] = dst if direct else None
    return user
