"""The controller's :class:`Context` over a cloud in memory, for reconcile passes against the
real Redis, and the job those passes drive."""

from __future__ import annotations

from redis import Redis

from core.models import Job, JobState
from scheduler.controller.context import AgentBootstrap, Context, ProviderRegistry
from scheduler.store import Store
from scheduler.store.agents import AgentTokens
from tests.factories.jobs import spec
from tests.fakes.compute import FakeClock, FakeCompute


def fake_cloud_context(redis_client: Redis, cloud: FakeCompute, clock: FakeClock,
                       owner: str = "ga-test") -> Context:
    """A Context whose only provider is ``cloud``, on ``clock``, its store over
    ``redis_client`` already holding the cloud's offers as observed now (so a pass places
    without polling first). Agents are bootstrapped toward addresses nothing listens on: the
    fake cloud starts no agent."""
    store = Store.over(redis_client)
    store.offers.replace_offers(cloud.name, [o.model_copy(update={"observed_at": clock()})
                                             for o in cloud.offers])
    bootstrap = AgentBootstrap(api_url="http://127.0.0.1:9", store_url="file:///nowhere",
                               tokens=AgentTokens(b"s"))
    return Context(store=store, providers=ProviderRegistry([cloud]), bootstrap=bootstrap,
                   owner=owner, clock=clock)


def submit_job(ctx: Context, job_id: str = "job-1", **spec_overrides) -> Job:
    """Save a PENDING job ``job_id`` (the factory spec with ``spec_overrides``), submitted at
    the context's clock."""
    now = ctx.clock()
    job = Job(id=job_id, spec=spec(**spec_overrides), created_at=now, updated_at=now)
    job.record(JobState.PENDING, "submitted", at=now)
    return ctx.store.jobs.create(job)


def stored_job(ctx: Context, job_id: str = "job-1") -> Job:
    """The job as the store holds it now. Raises AssertionError when there is none."""
    job = ctx.store.jobs.get(job_id)
    assert job is not None, f"no job {job_id}"
    return job
