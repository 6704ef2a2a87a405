# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Proxmox VE's calendar events (plugin_utils/_pve_calendar.py), against the test vectors of the implementation Proxmox
VE runs: proxmox-time's ``src/test.rs`` (proxmox/proxmox-rs: ``test_compute_next_event``, ``test_calendar_event_weekday``)
and pve-common's ``test/calendar_event_test.pl`` (the same events evaluated in UTC, and its time zone tests), plus the
schedules Proxmox VE's backup dialog offers and the documentation's examples (``sun 01:00``, ``mon..fri 21:00``,
``*/2:00``, ``sat *-1..7 15:00``)."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from ansible_collections.trainops.pct_launch.plugins.plugin_utils._pve_calendar import CalendarError, next_due, parse

MIN, HOUR, DAY = 60, 3600, 86400
THURSDAY = 0  # the epoch: Thursday, 1970-01-01 00:00 UTC
THURSDAY_15 = 15 * HOUR
JUL_31_2020 = 1596153600  # Friday, 2020-07-31 00:00:00 UTC
DEC_31_2020 = 1609372800  # Thursday, 2020-12-31 00:00:00 UTC
UTC = dt.timezone.utc


def due(event: str, last: int, zone: dt.tzinfo = UTC) -> int | None:
    return next_due(parse(event), last, zone)


# proxmox-time src/test.rs, test_compute_next_event (each event gets " UTC" there)
RS_CASES = [
    ("0", THURSDAY, THURSDAY + HOUR), ("*", THURSDAY, THURSDAY + MIN),
    ("*:0", THURSDAY, THURSDAY + HOUR), ("*:*", THURSDAY, THURSDAY + MIN), ("*:*:*", THURSDAY, THURSDAY + 1),
    ("*:3:5", THURSDAY, THURSDAY + 3 * MIN + 5),
    ("mon *:*", THURSDAY, THURSDAY + 4 * DAY), ("mon 2:*", THURSDAY, THURSDAY + 4 * DAY + 2 * HOUR),
    ("mon 2:50", THURSDAY, THURSDAY + 4 * DAY + 2 * HOUR + 50 * MIN),
    ("tue", THURSDAY, THURSDAY + 5 * DAY), ("wed", THURSDAY, THURSDAY + 6 * DAY), ("thu", THURSDAY, THURSDAY + 7 * DAY),
    ("fri", THURSDAY, THURSDAY + DAY), ("sat", THURSDAY, THURSDAY + 2 * DAY), ("sun", THURSDAY, THURSDAY + 3 * DAY),
    ("4..10/2:0", THURSDAY, THURSDAY + 4 * HOUR), ("4..10/2:0", THURSDAY + 5 * HOUR, THURSDAY + 6 * HOUR),
    ("4..10/2:0", THURSDAY + 11 * HOUR, THURSDAY + DAY + 4 * HOUR),
    ("5,10:4,8", THURSDAY, THURSDAY + 5 * HOUR + 4 * MIN), ("10,5:8,4", THURSDAY, THURSDAY + 5 * HOUR + 4 * MIN),
    ("6,4..10:23,5/5", THURSDAY, THURSDAY + 4 * HOUR + 5 * MIN), ("4..10,6:5/5,23", THURSDAY, THURSDAY + 4 * HOUR + 5 * MIN),
    *[(day, JUL_31_2020, JUL_31_2020 + n * DAY) for n, day in enumerate(["sat", "sun", "mon", "tue", "wed", "thu", "fri"], 1)],
    *[(day, DEC_31_2020, DEC_31_2020 + n * DAY) for n, day in enumerate(["fri", "sat", "sun", "mon", "tue", "wed", "thu"], 1)],
    ("daily", THURSDAY, THURSDAY + DAY), ("daily", THURSDAY + 1, THURSDAY + DAY),
    ("5/2:0", THURSDAY, THURSDAY + 5 * HOUR), ("5/2:0", THURSDAY + 5 * HOUR, THURSDAY + 7 * HOUR),
    ("5/2:0", THURSDAY + 9 * HOUR, THURSDAY + 11 * HOUR), ("1:0", THURSDAY_15, THURSDAY + DAY + HOUR),
    ("2020-07-31", 0, JUL_31_2020), ("02-28", 0, (31 + 27) * DAY), ("02-29", 0, 2 * 365 * DAY + (31 + 28) * DAY),
    ("1965/5-01-01", -1, THURSDAY), ("2020-7..9-2/2", JUL_31_2020, JUL_31_2020 + 2 * DAY),
    ("2020,2021-12-31", JUL_31_2020, DEC_31_2020),
    ("minutely", THURSDAY, THURSDAY + MIN), ("hourly", THURSDAY, THURSDAY + HOUR), ("weekly", THURSDAY, THURSDAY + 4 * DAY),
    ("monthly", 0, 31 * DAY), ("quarterly", 0, (31 + 28 + 31) * DAY), ("semiannually", 0, 181 * DAY),
    ("semi-annually", 0, 181 * DAY), ("yearly", 0, 365 * DAY), ("annually", 0, 365 * DAY),
]


