"""The named stages of sprat's pipeline, in order: one registry for the API and the CLI.

``import`` (the source model as imported), then one stage per pass of
``sprat.passes.DEFAULT_PIPELINE`` (``convert_graph(until=...)``; these need the ONNX or TFLite
source), ``passes`` (the converted graph, as stored in a ``.sprat`` file), then the stages of a
prepared session (``Session.dump``): ``assigned`` (the backend of every node) and ``planned``
(also the shape and arena offset of every output). ``sprat dump --stage NAME`` takes any of them.
"""

from __future__ import annotations

from typing import NamedTuple

#: what a stage is shown from
CONVERT, MODEL, SESSION = "convert", "model", "session"

IMPORT = "import"
PASSES = "passes"
SESSION_STAGES = ("assigned", "planned")


class Stage(NamedTuple):
    """A named stage: ``kind`` is ``convert`` (needs the source model), ``model`` (the
    converted graph) or ``session`` (a prepared session)."""

    name: str
    kind: str


def converter_stages() -> list[str]:
    """``import``, then the name of every pass of the default pipeline, in order."""
    from .passes import DEFAULT_PIPELINE

    return [IMPORT, *(name for name, _ in DEFAULT_PIPELINE)]


def stages(source: bool = True) -> list[Stage]:
    """Every stage in order; ``source=False``: without the converter stages (a ``.sprat``
    file has no source model to convert)."""
    conv = [Stage(n, CONVERT) for n in converter_stages()] if source else []
    return [*conv, Stage(PASSES, MODEL), *(Stage(n, SESSION) for n in SESSION_STAGES)]


def find(name: str, source: bool = True) -> Stage:
    """The stage called ``name``. Raises ValueError naming the available stages; a converter
    stage asked of a model without its source says that it needs the source."""
    for s in stages(source):
        if s.name == name:
            return s
    if not source and name in converter_stages():
        raise ValueError(f"stage {name!r} needs an ONNX or TFLite source model")
    raise ValueError(f"unknown stage {name!r}; stages: {', '.join(s.name for s in stages(source))}")
