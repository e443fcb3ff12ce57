"""The node agent: runs one attempt of a job on an instance (``python -m scheduler.agent``).

It starts the job, heartbeats to the daemon, watches the preemption notice, syncs the
checkpoint folder to the store, and restores the newest verified checkpoint before starting.
See :mod:`scheduler.agent.runner` for the sequence and :mod:`scheduler.agent.settings` for the
environment it reads.
"""

from scheduler.agent.notices import (
           AliyunNotices,
           AwsImdsNotices,
           AzureScheduledEvents,
           GcpMetadataNotices,
           NoNotices,
           make_notice_source,
)
from scheduler.agent.runner import Agent, main
from scheduler.agent.settings import AgentSettings

__all__ = ["Agent", "AgentSettings", "AliyunNotices", "AwsImdsNotices", "AzureScheduledEvents",
           "GcpMetadataNotices", "NoNotices", "main", "make_notice_source"]
