"""The budget-alert lists (queued, in flight, dead) share one hash tag, so every move between
them is one atomic command or transaction on the real cluster as on one server; alerts left
in the lists older versions used are moved over by recover()."""

from __future__ import annotations

import json

from scheduler.store import keys
from scheduler.store.budgets import BudgetOutbox


def test_alerts_move_between_the_lists_on_either_redis(redis_client):
    box = BudgetOutbox(redis_client)
    for n in range(3):
        box.push({"n": n})
    first = box.take()
    assert json.loads(first) == {"n": 0} and box.queued() == 2 and box.pending() == 3
    box.requeue(first, first)
    second = box.take()
    box.bury(second, json.dumps({"dead": 1}))
    third = box.take()
    box.recover()  # the run died holding ``third``: back at the front
    assert [json.loads(x) for x in redis_client.lrange(keys.BUDGET_OUTBOX, 0, -1)] == [
        json.loads(third), {"n": 0}]
    assert box.dead() == [{"dead": 1}]
    box.done(box.take())
    assert box.pending() == 1


def test_alerts_in_the_older_lists_are_moved_over(redis_client):
    (inflight, _), (queued, _), (dead, _) = keys.LEGACY_BUDGET_LISTS
    redis_client.rpush(inflight, json.dumps({"n": "flying"}))
    redis_client.rpush(queued, json.dumps({"n": 1}), json.dumps({"n": 2}))
    redis_client.rpush(dead, json.dumps({"n": "dead"}))
    box = BudgetOutbox(redis_client)
    box.push({"n": 0})
    box.recover()
    assert [json.loads(x)["n"] for x in redis_client.lrange(keys.BUDGET_OUTBOX, 0, -1)] == [
        0, "flying", 1, 2]
    assert box.dead() == [{"n": "dead"}]
    assert not any(redis_client.exists(k) for k in (inflight, queued, dead))
