# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""The body of a notification in each ``notify_format``: the job's event as a chat or push service takes it.

``request(fmt, event)`` gives the bytes to POST to ``notify_url`` and their headers. Every format but ``json`` starts
with ``summary(event)`` (host, session, event, attempt, reason: one line, never cut by the room the log takes) and
adds the newest lines of the event's ``log_tail``, as many as the service's limit leaves room for, after a line that
counts those left out. Log text is made visible first (control characters as their Unicode pictures, U+2400 on,
lone surrogates as U+FFFD); in a Markdown code block no two backticks stay adjacent (a zero-width space goes
between), so no log line can close the block.

The rules of each service, and where they are written:

- ``json``: the event itself (``encode``, also what ``notify_command`` reads): JSON in UTF-8, values JSON cannot hold
  as their str().
- ``slack``: an incoming webhook needs ``text`` (the words of the notification), or ``blocks``; up to 50 blocks, a
  section's text up to 3000 characters; ``&``, ``<`` and ``>`` are escaped.
  https://docs.slack.dev/messaging/sending-messages-using-incoming-webhooks,
  https://docs.slack.dev/reference/block-kit/blocks/section-block, https://docs.slack.dev/messaging/formatting-message-text
- ``discord``: Execute Webhook needs one of ``content`` (up to 2000 characters), ``embeds``, files, ``poll``;
  ``allowed_mentions`` without ``parse`` keeps an ``@everyone`` in the log from pinging anyone.
  https://discord.com/developers/docs/resources/webhook#execute-webhook
- ``mattermost``: an incoming webhook needs ``text`` (Markdown) when it has no ``attachments``; a post holds 16383
  characters (a longer text is split into several posts, which would cut the code block).
  https://developers.mattermost.com/integrate/webhooks/incoming/
- ``teams``: a Workflows webhook takes ``type: message`` with ``attachments``, each of ``contentType``
  ``application/vnd.microsoft.card.adaptive`` with an Adaptive Card as ``content``; a message holds about 28 KB; a
  TextBlock breaks a line at ``\\n\\n`` (``fontType`` Monospace since card version 1.2).
  https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook,
  https://learn.microsoft.com/en-us/connectors/teams/ (message size),
  https://learn.microsoft.com/en-us/microsoftteams/platform/task-modules-and-cards/cards/cards-format
- ``gotify``: ``POST /message`` needs ``message`` (Markdown with the ``client::display`` extra), takes ``title`` and
  ``priority``; its token is in the URL (``?token=``). No length limit is documented: GOTIFY_MESSAGE here.
  https://gotify.net/api-docs, https://gotify.net/docs/msgextras
