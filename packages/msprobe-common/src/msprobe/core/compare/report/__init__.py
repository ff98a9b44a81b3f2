"""The reports of a comparison: the table's columns and cells (:mod:`.table`), the xlsx, csv and html files
(:mod:`.xlsx`, :mod:`.html` with its page's CSS and JavaScript as package data, :mod:`.write`), what the console
says, the escaping each output needs (:mod:`.escape`) and the progress of the tensor comparison
(:mod:`.progress`).

The last room of the pipeline: it reads what :mod:`msprobe.core.compare.judge` decided and writes no verdict.
"""

from msprobe.core.compare.report.escape import csv_row, printable, script_literal
from msprobe.core.compare.report.progress import Progress
from msprobe.core.compare.report.table import PERCENT_COLUMNS, columns, row_cells
from msprobe.core.compare.report.write import write_reports

__all__ = ["PERCENT_COLUMNS", "Progress", "columns", "csv_row", "printable", "row_cells", "script_literal",
           "write_reports"]
