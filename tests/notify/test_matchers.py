"""Matchers run in bounded time whatever an operator types (issue 29, defect 1): regexes are RE2,
anchored as Alertmanager anchors them; what RE2 cannot run (backreferences, lookaround) or what
compiles too large is refused naming the matcher, in silences, routes and inhibit rules alike;
lists, values and numbers are bounded. Silences stored before these rules load as invalid."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import ValidationError

from service.notify.config import NotifySettings
from service.notify.matchers import MAX_MATCHERS, MAX_VALUE, Matcher, number, parse_all
from service.notify.silences import SilenceStore
from service.storage.state_db import open_state
from tests.notify.timeline import T0

LABELS = {"alertname": "GpuFailureRisk", "node": "n1", "entity": "n1:gpu0", "level": "3"}


@pytest.mark.parametrize(("text", "labels", "want"), [
    ("alertname=~Gpu.*", LABELS, True),
    ("alertname=~Gpu", LABELS, False),  # anchored: the whole value
    ("alertname=~Risk|GpuFailureRisk", LABELS, True),  # alternation inside the anchors
    ("alertname=~Risk|Gpu", LABELS, False),
    ("alertname!~Gpu.*", LABELS, False),
    ("node=~", {}, True),  # a missing label is the empty string
    ("entity=~n1:gpu[0-3]", LABELS, True),
    ("level>=3", LABELS, True),
    ("level<3", LABELS, False),
    ("level>2", {"level": "\uff13"}, False),  # other scripts' digits are not numbers
    ("level>2", {"level": "inf"}, False),
    ('node="n1"', LABELS, True),
])
def test_matchers_match_as_alertmanager_does(text: str, labels: dict[str, str],
                                             want: bool) -> None:
    assert Matcher.parse(text).matches(labels) is want


def test_a_catastrophic_pattern_is_linear_and_still_right() -> None:
    """`(.*.*.*)*X` backtracks for minutes under Python's re on a label this long."""
    m = Matcher.parse("alertname=~(.*.*.*)*X")
    assert not m.matches({"alertname": "GpuFailureRisk" * 500})
    assert m.matches({"alertname": "GpuFailureRisk" * 500 + "X"})
    assert not m.matches({"alertname": "a\ud800b"})  # a lone surrogate neither raises


@pytest.mark.parametrize(("text", "says"), [
    ("alertname=~(Gpu)\\1", "RE2"),
    ("alertname=~Gpu(?=Fail)", "RE2"),
    ("alertname=~(?<=G)pu", "RE2"),
    ("alertname=~(?!x)", "RE2"),
    ("alertname=~a{1001}", "repetition"),
    ("alertname=~\\p{L}{200}", "regex"),
    ("alertname=~[a-z]{999}[a-z]{999}[a-z]{999}[a-z]{999}[a-z]{999}[a-z]{999}", "instructions"),
    ("alertname=~(", "missing )"),
    ("alertname=~" + "a" * (MAX_VALUE + 1), "longer than"),
    ("alertname=" + "a" * 5000, "longer than"),
    ("level>=nan", "non-number"),
    ("level>=1e999", "non-number"),
    ("level>=\u00b2", "non-number"),
    ("level>=\uff12", "non-number"),
    ("level>=1_0", "non-number"),
    ("node=a\ud800", "Unicode"),
    ("node=a\nb", "bad matcher"),
    ("=x", "bad matcher"),
])
def test_what_cannot_run_in_bounded_time_is_refused_naming_the_matcher(text: str,
                                                                      says: str) -> None:
    with pytest.raises(ValueError, match="matcher") as e:
        Matcher.parse(text)
    assert says in str(e.value)


def test_numbers_are_ascii_and_finite() -> None:
    assert [number(t) for t in ("3", "-2.5", " 1e3 ", ".5")] == [3.0, -2.5, 1000.0, 0.5]
    assert [number(t) for t in ("nan", "inf", "\u00b2", "\u0663", "1e999", "", "0x1")] == \
        [None] * 7


def test_lists_of_matchers_are_bounded() -> None:
    assert len(parse_all([f"node!=n{i}" for i in range(MAX_MATCHERS)])) == MAX_MATCHERS
    with pytest.raises(ValueError, match=f"at most {MAX_MATCHERS}"):
        parse_all([f"node!=n{i}" for i in range(MAX_MATCHERS + 1)])