- ``ntfy``: the body is the message, as plain text (Markdown shows in the web app only), up to 4096 bytes (a longer
  one becomes an attachment); the ``X-Title``, ``X-Tags`` and ``X-Priority`` headers (the canonical names; the short
  ``Priority`` is also a proxy's header, RFC 9218), a non-ASCII value RFC 2047 encoded as the docs advise.
  https://docs.ntfy.sh/publish/

Standard library only, Python 3.7 or later; imports nothing of the collection (the supervisor runs it in the target).
"""

from __future__ import annotations

import base64
import json
import re
import typing as t

FORMATS = ("json", "slack", "discord", "mattermost", "teams", "gotify", "ntfy")
JSON_TYPE = "application/json"
ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
REASON_LENGTH = 300  # characters of the reason in the summary
SUMMARY_LENGTH = 500  # characters of the summary: its Markdown, escaped, always fits the smallest room below
TITLE_LENGTH = 200
LINE_LENGTH = 500  # characters of a log line, its end kept (a progress bar's last state)
SLACK_SECTION = 3000  # characters of a section block's text
DISCORD_CONTENT = 2000
MATTERMOST_TEXT = 16383
TEAMS_BYTES = 27 * 1024  # of the request, under the 28 KB of a message
GOTIFY_MESSAGE = 8000  # characters (our choice)
NTFY_BYTES = 4096
URGENT = ("failed", "lost", "timeout", "stalled")
NTFY_TAGS = {"started": "arrow_forward", "proven": "heavy_check_mark", "restarted": "repeat", "stalled": "warning",
             "timeout": "hourglass", "finished": "white_check_mark", "failed": "x", "lost": "question"}
RFC2047_BYTES = 45  # of UTF-8 in one encoded word: 72 characters, under RFC 2047's 75

_ADJACENT_BACKTICK = re.compile("`(?=`)")
_VISIBLE = {code: chr(0x2400 + code) for code in range(32) if code != 9}  # tabs stay
_VISIBLE[0x7F] = "\u2421"
_VISIBLE.update(dict.fromkeys(range(0x80, 0xA0), "\ufffd"))
_VISIBLE.update(dict.fromkeys(range(0xD800, 0xE000), "\ufffd"))


def encode(value: t.Any) -> bytes:
    """``value`` as JSON in UTF-8 (an event for ``notify_command``, a body): values JSON cannot hold become their
    str() (every value, when that fails too); a lone surrogate (from a log's bytes that are not UTF-8) is written
    as its JSON escape, so the bytes stay valid UTF-8 JSON."""
    try:
        text = json.dumps(value, default=str, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError):
        text = json.dumps({str(key): str(item) for key, item in dict(value).items()}, ensure_ascii=False)
    return text.encode("utf-8", "backslashreplace")


def _words(value: t.Any) -> str:
    """``value`` as one line of printable text, ``?`` for None."""
    text = "?" if value is None else str(value)
    return "".join(char if char.isprintable() else " " for char in text).strip()


def _cut(text: str, length: int) -> str:
    """The first ``length`` characters of ``text``, the last an ellipsis when it was longer."""
    return text if len(text) <= length else text[:length - 1] + "\u2026"


def _units(text: str) -> int:
    """The length of ``text`` in UTF-16 code units, as JavaScript counts characters (never less than Python)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def summary(event: t.Mapping[str, t.Any]) -> str:
    """One line for people: ``HOST SESSION: EVENT (attempt N): REASON``, e.g. ``ct200 train: failed (attempt 3): exit status 1``.

    A missing or None host, session or event is ``?``; no attempt, no ``(attempt N)``; without a reason, the exit
    status when there is one. The reason keeps its first REASON_LENGTH characters, the line its first SUMMARY_LENGTH.
    """
    line = f"{_words(event.get('host'))} {_words(event.get('session_name'))}: {_words(event.get('event'))}"
    if event.get("attempt") is not None:
        line += f" (attempt {_words(event.get('attempt'))})"
    reason = event.get("reason")
    if not reason and event.get("exit_status") is not None:
        reason = f"exit status {event.get('exit_status')}"
    if reason:
        line += f": {_cut(_words(reason), REASON_LENGTH)}"
    return _cut(line, SUMMARY_LENGTH)


def _title(event: t.Mapping[str, t.Any]) -> str:
    return _cut(f"{_words(event.get('host'))} {_words(event.get('session_name'))}: {_words(event.get('event'))}", TITLE_LENGTH)


def _tail(event: t.Mapping[str, t.Any]) -> list[str]:
    """The event's ``log_tail`` (a list of lines, or a text), each line visible and cut to its last LINE_LENGTH characters."""
    tail = event.get("log_tail") or []
    lines = [str(line) for line in tail] if isinstance(tail, (list, tuple)) else str(tail).splitlines()
    return [_keep_end(line.translate(_VISIBLE), LINE_LENGTH) for line in lines]


def _keep_end(line: str, length: int) -> str:
    return line if len(line) <= length else "\u2026" + line[len(line) - length + 1:]


def _fit(lines: list[str], fits: t.Callable[[list[str]], bool]) -> list[str]:
    """The newest of ``lines``, as many as ``fits`` takes, after a line that counts those left out (none left out: no such line)."""

    def window(count: int) -> list[str]:
        left_out = len(lines) - count
        note = [f"\u2026 {left_out} earlier line{'' if left_out == 1 else 's'} left out"] if left_out else []
        return note + lines[left_out:]

    low, high = 0, len(lines)
    while low < high:  # the largest count that fits
        middle = (low + high + 1) // 2
        if fits(window(middle)):
            low = middle
        else:
            high = middle - 1
    return window(low)


def _markdown(text: str) -> str:
    """``text`` with a zero-width space after each backtick that another follows: it can neither open nor close a code block."""
    return _ADJACENT_BACKTICK.sub("`\u200b", text)


def _code(lines: list[str]) -> str:
    """``lines`` as a Markdown code block no line can close; empty without lines."""
    return "```\n" + "\n".join(_markdown(line) for line in lines) + "\n```" if lines else ""


def _with_code(event: t.Mapping[str, t.Any], fits: t.Callable[[str], bool]) -> str:
    """The summary, then the newest log lines as a code block, as many as ``fits`` (of the whole text) takes."""
    head = _markdown(summary(event))

    def text(lines: list[str]) -> str:
        return head + "\n" + _code(lines) if lines else head

    return text(_fit(_tail(event), lambda lines: fits(text(lines))))


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(event: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """``text`` (the notification's words) and the same as a section block, the log in a second one."""
    head = _slack_escape(_markdown(summary(event)))
    lines = _fit(_tail(event), lambda lines: _units(_slack_escape(_code(lines))) <= SLACK_SECTION)
    texts = [head, _slack_escape(_code(lines))] if lines else [head]
    return {"text": head, "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}} for text in texts]}


def _discord(event: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {"content": _with_code(event, lambda text: _units(text) <= DISCORD_CONTENT), "allowed_mentions": {"parse": []}}


def _mattermost(event: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {"text": _with_code(event, lambda text: _units(text) <= MATTERMOST_TEXT)}


def _teams(event: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """A message with one Adaptive Card: the summary in bold, the log in a monospace TextBlock."""

    def message(lines: list[str]) -> dict[str, t.Any]:
        body = [{"type": "TextBlock", "text": summary(event), "wrap": True, "weight": "Bolder"}]
        if lines:
            body.append({"type": "TextBlock", "text": "\n\n".join(lines), "wrap": True, "fontType": "Monospace"})
        card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard", "version": "1.2", "body": body}
        return {"type": "message", "attachments": [{"contentType": ADAPTIVE_CARD, "contentUrl": None, "content": card}]}

    return message(_fit(_tail(event), lambda lines: len(encode(message(lines))) <= TEAMS_BYTES))


def _gotify(event: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {"title": _title(event), "message": _with_code(event, lambda text: len(text) <= GOTIFY_MESSAGE),
            "priority": 8 if event.get("event") in URGENT else 5, "extras": {"client::display": {"contentType": "text/markdown"}}}


def _rfc2047(text: str) -> str:
    """``text`` for an HTTP header: itself when ASCII, else RFC 2047 encoded words (base64 of UTF-8) a space apart."""
    if all(char < "\x80" for char in text):
        return text
    words, word = [], b""
    for char in text:
        data = char.encode("utf-8", "replace")
        if len(word) + len(data) > RFC2047_BYTES:
            words.append(word)
            word = b""
        word += data
    words.append(word)
    return " ".join(f"=?UTF-8?B?{base64.b64encode(word).decode('ascii')}?=" for word in words)


def _ntfy(event: t.Mapping[str, t.Any]) -> tuple[bytes, dict[str, str]]:
    """The summary and the newest log lines as plain text; title, tags (an emoji's name, the event) and priority as headers."""
    head = summary(event)
    lines = _fit(_tail(event), lambda lines: len("\n".join([head, ""] + lines).encode("utf-8")) <= NTFY_BYTES)
    body = "\n".join([head, ""] + lines) if lines else head
    name = _words(event.get("event"))
    tags = ",".join(tag for tag in (NTFY_TAGS.get(name), name) if tag)
    headers = {"Content-Type": "text/plain; charset=utf-8", "X-Title": _rfc2047(_title(event)), "X-Tags": _rfc2047(tags),
               "X-Priority": "high" if name in URGENT else "default"}
    return body.encode("utf-8"), headers


_JSON_BODIES: dict[str, t.Callable[[t.Mapping[str, t.Any]], t.Any]] = {
    "slack": _slack, "discord": _discord, "mattermost": _mattermost, "teams": _teams, "gotify": _gotify}


def request(fmt: str, event: t.Mapping[str, t.Any]) -> tuple[bytes, dict[str, str]]:
    """The body and the headers (``Content-Type`` always) that bring ``event`` to a service of ``fmt``, one of FORMATS.

    ``json`` is the event itself, as ``notify_command`` gets it (``encode``), as before ``notify_format``. Raises ValueError
    for another ``fmt``; any event (a mapping) gives a request within the service's limits.
    """
    if fmt == "ntfy":
        return _ntfy(event)
    if fmt != "json" and fmt not in _JSON_BODIES:
        raise ValueError(f"Invalid notify_format {fmt!r}: use one of {', '.join(FORMATS)}")
    return encode(event if fmt == "json" else _JSON_BODIES[fmt](event)), {"Content-Type": JSON_TYPE}
