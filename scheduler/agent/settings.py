"""The node agent's configuration, read only from the environment.

==================  ==========================================================================
``GA_API_URL``      daemon base URL, e.g. ``http://10.0.0.5:8740``, or several      (required)
                    replicas' URLs comma-separated (reports fail over between them)
``GA_AGENT_TOKEN``  bearer token for reports, scoped to this job attempt            (required)
``GA_INSTANCE_ID``  this instance's id at its provider                              (required)
``GA_JOB_ID``       the job                                                         (required)
``GA_ATTEMPT``      placement attempt, integer ≥ 1                                  (required)
``GA_STORE_URL``    checkpoint store URL (see ``scheduler.checkpoints.open_store``) (required)
``GA_JOB_SPEC``     the job spec as JSON (``core.models.JobSpec``)             (required)
``GA_METADATA_FLAVOR``  where the preemption notice comes from; default ``none``:
                        ``aws`` (IMDSv2 ``spot/instance-action``), ``aliyun`` (ECS
                        ``instance/spot/termination-time``), ``azure`` (Scheduled Events
                        ``Preempt``, approved after the final checkpoint), ``gcp`` (metadata
                        ``instance/preempted``), ``none`` (no notice: on-demand, local, or a
                        market that reclaims without one, such as Vast.ai)
``GA_METADATA_URL``     instance-metadata root; default the flavor's link-local address
``GA_WORK_DIR``         working folder; default the current directory
==================  ==========================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from scheduler.agent.notices import FLAVORS
from core.models import JobSpec, format_validation_error

REQUIRED = ("GA_API_URL", "GA_AGENT_TOKEN", "GA_INSTANCE_ID", "GA_JOB_ID", "GA_ATTEMPT",
            "GA_STORE_URL", "GA_JOB_SPEC")


@dataclass(frozen=True)
class AgentSettings:
    """What one agent run needs; see the module docstring for the variables.

    ``token`` is left out of ``repr`` so the settings can be logged.
    """

    api_url: str
    token: str = field(repr=False)
    instance_id: str
    job_id: str
    attempt: int
    store_url: str
    spec: JobSpec
    metadata_flavor: str = "none"
    metadata_url: str | None = None
    work_dir: Path = field(default_factory=Path.cwd)

    @property
    def job_dir(self) -> Path:
        """Where the code bundle is unpacked and the command runs: ``WORK_DIR/job``."""
        return self.work_dir / "job"

    @property
    def checkpoint_dir(self) -> Path:
        """``WORK_DIR/job/<spec.checkpoint.dir>``, absolute (exported as SCHED_CHECKPOINT_DIR)."""
        return self.job_dir / self.spec.checkpoint.dir

    @property
    def progress_path(self) -> Path:
        """The job's progress file, ``WORK_DIR/progress.jsonl`` (exported as
        SCHED_PROGRESS_FILE): outside the checkpoint folder, so a restore never replaces it."""
        return self.work_dir / "progress.jsonl"

    @property
    def log_path(self) -> Path:
        """The command's stdout and stderr: ``WORK_DIR/job.log``."""
        return self.work_dir / "job.log"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AgentSettings:
        """Read the settings from ``environ`` (default ``os.environ``).

        Raises ``ValueError`` listing every missing or malformed variable (values of
        ``GA_AGENT_TOKEN`` are never included).
        """
        env = os.environ if environ is None else environ
        problems = [f"{name} is not set" for name in REQUIRED if not env.get(name)]
        attempt = 0
        if env.get("GA_ATTEMPT"):
            try:
                attempt = int(env["GA_ATTEMPT"])
                if attempt < 1:
                    raise ValueError
            except ValueError:
                problems.append(f"GA_ATTEMPT must be an integer >= 1, got {env['GA_ATTEMPT']!r}")
        bad_urls = [u for u in (env.get("GA_API_URL") or "").split(",")
                    if env.get("GA_API_URL") and not u.strip().startswith(("http://", "https://"))]
        if bad_urls:
            problems.append(f"GA_API_URL must be http(s) URLs, comma-separated; got {bad_urls!r}")
        flavor = env.get("GA_METADATA_FLAVOR") or "none"
        if flavor not in FLAVORS:
            problems.append(
                f"GA_METADATA_FLAVOR must be one of {', '.join(FLAVORS)}, got {flavor!r}")
        spec = None
        if env.get("GA_JOB_SPEC"):
            try:
                spec = JobSpec.model_validate_json(env["GA_JOB_SPEC"])
            except ValidationError as exc:
                problems.append("GA_JOB_SPEC is not a valid job spec: "
                                + format_validation_error(exc).replace("\n", "; "))
        if problems:
            raise ValueError("agent environment: " + "; ".join(problems))
        assert spec is not None
        return cls(
            api_url=",".join(u.strip().rstrip("/") for u in env["GA_API_URL"].split(",")),
            token=env["GA_AGENT_TOKEN"],
            instance_id=env["GA_INSTANCE_ID"],
            job_id=env["GA_JOB_ID"],
            attempt=attempt,
            store_url=env["GA_STORE_URL"],
            spec=spec,
            metadata_flavor=flavor,
            metadata_url=env.get("GA_METADATA_URL") or None,
            work_dir=Path(env.get("GA_WORK_DIR") or os.getcwd()).absolute(),
        )