@pytest.mark.parametrize("notify", [
    {"route": {"receiver": "record", "routes": [{"matchers": ["alertname=~(?=x)y"]}]}},
    {"route": {"receiver": "record",
               "routes": [{"matchers": [f"node!=n{i}" for i in range(MAX_MATCHERS + 1)]}]}},
    {"inhibit_rules": [{"source_matchers": ["alertname=~(a)\\1"], "target_matchers": ["x=y"]}]},
])
def test_routes_and_inhibit_rules_refuse_them_at_start(notify: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="matchers"):
        NotifySettings.model_validate(notify)


# -- silences ----------------------------------------------------------------------------------


def _store_raw(target: str, sid: str, matchers: str) -> None:
    db = open_state(target)
    try:
        with db.transaction():
            db.execute("INSERT INTO silences (id, matchers, author, comment, created_at, "
                       "starts_at, ends_at, expired_by) VALUES (?,?,?,?,?,?,?,NULL)",
                       (sid, matchers, "old", "stored before", T0, T0, T0 + 3600))
    finally:
        db.close()


def test_silences_stored_before_these_rules_load_invalid_and_mute_nothing(
        state_target: str, caplog: pytest.LogCaptureFixture) -> None:
    store = SilenceStore(state_target)
    try:
        good = store.create(["node=n1"], "alice", "reboot", T0, ends_at=T0 + 600)
        _store_raw(state_target, "lookahead", json.dumps(["alertname=~(?=G).*", "node=n1"]))
        _store_raw(state_target, "many", json.dumps(
            ["node=n1", *(f"entity!=x{i}" for i in range(10_000))]))
        _store_raw(state_target, "garbled", "{not json")
        with caplog.at_level(logging.WARNING, logger="service.notify.silences"):
            got = {s.id: s for s in store.all()}
            store.all()
        assert got[good.id].invalid is None
        assert "RE2" in (got["lookahead"].invalid or "")
        assert "10001 matchers" in (got["many"].invalid or "")
        assert "not a list" in (got["garbled"].invalid or "")
        shown = got["many"].as_dict(T0)
        assert shown["invalid"] and len(shown["matchers"]) == MAX_MATCHERS
        assert got["lookahead"].as_dict(T0)["matchers"][0] == "alertname=~(?=G).*"
        assert store.muting(LABELS, T0 + 1) == [good.id]
        assert sorted(r.getMessage().split()[1] for r in caplog.records) == [
            "garbled", "lookahead", "many"]  # once each
        assert store.expire("many", "carol", T0 + 2).state(T0 + 2) == "expired"
    finally:
        store.close()


def test_a_silence_is_bounded_in_matchers_text_time_and_count(state_target: str) -> None:
    store = SilenceStore(state_target, max_s=3600, max_active=2)
    try:
        with pytest.raises(ValueError, match=f"at most {MAX_MATCHERS} matchers"):
            store.create([f"node=n{i}" for i in range(10_000)], "a", "c", T0, ends_at=T0 + 60)
        with pytest.raises(ValueError, match="RE2"):
            store.create(["node=~(n)\\1"], "a", "c", T0, ends_at=T0 + 60)
        with pytest.raises(ValueError, match="valid Unicode"):
            store.create(["node=n1"], "a", "c\ud800", T0, ends_at=T0 + 60)
        with pytest.raises(ValueError, match="finite"):
            store.create(["node=n1"], "a", "c", T0, ends_at=float("nan"))
        with pytest.raises(ValueError, match="start at most"):
            store.create(["node=n1"], "a", "c", T0, starts_at=T0 + 7200, ends_at=T0 + 7300)
        first = store.create(["node=n1"], "a", "c", T0, ends_at=T0 + 60)
        store.create(["node=n2"], "a", "c", T0, starts_at=T0 + 10, ends_at=T0 + 60)
        with pytest.raises(ValueError, match="silence_max_active"):
            store.create(["node=n3"], "a", "c", T0, ends_at=T0 + 60)
        store.expire(first.id, "a", T0 + 1)  # an expired one no longer counts
        store.create(["node=n3"], "a", "c", T0 + 1, ends_at=T0 + 60)
        assert store.all() and all(s.invalid is None for s in store.all())
    finally:
        store.close()
