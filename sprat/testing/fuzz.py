"""Mutation fuzzing of model bytes: every outcome must be a result or a ``SpratError``.

A hostile or corrupt file (``.sprat``, ONNX, TFLite) may fail to load, to prepare or to run, but
only with a typed sprat error: never numpy's ``MemoryError`` from a size the file declared, a
``ValueError`` from a shape, a crash, or a hang (issue 11, part 5). ``mutations`` makes the
corrupt files (truncation, bit flips, random bytes, 4-byte overwrites with extreme int32
values); ``try_model`` loads, prepares and runs one of them; ``run_cases`` does many in a child
process, so that a crash or a hang is seen as such (a negative exit code, a timeout) and names
the case that caused it.

Used by ``tests/unit/test_fuzz.py`` (a fixed seed, bounded in time) and as a command:
``python -m sprat.testing.fuzz model.sprat --cases 300 --seed 0``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

# NOTE: the words that break size arithmetic: INT32_MAX, INT32_MIN, all ones (-1 / UINT32_MAX)
EXTREMES = (0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)
KINDS = ("truncate", "bitflip", "random", "extreme")
# NOTE: a fed symbolic dim, and the largest element count fed to a mutated model's input
DIM = 1
MAX_FEED = 1 << 22


def mutations(data: bytes, n: int, seed: int = 0,
              head: int = 1 << 16) -> list[tuple[str, bytes]]:
    """``n`` mutated copies of ``data`` as ``(description, bytes)``, half of them within the
    first ``head`` bytes, the kinds in turn:
    truncation at a random length, 1-8 random bit flips, 1-16 random bytes at random places,
    a 4-byte little-endian overwrite with one of ``EXTREMES`` at a random 4-aligned offset."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        kind = KINDS[k % len(KINDS)]
        buf = bytearray(data)
        # NOTE: every other case stays in the first ``head`` bytes, where the structure is
        # (flatbuffer tables, protobuf fields); weights make up most of a file's bytes
        size = len(data) if k % 2 == 0 else min(len(data), head)
        if kind == "truncate":
            cut = int(rng.integers(0, size))
            buf = bytearray(data[:cut])
            what = f"truncate at {cut}"
        elif kind == "bitflip":
            flips = [(int(rng.integers(0, size)), int(rng.integers(0, 8)))
                     for _ in range(int(rng.integers(1, 9)))]
            for pos, bit in flips:
                buf[pos] ^= 1 << bit
            what = f"flip bits {flips}"
        elif kind == "random":
            places = [int(p) for p in rng.integers(0, size, int(rng.integers(1, 17)))]
            for pos in places:
                buf[pos] = int(rng.integers(0, 256))
            what = f"random bytes at {places}"
        else:
            pos = int(rng.integers(0, max(size // 4, 1))) * 4
            word = EXTREMES[int(rng.integers(0, len(EXTREMES)))]
            buf[pos:pos + 4] = word.to_bytes(4, "little")[:max(0, size - pos)]
            what = f"write {word:#x} at {pos}"
        out.append((f"{kind}: {what}", bytes(buf)))
    return out


def _feed(spec) -> np.ndarray | None:
    """A feed for a declared input (symbolic dims -> ``DIM``), None when it would be huge."""
    shape = tuple(d if isinstance(d, int) and d >= 0 else DIM for d in (spec.shape or ()))
    count = int(np.prod(shape, dtype=object)) if shape else 1
    if count > MAX_FEED:
        return None
    dtype = spec.dtype if spec.dtype is not None else np.dtype(np.float32)
    if dtype.kind == "f":
        return np.random.default_rng(0).standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return np.zeros(shape, dtype)
    if dtype.kind == "b":
        return np.zeros(shape, bool)
    return None


def try_model(data: bytes) -> str:
    """Load ``data`` (``.sprat``, ONNX or TFLite bytes), prepare a session and run it once on
    feeds of the declared shapes. Returns ``"ok"`` or the name of the SpratError raised; any
    other exception propagates (that is the bug the fuzzer looks for)."""
    import sprat
    from sprat.converter import convert_graph
    from sprat.errors import SpratError
    from sprat.format import MAGIC

    try:
        if data[:len(MAGIC)] == MAGIC:
            interp = sprat.Interpreter.from_buffer(data)
        else:
            interp = sprat.Interpreter.from_graph(convert_graph(data))
        sess = interp.create_session()
        feeds = {}
        for spec in sess.inputs:
            arr = _feed(spec)
            if arr is None:
                return "skipped: no feed for the declared input"
            feeds[spec.name] = arr
        sess.run(feeds)
        return "ok"
    except SpratError as e:
        return type(e).__name__


_CHILD = r"""
import json, sys, traceback
from sprat.testing.fuzz import try_model
cases = json.load(open(sys.argv[1]))
for k, path in enumerate(cases):
    print(json.dumps({"case": k, "started": True}), flush=True)
    data = open(path, "rb").read()
    try:
        outcome = {"case": k, "outcome": try_model(data)}
    except BaseException as e:  # NOTE: the finding: anything but a SpratError
        outcome = {"case": k, "bug": f"{type(e).__name__}: {e}"[:500],
                   "where": traceback.format_exc().splitlines()[-3:]}
    print(json.dumps(outcome), flush=True)
"""


def run_cases(cases: list[tuple[str, bytes]], timeout: float = 600.0) -> dict:
    """Run ``cases`` (from ``mutations``) through ``try_model`` in one child process.

    Returns ``{"outcomes": {outcome: count}, "bugs": [(description, error)]}``: a bug is any
    exception other than a SpratError, a crash (the child died: the case it was running is
    named, the rest are run in a new child) or a hang (no answer within ``timeout`` seconds
    for the whole batch)."""
    outcomes: dict[str, int] = {}
    bugs: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for k, (_, data) in enumerate(cases):
            path = os.path.join(tmp, f"{k}.bin")
            with open(path, "wb") as f:
                f.write(data)
            paths.append(path)
        start = 0
        while start < len(cases):
            listing = os.path.join(tmp, "cases.json")
            with open(listing, "w") as f:
                json.dump(paths[start:], f)
            try:
                proc = subprocess.run([sys.executable, "-c", _CHILD, listing], timeout=timeout,
                                      capture_output=True, text=True)
            except subprocess.TimeoutExpired as e:
                out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
                last = _last_started(out, start)
                bugs.append((cases[last][0], f"hang: no result within {timeout} s"))
                _collect(out, start, cases, outcomes, bugs)
                start = last + 1
                continue
            last = _collect(proc.stdout, start, cases, outcomes, bugs)
            if proc.returncode != 0:
                crashed = _last_started(proc.stdout, start)
                bugs.append((cases[crashed][0], f"crash: exit code {proc.returncode}; "
                             f"{proc.stderr.strip()[-300:]}"))
                start = crashed + 1
            else:
                start = last + 1 if last is not None else len(cases)
    return {"outcomes": outcomes, "bugs": bugs}


def _last_started(out: str, start: int) -> int:
    last = start
    for line in out.splitlines():
        rec = json.loads(line) if line.startswith("{") else {}
        if rec.get("started"):
            last = start + rec["case"]
    return last


def _collect(out, start, cases, outcomes, bugs):
    last = None
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        rec = json.loads(line)
        if "outcome" in rec:
            outcomes[rec["outcome"]] = outcomes.get(rec["outcome"], 0) + 1
            last = start + rec["case"]
        elif "bug" in rec:
            bugs.append((cases[start + rec["case"]][0], rec["bug"] + " at " + " | ".join(
                s.strip() for s in rec["where"])))
            last = start + rec["case"]
    return last


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a .sprat, .onnx or .tflite file to mutate")
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds for the whole run")
    args = ap.parse_args(argv)
    with open(args.model, "rb") as f:
        data = f.read()
    report = run_cases(mutations(data, args.cases, args.seed), args.timeout)
    print(json.dumps(report["outcomes"], sort_keys=True))
    for what, err in report["bugs"]:
        print(f"BUG {what}: {err}")
    return 1 if report["bugs"] else 0


if __name__ == "__main__":
    sys.exit(main())
