"""Reading the M4 wide CSVs; shared by the peer script (its own venv) and the harness."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np


def read_wide(path: Path) -> tuple[list[str], list[np.ndarray]]:
    """Rows of `id, v1, v2, ...` (ragged, blank/NA padded) -> ids and value arrays."""
    ids, rows = [], []
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        for row in reader:
            ids.append(row[0])
            rows.append(np.array([float(v) for v in row[1:] if v not in ("", "NA")], dtype=float))
    return ids, rows
