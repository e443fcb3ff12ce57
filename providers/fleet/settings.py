"""Configuration of the fleet adapter: what a user writes under ``providers:`` with
``kind: fleet``::

    - kind: fleet
      name: fleet                          # the offers' provider name
      known_hosts: ~/.ssh/known_hosts      # host keys trusted (besides pinned ones)
      work_root: ~/.gpu-arbiter/fleet     # on each host; ~/ is the SSH user's home
      agent: {python: /opt/gpu-arbiter/venv/bin/python3}   # installed on the hosts, or
      # agent: {pip_spec: "gpu-arbiter==0.1.0", venv: /opt/gpu-arbiter/venv}  # shipped
      hosts:
        - name: box1
          address: 10.0.0.5
          user: ml
          identity_file: ~/.ssh/fleet_ed25519   # or use_agent: true (the SSH agent)
          labels: {site: office, rack: r2}
          gpus: [{model: RTX4090, count: 2}]    # optional: nvidia-smi's answer wins
          cost_per_gpu_hour_usd: 0.22
          host_key: "ssh-ed25519 AAAAC3Nza..."  # optional pin

Private keys never appear here: ``identity_file`` names a key file (its passphrase, if any,
comes from the SSH agent), or ``use_agent: true`` takes the keys the SSH agent
(``SSH_AUTH_SOCK``) holds. Every host key is verified: a host needs its key in
``known_hosts`` or pinned as ``host_key`` (the pin alone is trusted then).

A host needs a POSIX ``sh`` with ``flock`` and ``setsid`` (util-linux), ``/proc`` (Linux),
the SFTP subsystem enabled in its sshd, NVIDIA's ``nvidia-smi`` (else configured ``gpus``) and
a python that imports the agent (or ``python3 -m venv`` and pip access for a shipped one).

**cost_per_gpu_hour_usd** is the amortised cost of one GPU for one hour of use::

    (purchase_usd / (lifetime_h × utilisation) + power_kw × usd_per_kwh) / gpus

e.g. an 8 × RTX 4090 server bought for 24,000 USD, used 4 years (35,040 h) at 60 %, drawing
4.0 kW at 0.15 USD/kWh: (24000 / 21024 + 0.60) / 8 = 0.22 USD per GPU-hour. With the
default 0 the fleet always wins over a cloud; with its real cost a cloud that is cheaper
(a spot market at night) takes the job.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from core.models import StrictModel
from core.models.base import Count, Number
from providers.regional_settings import DEFAULT_AGENT_VENV, OneLine

DEFAULT_WORK_ROOT = "~/.gpu-arbiter/fleet"
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}\Z")
_LABEL_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}\Z")
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\Z")
_ADDRESS_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,253}\Z")
_SAFE_PATH_RE = re.compile(r"^/[A-Za-z0-9_./-]*\Z")
_WORK_ROOT_RE = re.compile(r"^(/|~/)[A-Za-z0-9_./-]*\Z")
_VAR_RE = re.compile(r"\$(\w+)|\$\{(\w+)\}")  # as the config's paths are expanded
_HOST_KEY_RE = re.compile(r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+\Z")


def _variables_set(path: Path) -> Path:
    """``path`` unchanged; raises ``ValueError`` naming each ``$VAR``/``${VAR}`` in it that
    is not set (it would stay as written and name no file). ``GA_DATA_DIR`` has a default."""
    unset = sorted({m.group(1) or m.group(2) for m in _VAR_RE.finditer(str(path))}
                   - set(os.environ) - {"GA_DATA_DIR"})
    if unset:
        raise ValueError(f"{', '.join('$' + name for name in unset)} in {str(path)!r} "
                         f"{'is' if len(unset) == 1 else 'are'} not set in the environment")
    return path


def _matching(pattern: re.Pattern[str], what: str):
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{value!r} is not {what}")
        return value
    return AfterValidator(check)


HostName = Annotated[str, _matching(_NAME_RE, "a host name of 1-40 [A-Za-z0-9_-]")]
Label = Annotated[str, _matching(_LABEL_RE, "a label of 1-64 [A-Za-z0-9_.-] (no '/')")]
RemotePath = Annotated[str, _matching(_SAFE_PATH_RE, "an absolute path of [A-Za-z0-9_./-]")]
WorkRoot = Annotated[str, _matching(_WORK_ROOT_RE, "an absolute path, or one under ~/ (the SSH "
                                    "user's home), of [A-Za-z0-9_./-]")]


class HostLabels(StrictModel):
    """Where a host stands: ``site`` is shown as the offers' region, ``rack`` as their zone."""

    site: Label | None = None
    rack: Label | None = None


class GpuConfig(StrictModel):
    """GPUs of one model on a host, used when the host has no ``nvidia-smi``. ``model`` is a
    name of :mod:`providers.catalog.gpus` (``RTX4090``) or the GPU's own (normalised);
    ``vram_gib`` per GPU defaults to the catalog's figure."""

    model: OneLine
    count: Count = Field(ge=1, le=64)
    vram_gib: Number | None = Field(default=None, gt=0)


