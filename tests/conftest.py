"""Shared set-up for every test folder: the helpers beside this file (``opcheck``) import by
name from any group (pytest's default import mode puts each test file's own folder on the path,
not this one)."""

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
