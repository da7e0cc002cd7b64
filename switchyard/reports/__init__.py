"""Reports of sagas and DR drills, built from the ledger alone: the model and its verdict against the
objectives (``build``, ``model``, ``verdict``), the period table (``history``), and three renderings of the
same contents — text (``text``), JSON (``document``) and one self-contained HTML page (``html``, with
``plots`` drawn by matplotlib). ``html`` and ``plots`` import matplotlib: import them only to draw."""

from switchyard.reports.build import ReportError, report_of, report_of_run
from switchyard.reports.model import Report

__all__ = ["Report", "ReportError", "report_of", "report_of_run"]
