"""What every rendering of the CLI shares: cell formats (money, times, states), the output
width, and :func:`fitted_table`, which fits a table in that width by dropping its
lower-priority columns first and saying which. Tables use light borders and short columns so
they stay readable in an 80-column terminal: ids and numbers are never cut (``no_wrap`` with
their full width as minimum)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

from core.units import usd_small

STATE_STYLE = {
    "pending": "yellow", "provisioning": "cyan", "running": "green",
    "checkpointing": "magenta", "migrating": "magenta", "succeeded": "bold green",
    "failed": "bold red", "cancelled": "dim", "stopped": "bold yellow",
}
TERMINAL_STATES = ("succeeded", "failed", "cancelled", "stopped")


def usd(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def percent(value: float | None) -> str:
    """``66.4%`` with one decimal; ``-`` for none; a saving that rounds to zero is ``0.0%``,
    never ``-0.0%``."""
    return "-" if value is None else f"{round(value, 1) + 0.0:.1f}%"


def usd_cents(value: float | None) -> str:
    """Cents for large sums, four decimals below $100 (a short run's $0.0020 is not $0.00)."""
    return usd(value, 2 if value is not None and abs(value) >= 100 else 4)


def per_1k(value: float | None) -> str:
    """USD per 1,000 work units (:func:`core.units.usd_small`); ``-`` when unknown."""
    return "-" if value is None else usd_small(value)


def count(value: float | None) -> str:
    """A number of work units, short: ``950``, ``12.5k``, ``3M``, ``1.2e+12``."""
    if value is None:
        return "?"
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size and abs(value) < size * 1000:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.2e}"


def clock(iso: str | None) -> str:
    if not iso:
        return "-"
    return datetime.fromisoformat(iso).strftime("%H:%M:%S")


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def state_text(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, ""))


def short_price(value: float | None) -> str:
    """A price in 4 significant figures at most 6 characters wide (0.9180, 12.24, 1,234)."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:.4g}" if value >= 1 else f"{value:.4f}".rstrip("0").rstrip(".") or "0"


# Output that is not a terminal (a pipe, a file, CI logs) is not cut to rich's 80-column
# default: COLUMNS when set, else this.
PIPE_WIDTH = 200
# Columns between two table columns (divider + collapsed padding of the light borders).
COLUMN_GAP = 2
# A wrapping text column (an offer's "provider/zone type market") keeps at least this width.
WRAP_MIN_WIDTH = 16


def stdout_width() -> int | None:
    """Console width for stdout: ``None`` on a terminal (rich follows its size), else the
    ``COLUMNS`` environment variable or :data:`PIPE_WIDTH`."""
    if sys.stdout.isatty():
        return None
    cols = os.environ.get("COLUMNS", "")
    return int(cols) if cols.isdigit() and int(cols) > 0 else PIPE_WIDTH


def output_width() -> int:
    """Characters a table may use on stdout (see :func:`stdout_width`)."""
    return stdout_width() or shutil.get_terminal_size().columns


@dataclass(frozen=True)
class Column:
    """A column of :func:`fitted_table`: ``drop`` 0 is always shown; when the table is too
    wide, the column with the highest ``drop`` goes first. ``wrap`` columns (free text) fold
    onto more lines down to :data:`WRAP_MIN_WIDTH`; all others are never cut."""

    header: str
    justify: str = "right"
    drop: int = 0
    wrap: bool = False


def _cell_width(cell: Any) -> int:
    text = cell.plain if isinstance(cell, Text) else str(cell)
    return max((cell_len(line) for line in text.split("\n")), default=0)


def fitted_table(title: str | None, columns: Sequence[Column], rows: Sequence[Sequence[Any]],
                 width: int | None = None, expand: bool = False) -> Table:
    """A table of ``rows`` (one cell per column: str or Text) that fits in ``width``
    characters (default :func:`output_width`) by dropping columns by ``drop`` priority; the
    caption names the dropped ones. Kept non-wrapping columns get their widest cell as their
    minimum width, so ids and numbers are never cut."""
    width = output_width() if width is None else width
    need = [max([cell_len(c.header)] + [_cell_width(r[i]) for r in rows])
            for i, c in enumerate(columns)]
    floor = [min(n, WRAP_MIN_WIDTH) if c.wrap else n for n, c in zip(need, columns)]
    keep = list(range(len(columns)))

    def total() -> int:
        return sum(floor[i] for i in keep) + COLUMN_GAP * (len(keep) - 1)

    while total() > width:
        droppable = [i for i in keep if columns[i].drop > 0]
        if not droppable:
            break
        keep.remove(max(droppable, key=lambda i: (columns[i].drop, i)))
    table = new_table(title, expand)
    for i in keep:
        c = columns[i]
        table.add_column(c.header, justify=c.justify, no_wrap=not c.wrap, min_width=floor[i],
                         overflow="fold", ratio=1 if c.wrap else None)
    for r in rows:
        table.add_row(*[r[i] for i in keep])
    hidden = [c.header for i, c in enumerate(columns) if i not in keep]
    if hidden:
        table.caption = f"not shown at {width} columns: {', '.join(hidden)} (a wider terminal or COLUMNS shows them)"
        table.caption_justify = "left"
    return table


def new_table(title: str | None = None, expand: bool = True) -> Table:
    """An empty table in the CLI's light style."""
    return Table(title=title, box=box.SIMPLE_HEAD, expand=expand, padding=(0, 1),
                 pad_edge=False, collapse_padding=True, show_edge=False,
                 title_justify="left", title_style="bold")
