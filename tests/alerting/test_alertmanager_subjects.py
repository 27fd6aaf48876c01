"""The Alertmanager push asserts the alerts of the subjects /metrics keeps (diagnosis.max_subjects_per_rule, issue 34)."""

from __future__ import annotations

import pytest

from kdiag.alerting.alertmanager import AlertPusher
from kdiag.runtime.pipeline import State
from tests.alerting.test_rules import Receiver
from tests.analysis.test_subject_cap import judged
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def test_the_push_asserts_the_worst_and_resolves_one_a_worse_subject_displaced() -> None:
    receiver = Receiver()
    pusher = AlertPusher(receiver.url, "broker-1", resend_interval=60.0, max_subjects=3)
    pusher.start()
    try:
        lags = {f"g{i:02d}": float(i) for i in range(20)}
        pusher.offer(State("h", 600.0, [], {}, {}, judged(lags, set(lags)), cluster="c1"))
        wait_until(lambda: receiver.bodies, 10, "the first post")
        assert sorted(a["labels"]["subject"] for a in receiver.bodies[0]) == ["g17", "g18", "g19"]
        lags["g00"] = 100.0
        pusher.offer(State("h", 605.0, [], {}, {}, judged(lags, set(lags)), cluster="c1"))
        wait_until(lambda: len(receiver.bodies) == 2, 10, "the post after g00 fell far behind")
        assert sorted(a["labels"]["subject"] for a in receiver.bodies[1]) == ["g00", "g17", "g18", "g19"]
        ended = {a["labels"]["subject"]: a["endsAt"] for a in receiver.bodies[1]}
        # Firing alerts expire 4 resend intervals from now; the displaced one ended at the state that displaced it.
        assert ended["g17"].startswith("1970-01-01T00:10:05")
        assert not any(ended[s].startswith("1970") for s in ("g00", "g18", "g19"))
    finally:
        pusher.stop()
        receiver.close()
