"""A chaos run's picture and figures: how long clients were held in each trial, by the process struck,
beside the bound each trial was judged against (how long that process was gone and an approval took,
plus the slack)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from tests.helpers.chaos import Trial

MARKERS = {"SIGKILL": "x", "SIGSTOP": "o"}


def summary(trials: list[Trial], by: str) -> list[list[object]]:
    """Per process struck (``by="victim"``) or per saga (``by="kind"``): trials, failures, clients held
    p50 and max (seconds)."""
    groups: dict[str, list[Trial]] = defaultdict(list)
    for trial in trials:
        key = trial.kind if by == "kind" else (trial.struck.victim if trial.struck else "-")
        groups[key].append(trial)
    rows: list[list[object]] = []
    for key, group in sorted(groups.items()):
        held = [t.held_most_s for t in group]
        failed = sum(1 for t in group if t.problems)
        rows.append([key, len(group), failed, f"{statistics.median(held):.2f}", f"{max(held):.2f}"])
    return rows


def save(directory: Path, seed: int, trials: list[Trial], title: str = "") -> Path:
    """The run's trials as JSON and its picture, in ``directory``; the picture's path. ``title``: what
    the picture shows, where not one run's trials (its seed)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"chaos-{seed}.json").write_text(json.dumps([asdict(t) for t in trials], indent=1))
    victims = sorted({t.struck.victim for t in trials if t.struck})
    figure, axis = plt.subplots(figsize=(max(8, 1.4 * len(victims)), 5), dpi=100)
    for x, victim in enumerate(victims):
        struck = [t for t in trials if t.struck and t.struck.victim == victim]
        for n, trial in enumerate(struck):
            assert trial.struck is not None
            at = x + (n - (len(struck) - 1) / 2) * min(0.6 / max(len(struck), 1), 0.12)
            failed = bool(trial.problems)
            axis.scatter(at, trial.held_most_s, marker=MARKERS[trial.struck.signal], s=40,
                         color="tab:red" if failed else "tab:blue", zorder=3)  # fmt: skip
            axis.plot([at - 0.04, at + 0.04], [trial.allowed_s] * 2, color="grey", linewidth=1)
    axis.set_xticks(range(len(victims)), victims, rotation=20)
    axis.set_ylabel("clients held (s): longest wait for an acknowledgement")
    axis.set_ylim(bottom=0)
    failures = sum(1 for t in trials if t.problems)
    axis.set_title(
        f"{title or f'chaos seed {seed}'}: {len(trials)} trials, {failures} failed\n"
        "x SIGKILL, o SIGSTOP, red: failed; grey: the bound (the process gone, an approval taken, + 10 s)"
    )
    axis.grid(alpha=0.3)
    figure.tight_layout()
    path = directory / f"chaos-{seed}.png"
    figure.savefig(path)
    plt.close(figure)
    return path