@pytest.mark.parametrize(("event", "last", "expected"), RS_CASES)
def test_proxmox_time_vectors(event: str, last: int, expected: int) -> None:
    assert due(event + " UTC", last, zoneinfo.ZoneInfo("Europe/Vienna")) == expected
    assert due(event, last) == expected


def test_proxmox_time_chains() -> None:
    """test.rs: 99 steps of ``*:*``, ``*:0`` and ``1:0``, each from the one before."""
    for event, first, step, start in (("*:*", MIN, MIN, THURSDAY), ("*:0", HOUR, HOUR, THURSDAY), ("1:0", DAY + HOUR, DAY, THURSDAY_15)):
        last = start
        for index in range(1, 100):
            last = due(event, last)  # type: ignore[assignment]
            assert last == first + (index - 1) * step, (event, index)


@pytest.mark.parametrize("event", ["2021-02-29", "02-30", "1969-*-* 0:0"])
def test_never_due(event: str) -> None:
    assert due(event, 0) is None


# pve-common test/calendar_event_test.pl: (event, [(last, next), ...]) evaluated with utc set
PERL_CASES = [
    ("*", [(0, 60), (30, 60), (59, 60), (60, 120)]),
    ("*/10", [(0, 600), (599, 600), (600, 1200), (50 * 60, 60 * 60)]),
    ("*/12:0", [(10, 43200), (13 * 3600, 24 * 3600)]),
    ("1/12:0/15", [(0, 3600), (3600, 3600 + 15 * 60), (3600 + 16 * 60, 3600 + 30 * 60), (3600 + 30 * 60, 3600 + 45 * 60),
                   (3600 + 45 * 60, 3600 + 12 * 3600), (13 * 3600 + 1, 13 * 3600 + 15 * 60),
                   (13 * 3600 + 15 * 60, 13 * 3600 + 30 * 60), (13 * 3600 + 30 * 60, 13 * 3600 + 45 * 60),
                   (13 * 3600 + 45 * 60, 25 * 3600)]),
    ("1,4,6", [(0, 60), (60, 4 * 60), (4 * 60 + 60, 6 * 60), (6 * 60, 3600 + 60)]),
    ("Mon", [(0, 4 * 86400), (4 * 86400, 11 * 86400), (11 * 86400, 18 * 86400)]),
    ("sat..sun", [(0, 2 * 86400), (2 * 86400, 3 * 86400), (3 * 86400, 9 * 86400)]),
    ("22/1:0", [(0, 22 * 3600), (22 * 3600, 23 * 3600), (22 * 3600 + 59 * 60, 23 * 3600)]),
    ("*/2:*", [(0, 60), (60 * 60, 2 * 60 * 60), (2 * 60 * 60, 2 * 60 * 60 + 60)]),
    ("20..22:*/30", [(0, 20 * 3600), (20 * 3600, 20 * 3600 + 30 * 60), (22 * 3600 + 30 * 60, 44 * 3600)]),
    ("0,1,3..5", [(0, 60), (60, 3 * 60), (5 * 60, 60 * 60)]),
    ("2,4:0,1,3..5", [(0, 2 * 3600), (2 * 3600 + 60, 2 * 3600 + 3 * 60), (2 * 3600 + 5 * 60, 4 * 3600)]),
]


@pytest.mark.parametrize(("event", "steps"), PERL_CASES)
def test_pve_common_vectors(event: str, steps: list[tuple[int, int]]) -> None:
    for last, expected in steps:
        assert due(event, last) == expected, (event, last)


@pytest.mark.parametrize("event", [
    "0..3", "23..23:0..3", "sun..sat", "wed,mon..tue,fri", "mon */15", "fri..mon", "mon,wed..fri", "MON", "monDay",
    "Tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "mon,tue..wednesday,fri..sat", "sat *-1..7 15:00",
    "daily UTC", "mon..fri *:00 UTC", "2020-07-31 12:00 UTC", "  sun 01:00  "])
def test_accepted(event: str) -> None:
    parse(event)


@pytest.mark.parametrize(("event", "words"), [
    ("61", "unable to parse calendar event"), ("*/61", "unable to parse"), ("0..80", "unable to parse"),
    (" mon 0 0 0", "unable to parse calendar event at ' 0 0'"), (" mon 0 0", "at ' 0'"), ("", "event is empty"),
    ("3..1", "unable to parse"), ("noday", "weekday"), ("mon..fri 25:61", "unable to parse"),
    ("UTC", "date or time specification"), ("1-2-3-4", "unable to parse")])
