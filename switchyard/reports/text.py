"""A report as text for a terminal: the verdict and its reasons first, then the facts and the tables."""

from __future__ import annotations

from switchyard.reports.model import Report
from switchyard.reports.tables import Section, facts, headline, sections, why
from switchyard.table import render

DETAIL_WIDTH = 100


def text_report(report: Report) -> str:
    width = max(len(label) for label, _ in facts(report))
    lines = [headline(report), *(f"  {reason}" for reason in why(report)), ""]
    lines += [f"{label.ljust(width)}  {value}" for label, value in facts(report)]
    for section in sections(report, detail_width=DETAIL_WIDTH):
        lines += ["", *section_lines(section)]
    return "\n".join(lines)


def section_lines(section: Section) -> list[str]:
    lines = [f"{section.title}:", *(f"  {note}" for note in section.notes)]
    if section.rows:
        lines.append(render(section.headers, section.rows))
    return lines
