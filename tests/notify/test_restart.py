"""A restart neither re-pages nor loses a resolve: the alert store and the notification log
outlive the process, and the new one picks up where the old one stopped (reference 1.6, 1.8
and recommendation 12). First on the notification half alone (Timeline), then through the
whole Pipeline, whose state machine is restored from the store."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.assembly import Wiring
from service.notify.message import Delivery
from service.pipeline import build_pipeline
from service.settings import DetectorSettings, ModelSettings, Settings, StorageSettings
from service.stages.alert_machine import AlertPolicy
from tests.notify.timeline import Flaky, Recorder, Seen, Timeline, notify_settings, seen
from tests.pipeline.builders import T0 as PIPE_T0
from tests.pipeline.builders import Rounds

LINK = "n0:gpu1:nvlink0"
PAGER = [{"matchers": ["level>=3"], "receiver": "pager"}]


@pytest.fixture
def db(state_target: str) -> str:
    """The shared state the stopped and the started process both use: SQLite, PostgreSQL."""
    return state_target


def paging(db: str, *, start: float = 0.0) -> Timeline:
    return Timeline(db, notify_settings(routes=PAGER, receivers={"pager": True}),
                    [Recorder("pager")], start=start)


# -- the notification half ---------------------------------------------------------------------


def test_a_paged_group_is_not_paged_again_and_its_repeat_keeps_its_time(db: str) -> None:
    before = paging(db)
    before.fire("n0:gpu0", 3, at=0)
    before.run(100)
    assert before.seen("pager") == [Seen(30, "new", {"n0:gpu0": 3})]
    before.close()

    after = paging(db, start=3000)
    after.run(3625)  # past group_wait of the revived group, short of the repeat
    assert after.seen("pager") == []
    after.run(3700)  # the repeat is due 3600 s after the page before the restart
    assert after.seen("pager") == [Seen(3630, "repeat", {"n0:gpu0": 3})]
    after.close()


def test_a_resolve_after_the_restart_is_sent(db: str) -> None:
    before = paging(db)
    before.fire("n0:gpu0", 3, at=0)
    before.run(100)
    before.close()

    after = paging(db, start=1000)
    after.resolve("n0:gpu0", at=1100)
    after.run(2000)
    assert after.seen("pager") == [Seen(1330, "resolved", {}, frozenset({"n0:gpu0"}))]
    after.close()


def test_a_resolve_not_yet_sent_when_the_process_stopped_is_sent_after_it(db: str) -> None:
    before = paging(db)
    before.fire("n0:gpu0", 3, at=0)
    before.run(100)
    before.resolve("n0:gpu0", at=150)
    before.run(300)  # stopped before the group's next flush (330)
    assert len(before.seen("pager")) == 1
    before.close()

    after = paging(db, start=1000)
    after.run(2000)
    assert after.seen("pager") == [Seen(1030, "resolved", {}, frozenset({"n0:gpu0"}))]
    after.close()


def test_an_alert_never_notified_before_the_stop_is_notified_after_it(db: str) -> None:
    before = paging(db)
    before.fire("n0:gpu0", 3, at=0)
    before.run(20)  # stopped within group_wait
    assert before.seen("pager") == []
    before.close()

    after = paging(db, start=500)
    after.run(1000)
    assert after.seen("pager") == [Seen(530, "new", {"n0:gpu0": 3})]
    after.close()


def test_a_page_that_failed_before_the_stop_is_sent_after_it(db: str) -> None:
    down = Flaky("pager", [Delivery(False, False, "502")])
    before = Timeline(db, notify_settings(routes=PAGER, receivers={"pager": True}), [down])
    before.fire("n0:gpu0", 3, at=0)
    before.run(100)
    assert len(down.attempts) == 1 and down.messages == []
    before.close()

    after = paging(db, start=200)
    after.run(1000)
    assert after.seen("pager") == [Seen(230, "new", {"n0:gpu0": 3})]
    after.close()


# -- the whole pipeline, its state machine restored from the store -----------------------------


class Service:
    """One process: a Pipeline on the shared file DB, sending inline to recorders, fed with
    healthy rounds except an NVLink link that is down (a hard signal: level 3 at once) while
    `down` says so."""

    def __init__(self, tmp: Path) -> None:
        s = Settings(storage=StorageSettings(data_dir=tmp / "data"),
                     alerts=AlertPolicy(resolve_for_s=30, dwell_s=(0, 0, 0)),
                     detectors=DetectorSettings(model=ModelSettings(path="none")),
                     notify=notify_settings(routes=PAGER, receivers={"pager": True}))
        self.record, self.pager = Recorder("record"), Recorder("pager")
        self.pipeline = build_pipeline(s, Wiring.offline(alert_db=str(tmp / "alerts.db"),
                                                         notifiers=[self.record, self.pager],
                                                         notify_background=False))
        self.rounds = Rounds(nodes=2, gpus=2, links=1, ports=1)
        self.levels: list[tuple[float, str, int, int]] = []

    def run(self, start: float, stop: float, *, down: bool) -> None:
        self.rounds.set(LINK, "nvlink_state", 0.0 if down else 1.0)
        t = start
        while t <= stop:
            res = self.pipeline.process(self.rounds.batch(PIPE_T0 + t), PIPE_T0 + t)
            self.levels += [(t, x.entity, x.old, x.new) for x in res.transitions]
            t += 5.0

    def pages(self) -> list[Seen]:
        return seen(self.pager.messages, PIPE_T0)

    def close(self) -> None:
        self.pipeline.close()


def test_pipeline_restart_neither_repages_nor_loses_the_resolve(tmp_path: Path) -> None:
    first = Service(tmp_path)
    first.run(0, 100, down=True)
    assert first.levels == [(0, LINK, 0, 3)]
    assert first.pages() == [Seen(30, "new", {LINK: 3})]
    first.close()

    second = Service(tmp_path)
    second.run(3000, 3300, down=True)
    assert second.levels == []  # the machine took its level back from the store
    assert second.pages() == []  # and the unchanged page is not sent again
    second.run(3305, 3400, down=False)
    assert second.levels == [(3335, LINK, 3, 0)]  # resolve_for_s = 30
    second.run(3405, 4000, down=False)
    assert second.pages() == [Seen(3630, "resolved", {}, frozenset({LINK}))]
    assert second.record.messages == []
    second.close()


def test_pipeline_sends_a_resolve_that_happened_while_it_was_down(tmp_path: Path) -> None:
    first = Service(tmp_path)
    first.run(0, 100, down=True)
    first.close()

    second = Service(tmp_path)  # the link came back meanwhile
    second.run(1000, 1500, down=False)
    assert second.levels == [(1030, LINK, 3, 0)]
    assert second.pages() == [Seen(1030, "resolved", {}, frozenset({LINK}))]
    (a,) = second.pipeline.alerts.find()
    assert (a.state, a.peak_level) == ("resolved", 3)
    second.close()
