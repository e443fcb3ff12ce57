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
``GA_JOB_USER``         the OS user the job's command runs as when the agent is root;
                        default ``gpu-arbiter-job``, used only if it exists (see
                        :mod:`scheduler.agent.job_user`; else the agent's own user)
``GA_NODE_RANK``        this node's rank in its gang, integer ≥ 0 and < ``GA_NNODES``;
                        default 0
``GA_NNODES``           the gang's node count, integer 1..64 (``spec.resources.nodes``
                        when set); default 1 (a one-node job: none of the gang steps)
``GA_NODE_ADDRESS``     a gang node's address its peers reach it at (IPv4/IPv6 or a host
                        name); default the source address of this host's route to the
                        daemon (set it on multi-homed hosts)
``GA_MASTER_PORT``      the rendezvous port rank 0 reports (``MASTER_PORT``), 1..65535;
                        default a free port rank 0's agent picks
==================  ==========================================================================
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from core.models import JobSpec, format_validation_error
from core.models.agents import Address
from core.models.specs import MAX_NODES
from scheduler.agent.job_user import DEFAULT_JOB_USER
from scheduler.agent.notices import FLAVORS

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
    job_user: str = DEFAULT_JOB_USER
    node_rank: int = 0
    nnodes: int = 1
    node_address: str | None = None
    master_port: int | None = None

    @property
    def is_gang(self) -> bool:
        """Whether this agent runs one node of a gang (``nnodes`` > 1)."""
        return self.nnodes > 1

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
        rank, nnodes, address, master_port = _gang_settings(env, problems)
        if env.get("GA_JOB_SPEC"):
            try:
                spec = JobSpec.model_validate_json(env["GA_JOB_SPEC"])
            except ValidationError as exc:
                problems.append("GA_JOB_SPEC is not a valid job spec: "
                                + format_validation_error(exc).replace("\n", "; "))
        nnodes_ok = not any(p.startswith("GA_NNODES") for p in problems)
        if spec is not None and env.get("GA_NNODES") and nnodes_ok \
                and nnodes != spec.resources.nodes:
            problems.append(f"GA_NNODES is {nnodes} but the job spec asks for "
                            f"{spec.resources.nodes} nodes")
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
            job_user=env.get("GA_JOB_USER") or DEFAULT_JOB_USER,
            node_rank=rank,
            nnodes=nnodes,
            node_address=address,
            master_port=master_port,
        )


def _integer(env: Mapping[str, str], name: str, default: int, low: int, high: int,
             problems: list[str]) -> int:
    """``env[name]`` as an integer in ``low..high`` (``default`` when unset); a malformed value
    is appended to ``problems`` and ``default`` returned."""
    text = env.get(name)
    if not text:
        return default
    try:
        value = int(text)
        if not low <= value <= high:
            raise ValueError
    except ValueError:
        problems.append(f"{name} must be an integer {low}..{high}, got {text!r}")
        return default
    return value


_ADDRESS = TypeAdapter(Address)


def _is_address(text: str) -> bool:
    """Whether ``text`` is what a report may carry as a node's address."""
    try:
        _ADDRESS.validate_python(text)
    except ValidationError:
        return False
    return True


def _gang_settings(env: Mapping[str, str],
                   problems: list[str]) -> tuple[int, int, str | None, int | None]:
    """(rank, nnodes, address override, master port override) from ``env``; problems are
    appended to ``problems``."""
    nnodes = _integer(env, "GA_NNODES", 1, 1, MAX_NODES, problems)
    rank = _integer(env, "GA_NODE_RANK", 0, 0, MAX_NODES - 1, problems)
    if rank >= nnodes and not any(p.startswith("GA_NNODES") for p in problems):
        problems.append(f"GA_NODE_RANK must be below GA_NNODES ({nnodes}), got {rank}")
    address = env.get("GA_NODE_ADDRESS") or None
    if address is not None and not _is_address(address):
        problems.append("GA_NODE_ADDRESS must be an IPv4/IPv6 address or a host name "
                        f"(letters, digits, '.', ':', '_', '-'; at most 255), got {address!r}")
        address = None
    port = _integer(env, "GA_MASTER_PORT", 0, 1, 65535, problems) or None
    return rank, nnodes, address, port
