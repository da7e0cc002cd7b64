"""The soak's picture: memory and open files of the product's processes over time, the CPU of every
process watched (the applications and brokers too), and the pause of every switch, restarts marked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tests.helpers.soak import Sampler

COLOURS = {"gateway": "tab:blue", "mirror": "tab:green", "worker": "tab:orange"}


def plot(
    path: Path, sampler: Sampler, switches: list[dict[str, Any]], restarts: list[tuple[float, str]]
) -> None:
    figure, (memory, files, cpu, pauses) = plt.subplots(4, 1, figsize=(14, 16), dpi=100, sharex=True)
    labelled: set[str] = set()
    names = list(dict.fromkeys(i.name for i in sampler.instances))
    for instance in sampler.instances:
        minutes = [s.t / 60 for s in instance.samples]
        label = None if instance.name in labelled else instance.name
        labelled.add(instance.name)
        colour = COLOURS.get(instance.name, f"C{3 + names.index(instance.name)}")
        cpu.plot(minutes[1:], instance.cpu_percent(), color=colour, label=label, linewidth=0.8)
        if instance.judged:  # a broker's heap and files are the JVM's business: not judged, not drawn
            memory.plot(minutes, [s.rss_mib for s in instance.samples], color=colour, label=label)
            files.plot(minutes, [s.fds for s in instance.samples], color=colour, label=label)
    memory.set_ylabel("resident memory (MiB)")
    memory.set_ylim(bottom=0)
    memory.legend(loc="lower right")
    memory.set_title(f"soak: {len(switches)} switches in {sampler.now() / 60:.0f} minutes")
    cpu.set_ylabel("CPU (% of one core)")
    cpu.set_ylim(bottom=0)
    cpu.legend(loc="upper right", ncol=4, fontsize=8)
    files.set_ylabel("open file descriptors")
    files.set_ylim(bottom=0)
    watches = files.twinx()
    watches.plot([t / 60 for t, _ in sampler.watches], [w for _, w in sampler.watches],
                 color="grey", linestyle=":", label="ZooKeeper watches")  # fmt: skip
    watches.set_ylabel("ZooKeeper watches")
    watches.set_ylim(bottom=0)
    watches.legend(loc="lower right")
    at = [s["at"] / 60 for s in switches]
    pauses.bar(at, [s["sends_held_s"] for s in switches], width=0.25, color="tab:red",
               label="longest time an application went without an acknowledgement")  # fmt: skip
    pauses.plot(at, [s["held_s"] for s in switches], "ko", label="clients held (the saga's account)")
    top = 1.6 * max((max(s["sends_held_s"], s["held_s"]) for s in switches), default=1.0)
    baseline = [math.nan if s["broker_read_s"] is None else s["broker_read_s"] for s in switches]
    pauses.plot(at, [min(b, top) for b in baseline], "b^",
                label="baseline: the broker's read of the log ends (none: gave up)")  # fmt: skip
    for t, b in zip(at, baseline, strict=True):
        if b > top:  # drawn at the edge, its value written: the pauses keep their scale
            pauses.annotate(f"{b:.1f} s", (t, top), xytext=(0, -8), textcoords="offset points", color="b",
                            rotation=90, ha="center", va="top")  # fmt: skip
    pauses.set_ylabel("pause per switch (s)")
    pauses.set_xlabel("minutes")
    pauses.set_ylim(0, top)
    pauses.legend(loc="upper left")
    for axis in (memory, files, cpu, pauses):
        axis.grid(alpha=0.3)
        for t, what in restarts:
            axis.axvline(t / 60, color="grey", linestyle="--", linewidth=0.8)
            if axis is memory:
                axis.annotate(f"{what} restarted", (t / 60, 0), rotation=90, fontsize=8,
                              xytext=(3, 5), textcoords="offset points")  # fmt: skip
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
