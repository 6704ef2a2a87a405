# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller-only: Proxmox VE's calendar events (a backup job's ``schedule``) and when one is next due.

Pure Python, no Ansible import. A port of proxmox-time, which pve-common's ``PVE::CalendarEvent``
(``src/PVE/CalendarEvent.pm``: ``parse_calendar_event`` trims the text, ``compute_next_event``) calls through
``Proxmox::RS::CalendarEvent`` since it switched to the Rust implementation (commits 9572e10, 4656d14), and that
pve-manager's ``PVE::Jobs::run_jobs`` and ``PVE::API2::Backup`` (the GUI's "Next Run") use:

* the grammar of ``proxmox-time/src/calendar_event.rs`` (proxmox/proxmox-rs): ``parse_calendar_event_incomplete``
  (a ``UTC`` suffix; the keywords ``minutely`` ... ``yearly``; weekday ranges, ``week_days.rs``
  ``parse_weekdays_range``, which wrap (``fri..mon``); ``parse_date_spec``, ``[Y-]M-D``; ``parse_time_spec``,
  ``[H:]M[:S]``, where ``5`` alone is a minute, an hour is 0..23), ``parse_date_time_comp`` (``a``, ``a..b``,
  ``a/r``, ``a..b/r``) and ``parse_date_time_comp_list`` (``*``, ``*/r``, lists with ``,``);
* ``CalendarEvent::compute_next_event``: the first second after ``last`` that matches, found field by field with
  ``DateTimeValue::contains``/``find_next`` (``date_time_value.rs``) on a broken-down time that ``TmEditor``
  (``tm_editor.rs``) normalises as ``mktime`` does, quirks included (``*/5:00`` at 22:30 jumps to 01:00 and then
  05:00, skipping midnight, as Proxmox VE does); at most 1001 steps, else never.

