"""Rich renderings for the CLI, one module per thing rendered: :mod:`.jobs`, :mod:`.offers`,
:mod:`.history`, :mod:`.plans`, :mod:`.costs`, :mod:`.fleet`; what they share (cell formats,
the output width, tables that fit it): :mod:`.tables`. The names commands use are importable from here."""

from scheduler.cli.render.costs import cost_report
from scheduler.cli.render.fleet import fleet_table
from scheduler.cli.render.history import (
    history_empty,
    history_plot,
    history_table,
    import_summary,
    retention_line,
)
from scheduler.cli.render.jobs import (
    event_line,
    exit_code_meaning,
    failure_block,
    job_panel,
    jobs_table,
    latest_progress,
    money_line,
    placements,
    problems_table,
    timeline,
    work_line,
)
from scheduler.cli.render.offers import offers_table, price_age
from scheduler.cli.render.plans import plan_panel
from scheduler.cli.render.tables import (
    PIPE_WIDTH,
    TERMINAL_STATES,
    Column,
    fitted_table,
    new_table,
    output_width,
    plural,
    state_text,
    stdout_width,
)

__all__ = [
    "PIPE_WIDTH", "TERMINAL_STATES", "Column", "cost_report", "event_line", "exit_code_meaning",
    "failure_block", "fitted_table", "fleet_table", "history_empty", "history_plot",
    "history_table", "import_summary", "job_panel", "jobs_table", "latest_progress", "money_line",
    "new_table", "offers_table", "output_width", "placements", "plan_panel", "plural",
    "price_age", "problems_table", "retention_line", "state_text", "stdout_width", "timeline",
    "work_line",
]