def test_refused(event: str, words: str) -> None:
    with pytest.raises(CalendarError, match=words.replace("*", r"\*")):
        parse(event)


def test_the_documentations_examples_in_local_time() -> None:
    """Proxmox VE's docs (Schedule Format, calendar events): the backup dialog's choices and its examples, at a node
    in Vienna, from Wednesday 2026-03-04 12:00 local time."""
    zone = zoneinfo.ZoneInfo("Europe/Vienna")
    start = int(dt.datetime(2026, 3, 4, 12, 0, tzinfo=zone).timestamp())

    def local(event: str) -> str:
        found = due(event, start, zone)
        assert found is not None
        return dt.datetime.fromtimestamp(found, zone).strftime("%a %Y-%m-%d %H:%M")

    assert local("sun 01:00") == "Sun 2026-03-08 01:00"
    assert local("mon..fri 21:00") == "Wed 2026-03-04 21:00"
    assert local("*/2:00") == "Wed 2026-03-04 14:00"
    assert local("daily") == "Thu 2026-03-05 00:00"
    assert local("weekly") == "Mon 2026-03-09 00:00"
    assert local("02:30") == "Thu 2026-03-05 02:30"
    assert local("sat *-1..7 15:00") == "Sat 2026-03-07 15:00"
    assert local("mon,wed,fri 01:30") == "Fri 2026-03-06 01:30"
    assert local("sat 18:15") == "Sat 2026-03-07 18:15"
    assert local("*:0/15") == "Wed 2026-03-04 12:15"
    assert local("12:05") == "Wed 2026-03-04 12:05"
    assert local("monthly") == "Wed 2026-04-01 00:00"
    assert local("fri..mon 03:00") == "Fri 2026-03-06 03:00"


def test_local_time_and_utc_around_a_dst_change() -> None:
    """pve-common's time zone tests: across CEST -> CET (2018-10-28) ``mon..fri`` is the next local midnight; with
    ``UTC`` it is midnight UTC, an hour later by the clock in Vienna."""
    zone = zoneinfo.ZoneInfo("Europe/Vienna")
    sunday = int(dt.datetime(2018, 10, 28, 0, 0, tzinfo=zone).timestamp())
    monday = int(dt.datetime(2018, 10, 29, 0, 0, tzinfo=zone).timestamp())
    assert due("mon..fri", sunday, zone) == monday
    assert due("mon..fri UTC", sunday, zone) == monday + HOUR
    # a node one hour ahead of UTC runs "21:00" at 20:00 UTC
    plus_one = dt.timezone(dt.timedelta(hours=1))
    assert due("21:00", 0, plus_one) == 20 * HOUR
    assert due("21:00 UTC", 0, plus_one) == 21 * HOUR


def test_a_time_in_a_dst_change() -> None:
    """02:30 does not exist in Vienna on 2026-03-29: glibc's mktime makes it 03:30 summer time, which is no 02:30, so
    the next is the day after (as on a node); on 2026-10-25 it comes twice, and mktime takes the later one (CET)."""
    zone = zoneinfo.ZoneInfo("Europe/Vienna")

    def local(event: str, *start: int) -> str:
        found = due(event, int(dt.datetime(*start, tzinfo=zone).timestamp()), zone)  # type: ignore[misc]
        assert found is not None
        return dt.datetime.fromtimestamp(found, zone).strftime("%Y-%m-%d %H:%M %z")

    assert local("02:30", 2026, 3, 28, 12) == "2026-03-30 02:30 +0200"
    assert local("03:30", 2026, 3, 28, 12) == "2026-03-29 03:30 +0200"
    assert local("02:30", 2026, 10, 24, 12) == "2026-10-25 02:30 +0100"
    assert local("sun 01:00", 2026, 10, 24, 12) == "2026-10-25 01:00 +0200"


def test_an_hour_step_that_passes_midnight_skips_it_as_proxmox_ve_does() -> None:
    """``*/5:00`` at 22:30: find_next gives hour 25, which mktime makes 01:00 the next day; then 05:00 (not midnight)."""
    assert due("*/5:00", 22 * HOUR + 30 * MIN) == DAY + 5 * HOUR
    assert due("*/5:00", 19 * HOUR) == 20 * HOUR


def test_a_field_out_of_range_is_read_as_nom_reads_it() -> None:
    """proxmox-time's parser backtracks: ``25:00`` is no hour, so it is minute 25 and second 0 of every hour."""
    assert due("25:00", 0) == 25 * MIN