class HostSettings(StrictModel):
    """One host of the fleet. ``port`` defaults to 22; exactly one of ``identity_file`` and
    ``use_agent: true``; ``vcpus``/``memory_gib`` are detected (``nproc``,
    ``/proc/meminfo``) when not given; ``work_root`` overrides the fleet's."""

    name: HostName
    address: Annotated[str, _matching(_ADDRESS_RE, "a host name or IP address")]
    port: Count = Field(default=22, ge=1, le=65535)
    user: Annotated[str, _matching(_USER_RE, "a user name")]
    identity_file: Path | None = None
    use_agent: bool = False
    labels: HostLabels = Field(default_factory=HostLabels)
    gpus: list[GpuConfig] | None = None
    cost_per_gpu_hour_usd: Number = Field(default=0.0, ge=0)
    host_key: str | None = None
    work_root: WorkRoot | None = None
    vcpus: Count | None = Field(default=None, ge=1)
    memory_gib: Number | None = Field(default=None, gt=0)

    @field_validator("identity_file")
    @classmethod
    def _identity_variables_set(cls, value: Path | None) -> Path | None:
        return value if value is None else _variables_set(value)

    @field_validator("host_key")
    @classmethod
    def _host_key_shape(cls, value: str | None) -> str | None:
        if value is not None:
            value = " ".join(value.split()[:2])  # a known_hosts-style comment is dropped
            if not _HOST_KEY_RE.match(value):
                raise ValueError("must be '<type> <base64>' as in known_hosts (ssh-ed25519, "
                                 "ecdsa-sha2-nistp256/384/521, ssh-rsa)")
        return value

    @model_validator(mode="after")
    def _one_way_in(self) -> HostSettings:
        if (self.identity_file is None) == (not self.use_agent):
            raise ValueError("set identity_file (a private key file) or use_agent: true "
                             "(the SSH agent's keys), not both and not neither")
        return self

    @property
    def site(self) -> str:
        return self.labels.site or "on-prem"

    @property
    def rack(self) -> str:
        return self.labels.rack or self.name


class AgentInstall(StrictModel):
    """How hosts run the node agent: ``python`` (default ``python3``) that imports
    ``scheduler.agent`` already, or ``pip_spec`` installed by the daemon into ``venv`` on
    first use (a host's venv that imports the agent is kept)."""

    python: RemotePath | None = None
    pip_spec: OneLine | None = None
    venv: RemotePath = DEFAULT_AGENT_VENV

    @model_validator(mode="after")
    def _one_source(self) -> AgentInstall:
        if self.python is not None and self.pip_spec is not None:
            raise ValueError("python (installed) and pip_spec (shipped) exclude each other")
        return self

    @property
    def interpreter(self) -> str:
        if self.pip_spec is not None:
            return f"{self.venv}/bin/python3"
        return self.python or "python3"


class FleetSettings(StrictModel):
    """The fleet: its ``hosts`` (names unique) and how they are reached and used.

    - **known_hosts**: an OpenSSH known_hosts file (``[address]:port`` entries for ports
      other than 22); default none: every host then needs ``host_key``.
    - **connect_timeout_s** / **command_timeout_s**: per SSH connection / per remote command.
    - **host_lost_after_s**: a host unreachable this long has its instances reported
      terminated (its jobs move); shorter outages leave them running (their agents may still
      report to the daemon directly).
    - **drain_notice_s**: the preemption notice a drained host's instances get.
    - **terminate_grace_s**: between SIGTERM and SIGKILL of an instance's process group.
    - **launch_grace_s**: a claim whose agent has not started this long after it was made
      belongs to a launch that died (a daemon killed mid-launch) and is released.
    - **agent_start_timeout_s**: launch to the agent's first report (the hosts are up
      already; a shipped agent's first install takes longer).
    """

    name: HostName = "fleet"
    hosts: list[HostSettings] = Field(min_length=1)
    known_hosts: Path | None = None
    work_root: WorkRoot = DEFAULT_WORK_ROOT
    agent: AgentInstall = Field(default_factory=AgentInstall)
    connect_timeout_s: Number = Field(default=10.0, gt=0, le=300)
    command_timeout_s: Number = Field(default=30.0, gt=0, le=600)
    host_lost_after_s: Number = Field(default=60.0, gt=0)
    drain_notice_s: Number = Field(default=120.0, ge=0)
    terminate_grace_s: Number = Field(default=30.0, ge=0, le=600)
    launch_grace_s: Number = Field(default=300.0, gt=0)
    agent_start_timeout_s: Number | None = Field(default=None, gt=0)

    @field_validator("known_hosts")
    @classmethod
    def _known_hosts_variables_set(cls, value: Path | None) -> Path | None:
        return value if value is None else _variables_set(value)

    @field_validator("hosts")
    @classmethod
    def _unique_names(cls, hosts: list[HostSettings]) -> list[HostSettings]:
        seen: set[str] = set()
        twice = sorted({h.name for h in hosts if h.name in seen or seen.add(h.name)})
        if twice:
            raise ValueError(f"host names must be unique; repeated: {', '.join(twice)}")
        return hosts

    def host(self, name: str) -> HostSettings | None:
        return next((h for h in self.hosts if h.name == name), None)

    def work_root_of(self, host: HostSettings) -> str:
        return host.work_root or self.work_root
