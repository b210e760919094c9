"""Parquet and JSON pieces of a LeRobotDataset that both the writer and the reader need: column <-> numpy
conversion, feature statistics, and the tasks table (a pandas-indexed parquet, written without pandas)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def column_to_numpy(column) -> np.ndarray:
    """A parquet column (scalars, or lists of equal length, possibly nested) as an N x ... numpy array."""
    import pyarrow as pa

    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if len(column) and (
        pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type) or pa.types.is_large_list(column.type)
    ):
        inner = column_to_numpy(column.flatten())
        return inner.reshape(len(column), -1, *inner.shape[1:])
    return column.to_numpy(zero_copy_only=False)


def vector_column(values: np.ndarray, dtype):
    """N x D values as a fixed-size-list column (how LeRobot's `datasets` schema stores a vector feature)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=dtype).reshape(len(values), -1)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), values.shape[1])


def feature_stats(values: np.ndarray, image: bool = False) -> dict[str, list]:
    """LeRobot's per-feature statistics: min, max, mean, std, count and quantiles, per component (per channel
    in [0, 1] as (3, 1, 1) for an N x H x W x 3 image stack)."""
    x = values.astype(np.float64)
    if image:
        x = x.reshape(-1, x.shape[-1]) / 255.0  # pixels x channels
    else:
        x = x.reshape(len(x), -1)
    out = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    out.update({f"q{round(q * 100):02d}": v for q, v in zip(QUANTILES, np.quantile(x, QUANTILES, axis=0))})
    shaped = {k: (v.reshape(-1, 1, 1) if image else v).tolist() for k, v in out.items()}
    shaped["count"] = [int(len(values))]
    return shaped


def image_sample(frames: np.ndarray, max_frames: int = 20, max_side: int = 32) -> np.ndarray:
    """A few frames, strided down to about ``max_side`` pixels: what image statistics are computed from."""
    pick = frames[np.linspace(0, len(frames) - 1, min(len(frames), max_frames)).astype(int)]
    step = max(1, max(pick.shape[1:3]) // max_side)
    return pick[:, ::step, ::step]


def write_tasks(path: Path, tasks: list[str]) -> None:
    """meta/tasks.parquet as LeRobot writes it with pandas: the task text is the (unnamed) index."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = pa.table(
        {"task_index": pa.array(range(len(tasks)), pa.int64()), "__index_level_0__": pa.array(tasks, pa.string())}
    )
    table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def read_tasks(path: Path) -> dict[int, str]:
    """task_index -> task text, from a tasks.parquet written by pandas (the text is its index) or by rlhw."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
    index = [c for c in meta.get("index_columns", []) if isinstance(c, str)]
    text = index[0] if index else next(c for c in ("task", "__index_level_0__") if c in table.column_names)
    return dict(zip(table.column("task_index").to_pylist(), table.column(text).to_pylist()))


def write_json(path: Path, data: Mapping) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False))
