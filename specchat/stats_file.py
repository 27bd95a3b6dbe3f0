"""`/stats` and `run --stats FILE`: a reply's and a session's figures, as JSON and as CSV.

Both files carry the same figures under vLLM's spec-decode metric names (Metrics.vllm), one
scope each ("reply", "session"). The CSV is long: one row per (scope, metric, position), so a
list (per-position acceptance) or a histogram becomes several rows that a spreadsheet or a
dataframe can pivot.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from engine import EngineError, Metrics


def stats_paths(path: Path) -> tuple[Path, Path]:
    """FILE names the pair: FILE.json and FILE.csv (a .json or .csv suffix given is replaced)."""
    base = path.with_suffix("") if path.suffix in (".json", ".csv") else path
    return base.with_name(base.name + ".json"), base.with_name(base.name + ".csv")


def figures(scopes: dict[str, Metrics], about: dict | None = None) -> dict:
    return {"about": about or {}, **{scope: m.vllm() for scope, m in scopes.items()}}


def csv_rows(scopes: dict[str, Metrics]) -> list[tuple[str, str, str, object]]:
    rows = []
    for scope, m in scopes.items():
        for name, value in m.vllm().items():
            if isinstance(value, list):  # per draft position, 1-based as vLLM's "position" label
                rows += [(scope, name, str(i + 1), v) for i, v in enumerate(value)]
            elif isinstance(value, dict):  # the histogram: accepted drafts -> steps
                rows += [(scope, name, key, v) for key, v in value.items()]
            else:
                rows.append((scope, name, "", value))
    return rows


def write_stats(path: Path, scopes: dict[str, Metrics], about: dict | None = None) -> tuple[Path, Path]:
    """Write both files (each whole or not at all); a path that cannot be written is one EngineError."""
    rows = [("scope", "metric", "position", "value"), *csv_rows(scopes)]
    return write_pair(path, figures(scopes, about), rows)


def write_pair(path: Path, data: object, rows: list[tuple]) -> tuple[Path, Path]:
    """`data` as PATH.json and `rows` (a header first) as PATH.csv."""
    json_path, csv_path = stats_paths(Path(path).expanduser())
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    for target, content in ((json_path, json.dumps(data, indent=2) + "\n"), (csv_path, text.getvalue())):
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".part")
            partial.write_text(content, encoding="utf-8")
            os.replace(partial, target)
        except OSError as err:
            raise EngineError(f"cannot write the figures to {target}: {err.strerror}") from None
    return json_path, csv_path