The event is evaluated in the node's local time (``tzinfo``), in UTC with a ``UTC`` suffix.
"""

from __future__ import annotations

import datetime as dt
import re
import typing as t

KEYWORDS = {  # keyword: (second, minute, hour, day, month, weekday) as calendar_event.rs spells them out
    "minutely": "*:*:0", "hourly": "*:0:0", "daily": "0:0:0", "weekly": "mon 0:0:0", "monthly": "*-1 0:0:0",
    "yearly": "1-1 0:0:0", "annually": "1-1 0:0:0", "quarterly": "1,4,7,10-1 0:0:0",
    "semiannually": "1,7-1 0:0:0", "semi-annually": "1,7-1 0:0:0"}
WEEKDAYS = {"mon": 0, "monday": 0, "tue": 1, "tuesday": 1, "wed": 2, "wednesday": 2, "thu": 3, "thursday": 3,
            "fri": 4, "friday": 4, "sat": 5, "saturday": 5, "sun": 6, "sunday": 6}
MAX_STEPS = 1000


class CalendarError(ValueError):
    """The text is no calendar event Proxmox VE accepts."""


class Value(t.NamedTuple):
    """``DateTimeValue``: ``a`` is (a, 0, None), ``a..b`` (a, 1, b), ``a/r`` (a, r, None), ``a..b/r`` (a, r, b)."""

    start: int
    step: int
    end: int | None

    def contains(self, value: int) -> bool:
        """``DateTimeValue::contains``."""
        if value < self.start:
            return False
        if not self.step:
            return value == self.start
        return (value - self.start) % self.step == 0 and (self.end is None or value <= self.end)

    def after(self, value: int) -> int | None:
        """``DateTimeValue::find_next`` for this one entry: the next value it holds, greater than ``value``."""
        if value < self.start:
            return self.start
        if not self.step:
            return None
        found = self.start + (value - self.start + self.step) // self.step * self.step
        return found if self.end is None or found <= self.end else None


Field = t.Tuple[Value, ...]  # empty: every value


class Event(t.NamedTuple):
    """A parsed calendar event; empty fields match everything, ``days`` are 0 (Monday) to 6 (Sunday)."""

    text: str
    utc: bool
    days: frozenset[int]
    year: Field
    month: Field
    day: Field
    hour: Field
    minute: Field
    second: Field


def _holds(field: Field, value: int) -> bool:
    return any(item.contains(value) for item in field)


def _next(field: Field, value: int) -> int | None:
    found = [item.after(value) for item in field]
    return min((item for item in found if item is not None), default=None)


class _Text:
    """The text being parsed and the position reached (nom's input)."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def take(self, prefix: str) -> bool:
        if self.text.startswith(prefix, self.pos):
            self.pos += len(prefix)
            return True
        return False

    def match(self, pattern: str) -> str | None:
        found = re.compile(pattern).match(self.text, self.pos)
        if not found:
            return None
        self.pos = found.end()
        return found.group(0)

    def rest(self) -> str:
        return self.text[self.pos:]


def _number(text: _Text, limit: int) -> int | None:
    """``parse_time_comp``: digits, less than ``limit``; None (nothing taken) otherwise."""
    start = text.pos
    digits = text.match(r"[0-9]+")
    if digits is None or int(digits) >= limit:
        text.pos = start
        return None
    return int(digits)


def _comp(text: _Text, limit: int) -> Value | None:
    """``parse_date_time_comp``: ``a``, ``a..b``, ``a/r`` or ``a..b/r``."""
    start = text.pos
    value = _number(text, limit)
    if value is None:
        return None
    end: int | None = None
    before = text.pos
    if text.take(".."):
        end = _number(text, limit)
        if end is None:
            text.pos = before
        elif value > end:
            text.pos = start
            return None
    if text.take("/"):
        step = _number(text, limit)
        if step is None:
            text.pos = start
            return None
        return Value(value, step, end)
    return Value(value, 0, None) if end is None else Value(value, 1, end)


def _comp_list(text: _Text, first: int, limit: int) -> Field | None:
    """``parse_date_time_comp_list``: ``*`` (every value), ``*/r`` (from ``first`` on), or ``,``-separated components."""
    start = text.pos
    if text.take("*"):
        star = text.pos
        if text.take("/"):
            step = _number(text, limit)
            if step is None:
                text.pos = start
                return None
            if step > 0:
                return (Value(first, step, None),)
            text.pos = star
        return ()
    items = []
    while True:
        before = text.pos
        item = _comp(text, limit)
        if item is None:
            text.pos = before - 1 if items else start  # back before the ",": separated_list1 keeps what it had
            return tuple(items) if items else None
        items.append(item)
        if not text.take(","):
            return tuple(items)


def _date(text: _Text) -> tuple[Field, Field, Field] | None:
    """``parse_date_spec``: ``Y-M-D`` or ``M-D`` (year below 2200, month 1..12, day 1..31)."""
    start = text.pos
    for parts in (((0, 2200), (1, 13), (1, 32)), ((1, 13), (1, 32))):  # (first value of */r, limit) of Y, M, D
        text.pos = start
        found = []
        for index, (first, limit) in enumerate(parts):
            field = _comp_list(text, first, limit) if index == 0 or text.take("-") else None
            if field is None:
                break
            found.append(field)
        if len(found) == len(parts):
            return (found[0], found[1], found[2]) if len(found) == 3 else ((), found[0], found[1])
    text.pos = start
    return None


def _time(text: _Text) -> tuple[Field, Field, Field] | None:
    """``parse_time_spec``: ``[H:]M[:S]``; without an hour every hour, without seconds second 0."""
    start = text.pos
    hour = _comp_list(text, 0, 24)
    if hour is None or not text.take(":"):
        text.pos, hour = start, ()
    minute = _comp_list(text, 0, 60)
    if minute is None:
        text.pos = start
        return None
    second: Field = (Value(0, 0, None),)
    before = text.pos
    if text.take(":"):
        found = _comp_list(text, 0, 60)
        if found is None:
            text.pos = before
        else:
            second = found
    return hour, minute, second


def _weekdays(text: _Text) -> frozenset[int]:
    """``parse_weekdays_range``, ``,``-separated: ``mon``, ``Monday``, ``mon..fri``, ``fri..mon`` (wraps)."""
    days: set[int] = set()
    while True:
        name = text.match(r"[A-Za-z]+")
        if name is None or name.lower() not in WEEKDAYS:
            raise CalendarError(f"unable to parse calendar event at '{name or text.rest()}' - weekday")
        first = last = WEEKDAYS[name.lower()]
        before = text.pos
        if text.take(".."):
            end = text.match(r"[A-Za-z]+")
            if end is not None and end.lower() in WEEKDAYS:
                last = WEEKDAYS[end.lower()]
            else:
                text.pos = before
        days.update(range(first, last + 1) if first <= last else [*range(first, 7), *range(0, last + 1)])
        if not text.take(","):
            return frozenset(days)


def parse(event: str) -> Event:
    """The calendar event ``event``; CalendarError when Proxmox VE would refuse it (as ``pve-calendar-event``)."""
    source = event.strip()
    body, utc = source, False
    if body.endswith("UTC"):
        body, utc = body[:-3].rstrip(" "), True
    if not body and not utc:
        raise CalendarError("unable to parse calendar event - event is empty")
    text = _Text(KEYWORDS.get(body, body))
    days: frozenset[int] = frozenset()
    if text.rest()[:1].isascii() and text.rest()[:1].isalpha():
        days = _weekdays(text)
        text.match(r"[ \t]*")
    date = _date(text)
    if date is not None:
        text.match(r"[ \t]*")
    time = _time(text)
    if not (days or date or time):
        raise CalendarError(f"unable to parse calendar event at '{text.rest()}' - date or time specification")
    if text.rest():
        raise CalendarError(f"unable to parse calendar event at '{text.rest()}'")
    year, month, day = date or ((), (), ())
    zero = (Value(0, 0, None),)
    hour, minute, second = time or (zero, zero, zero)
    return Event(source, utc, days if len(days) < 7 else frozenset(), year, month, day, hour, minute, second)


def _epoch(wall: dt.datetime, zone: dt.tzinfo) -> int:
    return int(max(wall.replace(tzinfo=zone, fold=fold).timestamp() for fold in (0, 1)))


class _Clock:
    """``TmEditor``: a broken-down time in ``zone``, each change normalised as ``mktime`` (``timegm`` for UTC) does."""

    def __init__(self, epoch: int, zone: dt.tzinfo) -> None:
        self.zone = zone
        self.wall = dt.datetime.fromtimestamp(epoch, zone).replace(tzinfo=None)

    def epoch(self) -> int:
        """``into_epoch``: ``mktime`` with ``tm_isdst`` -1, as glibc answers it: a wall time in the gap of a change to
        summer time is read with the offset before it (02:30 is 03:30 summer time), a repeated one as the later."""
        return _epoch(self.wall, self.zone)

    def _set(self, wall: dt.datetime) -> None:
        self.wall = dt.datetime.fromtimestamp(_epoch(wall, self.zone), self.zone).replace(tzinfo=None)

    def _midnight(self) -> dt.datetime:
        return self.wall.replace(hour=0, minute=0, second=0)

    def add_years(self, years: int) -> None:
        self._set(dt.datetime(self.wall.year + years, 1, 1))

    def add_months(self, months: int) -> None:
        index = self.wall.year * 12 + self.wall.month - 1 + months
        self._set(dt.datetime(index // 12, index % 12 + 1, 1))

    def add_days(self, days: int) -> None:
        self._set(self._midnight() + dt.timedelta(days=days))

    def set_time(self, hour: int, minute: int, second: int) -> None:
        self._set(self._midnight() + dt.timedelta(hours=hour, minutes=minute, seconds=second))

    def set_min_sec(self, minute: int, second: int) -> None:
        self._set(self.wall.replace(minute=0, second=0) + dt.timedelta(minutes=minute, seconds=second))

    def set_sec(self, second: int) -> None:
        self._set(self.wall.replace(second=0) + dt.timedelta(seconds=second))


# compute_next_event's order of the fields: (field, move to the next value found, move on when there is none; None: never)
_STEPS: tuple[tuple[str, t.Callable[[_Clock, int], None], t.Callable[[_Clock], None] | None], ...] = (
    ("year", lambda clock, found: clock.add_years(found - clock.wall.year), None),
    ("month", lambda clock, found: clock.add_months(found - clock.wall.month), lambda clock: clock.add_years(1)),
    ("day", lambda clock, found: clock.add_days(found - clock.wall.day), lambda clock: clock.add_months(1)),
    ("weekday", lambda clock, found: clock.add_days(found - clock.wall.weekday()), lambda clock: clock.add_days(7 - clock.wall.weekday())),
    ("hour", lambda clock, found: clock.set_time(found, 0, 0), lambda clock: clock.add_days(1)),
    ("minute", lambda clock, found: clock.set_min_sec(found, 0), lambda clock: clock.set_time(clock.wall.hour + 1, 0, 0)),
    ("second", lambda clock, found: clock.set_sec(found), lambda clock: clock.set_min_sec(clock.wall.minute + 1, 0)),
)


def _step(event: Event, clock: _Clock) -> bool:
    """One turn of ``compute_next_event``'s loop: move the first field that does not match; False when all do."""
    for name, to_found, onwards in _STEPS:
        if name == "weekday":
            value = clock.wall.weekday()
            if not event.days or value in event.days:
                continue
            found = min((day for day in event.days if day > value), default=None)
        else:
            field, value = getattr(event, name), getattr(clock.wall, name)
            if not field or _holds(field, value):
                continue
            found = _next(field, value)
        if found is not None:
            to_found(clock, found)
        elif onwards is not None:
            onwards(clock)
        else:
            raise OverflowError(f"no {name} left")
        return True
    return False


def next_due(event: Event, last: int, zone: dt.tzinfo) -> int | None:
    """``compute_next_event``: the first second after ``last`` (Unix time) when ``event`` is due, in ``zone`` (UTC with
    the event's ``UTC`` suffix); None when there is none (a year that has passed, ``02-30``)."""
    try:
        clock = _Clock(last + 1, dt.timezone.utc if event.utc else zone)
        for _count in range(MAX_STEPS + 1):
            if not _step(event, clock):
                return clock.epoch()
    except (OverflowError, ValueError, OSError):  # beyond what a datetime holds, or no year left
        return None
    return None
