"""Memory of a second session over the same model (issue #3, part 1), on the real zoo models.

Each model runs in a fresh subprocess: one session runs twice, then a second session of the same
Interpreter is prepared and run; the RSS growth is compared with the model's weight bytes.

    python bench/sessions.py [--models a,b] [--write docs/benchmarks.md]

``--write`` appends (or replaces) the "Second session memory" section of that file.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

import sprat
from sprat import zoo
from sprat.testing.memory import second_session_growth

MODELS = ["ppocr_v4_det", "ppocr_v4_rec", "ppocr_v2_cls", "nudenet_320n", "ddddocr_ocr",
          "ddddocr_det"]
HEADER = "## Second session memory"

def measure(key: str, workdir: pathlib.Path) -> dict:
    path = workdir / f"{key}.sprat"
    sprat.convert(zoo.fetch(key), path)
    return second_session_growth(key, path)


def table(rows: dict[str, dict]) -> str:
    mib = 1 << 20
    lines = ["| model | weights MiB | shared packed MiB | 2nd session after prepare MiB (% of "
             "weights) | after its first run MiB | its arena + scratch MiB |",
             "|---|---:|---:|---:|---:|---:|"]
    for key, m in rows.items():
        lines.append(f"| {key} | {m['weights'] / mib:.1f} | {m['packed'] / mib:.1f} | "
                     f"{m['prepared'] / mib:.2f} ({100 * m['prepared'] / m['weights']:.1f}%) | "
                     f"{m['ran'] / mib:.1f} | {(m['arena'] + m['workspace']) / mib:.1f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--write", metavar="FILE")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = {k: measure(k, pathlib.Path(tmp)) for k in args.models.split(",") if k}
    text = table(rows)
    print(text)
    if args.write:
        doc = pathlib.Path(args.write)
        old = doc.read_text() if doc.exists() else ""
        if HEADER in old:
            start = old.index(HEADER)
            nxt = old.find("\n## ", start + len(HEADER))
            old = old[:start] + (old[nxt + 1:] if nxt >= 0 else "")
        section = (f"{HEADER}\n\nRSS growth when a second session of the same Interpreter is "
                   f"prepared, then run (its activation arena and kernel scratch are its own; "
                   f"weights and packed weights are shared).\n\nCommand: "
                   f"`python bench/sessions.py --write {args.write}`\n\n{text}\n")
        doc.write_text(old.rstrip() + "\n\n" + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
