"""Per-step metrics to JSONL and TensorBoard, and a timer that times each phase of a step by name."""

from __future__ import annotations

import json
import math
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


class PhaseTimer:
    """Accumulates wall-clock seconds per named phase: ``with timer("generate"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] += time.perf_counter() - start

    def add(self, phase: str, seconds: float) -> None:
        """Count time measured elsewhere (e.g. the reward wait that :class:`RewardScorer` reports)."""
        self.seconds[phase] += seconds

    def as_metrics(self) -> dict[str, float]:
        """``{"timing/<phase>": seconds}``."""
        return {f"timing/{k}": v for k, v in self.seconds.items()}


class MetricsLogger:
    """Appends one JSON object per step to ``output_dir/metrics.jsonl`` and mirrors scalars to TensorBoard.

    Args:
        output_dir: the run directory.
        tensorboard: also write TensorBoard events under ``output_dir/tensorboard``.
        resume_step: when resuming from this step, lines logged after it (by the interrupted run) are dropped, so
            the file reads as one uninterrupted run.
    """

    def __init__(self, output_dir: str | Path, *, tensorboard: bool = True, resume_step: int | None = None) -> None:
        self.path = Path(output_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None and self.path.exists():
            kept = [line for line in self.path.read_text().splitlines() if _step_of(line) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._file = self.path.open("a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package (train extra)

            self._tb = SummaryWriter(str(Path(output_dir) / "tensorboard"), purge_step=resume_step)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Write ``metrics`` for ``step``; NaN/inf become ``null`` in JSON (and are skipped in TensorBoard)."""
        clean = {k: _finite_or_none(v) for k, v in metrics.items()}
        self._file.write(json.dumps({"step": step, **clean}) + "\n")
        self._file.flush()
        if self._tb is not None:
            for key, value in clean.items():
                if isinstance(value, int | float) and value is not None:
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        """Flush and close both outputs."""
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return sys.maxsize  # a torn last line from a crash: dropped


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``run_dir/metrics.jsonl``; a line cut short by a crash (or being written now) is skipped.

    Raises:
        FileNotFoundError: the run has no metrics file (the message names the path).
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: is {run_dir} a trainer run directory that has logged a step?")
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows
