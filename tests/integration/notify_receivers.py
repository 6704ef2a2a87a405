# SPDX-License-Identifier: GPL-3.0-or-later
# Copyright: Contributors to the trainops.pct_launch collection
"""Stand-ins for the services of ``notify_format``: HTTP servers on 127.0.0.1 that take or refuse a POST as each
service does, written from the services' documentation (never from ``_notify_format``, which they test).

A request a service refuses gets its status and body; one it takes is recorded (``path``, ``headers``, ``body``)
and answered as the service answers. Where the real service takes a request and fails later (a Teams Workflows
flow run), the stand-in refuses it at once, with the flow's error, so a test sees it. Characters are counted as
UTF-16 code units, as JavaScript counts them (the stricter reading of "characters")::

    with receiver("slack") as (url, received):
        ...  # POST to url; received[0]["body"] is the body Slack would have shown
"""

from __future__ import annotations

import contextlib
import email.header
import http.server
import json
import threading
import typing as t
import urllib.parse

Answer = t.Tuple[int, str, bytes]  # status, Content-Type, body
PLAIN = "text/plain; charset=utf-8"
GOTIFY_TOKEN = "AppT0ken.gotify"
PATHS = {  # the shape of each service's webhook URL, with a token where the service has one
    "json": "/hook/T0K3N", "slack": "/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX", "discord": "/api/webhooks/1234/T0K3N",
    "mattermost": "/hooks/xxxgeneratedkeyxxx", "teams": "/powerautomate/automations/direct/workflows/abc/triggers/manual/paths/invoke",
    "gotify": f"/message?token={GOTIFY_TOKEN}", "ntfy": "/trainops_alerts"}


def _characters(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _object(body: bytes) -> dict[str, t.Any] | None:
    """The body as a JSON object, or None."""
    try:
        value = json.loads(body.decode("utf-8"))
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return None
    return value if isinstance(value, dict) else None


def _utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _json(status: int, value: t.Any) -> Answer:
    return status, "application/json", json.dumps(value).encode("utf-8")


def _plain(status: int, text: str) -> Answer:
    return status, PLAIN, text.encode("utf-8")


class Receiver(http.server.BaseHTTPRequestHandler):
    """A POST is answered with ``refusal(body)``, or, when that is None, recorded in ``received`` and answered with
    ``accepted(taken)`` (``ACCEPTED``). ``serve`` gives each server a subclass with a list of its own."""

    received: list[dict[str, t.Any]] = []
    ACCEPTED: Answer = (200, PLAIN, b"ok")

    def do_POST(self) -> None:  # pylint: disable=invalid-name  # http.server's name
        """Read the body, refuse it as the service does or record it and answer as the service does."""
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = self.refusal(body)
        if answer is None:
            taken = {"path": self.path, "headers": dict(self.headers), "body": body}
            type(self).received.append(taken)
            answer = self.accepted(taken)
        status, content_type, payload = answer
        self.send_response(status)
        if payload:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def refusal(self, body: bytes) -> Answer | None:
        """What the service answers ``body`` when it refuses it, or None when it takes it."""
        raise NotImplementedError

    def accepted(self, taken: dict[str, t.Any]) -> Answer:  # pylint: disable=unused-argument  # for the services that echo
        """What the service answers the request ``taken``."""
        return self.ACCEPTED

    def log_message(self, *args: t.Any) -> None:  # pylint: disable=arguments-differ  # quiet
        pass


class JsonReceiver(Receiver):
    """Any JSON object (the ``json`` format, for a receiver of one's own); 400 otherwise."""

    ACCEPTED = (204, PLAIN, b"")

    def refusal(self, body: bytes) -> Answer | None:
        return None if _object(body) is not None else _plain(400, "not a JSON object")


class SlackReceiver(Receiver):
    """A Slack incoming webhook (https://docs.slack.dev/messaging/sending-messages-using-incoming-webhooks; errors:
    https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks; blocks:
    https://docs.slack.dev/reference/block-kit/blocks, .../blocks/section-block). Plain-text answers, as Slack's:

    - not a JSON object: 400 ``invalid_payload``;
    - no ``text`` and no ``blocks`` or ``attachments``: 400 ``no_text``; an empty ``text``:
      400 ``missing_text_or_fallback_or_attachments``;
    - ``blocks`` not a list of 1 to 50 blocks, or a section whose text is not 1 to 3000 characters: 400 ``invalid_blocks``;
    - else 200 ``ok`` (a ``text`` past 40,000 characters is truncated by Slack, not refused).
    """

    def refusal(self, body: bytes) -> Answer | None:
        message = _object(body)
        if message is None:
            return _plain(400, "invalid_payload")
        text, blocks = message.get("text"), message.get("blocks")
        if not blocks and not message.get("attachments"):
            if text is None:
                return _plain(400, "no_text")
            if not str(text).strip():
                return _plain(400, "missing_text_or_fallback_or_attachments")
        if blocks is not None and not self._valid(blocks):
            return _plain(400, "invalid_blocks")
        return None

    @staticmethod
    def _valid(blocks: t.Any) -> bool:
        if not isinstance(blocks, list) or not 1 <= len(blocks) <= 50:
            return False
        for block in blocks:
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                return False
            text = block.get("text") if block["type"] == "section" else {"type": "plain_text", "text": "-"}
            if not isinstance(text, dict) or text.get("type") not in ("mrkdwn", "plain_text"):
                return False
            if not isinstance(text.get("text"), str) or not 1 <= _characters(text["text"]) <= 3000:
                return False
        return True


class DiscordReceiver(Receiver):
    """Discord's Execute Webhook (https://discord.com/developers/docs/resources/webhook#execute-webhook; JSON error
    codes: https://discord.com/developers/docs/topics/opcodes-and-status-codes#json):

    - not a JSON object: 400 ``{"code": 50109, "message": "The request body contains invalid JSON."}``;
    - none of ``content`` (not blank), ``embeds``, ``poll``, ``components``: 400 ``{"message": "Cannot send an empty
      message", "code": 50006}``;
    - ``content`` past 2000 characters: 400 ``{"code": 50035, "message": "Invalid Form Body", "errors": ...}``;
    - else 204 (no ``?wait=true``: no message object).
    """

    ACCEPTED = (204, PLAIN, b"")

    def refusal(self, body: bytes) -> Answer | None:
        message = _object(body)
        if message is None:
            return _json(400, {"code": 50109, "message": "The request body contains invalid JSON."})
        content = message.get("content")
        if not (isinstance(content, str) and content.strip()) and not any(message.get(key) for key in ("embeds", "poll", "components")):
            return _json(400, {"message": "Cannot send an empty message", "code": 50006})
        if isinstance(content, str) and _characters(content) > 2000:
            error = {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
            return _json(400, {"code": 50035, "message": "Invalid Form Body", "errors": {"content": {"_errors": [error]}}})
        return None


class MattermostReceiver(Receiver):
    """A Mattermost incoming webhook (https://developers.mattermost.com/integrate/webhooks/incoming/; the errors as
    the server's ``HandleIncomingWebhook`` gives them):

    - not a JSON object: 400 ``web.incoming_webhook.parse.app_error`` ("Unable to parse incoming data");
    - an empty or missing ``text`` without ``attachments``: 400 ``web.incoming_webhook.text.app_error``;
    - a ``text`` past 16383 characters: 400 ``web.incoming_webhook.text.length.app_error`` (servers before 5.0 refused
      it; later ones split it into several posts, which breaks a code block: refused here);
    - else 200 ``ok``.
    """

    def refusal(self, body: bytes) -> Answer | None:
        message = _object(body)
        if message is None:
            return self._error("web.incoming_webhook.parse.app_error", "Unable to parse incoming data")
        text = message.get("text")
        if not text and message.get("attachments") is None:
            return self._error("web.incoming_webhook.text.app_error", "No text specified")
        if isinstance(text, str) and _characters(text) > 16383:
            return self._error("web.incoming_webhook.text.length.app_error", "Text too long")
        return None

    @staticmethod
    def _error(error_id: str, message: str) -> Answer:
        return _json(400, {"id": error_id, "message": message, "detailed_error": "", "status_code": 400})


class TeamsReceiver(Receiver):
    """A Teams Workflows webhook, "Post to a channel when a webhook request is received"
    (https://support.microsoft.com/en-us/office/create-incoming-webhooks-with-workflows-for-microsoft-teams-8ae491c7-0394-4861-ba59-055e33f75498,
    the card: https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/add-incoming-webhook,
    the size: https://learn.microsoft.com/en-us/connectors/teams/). The service answers 202 to any POST and its flow
    run fails later; the stand-in answers the flow's error at once:

    - a body past 28 KB: 413 "Request Entity too large";
    - not a JSON object, ``type`` not ``message``, or ``attachments`` not a non-empty list: 400 with the flow's
      "'@triggerOutputs()?['body']?['attachments']' ... The result must be a valid array";
    - an attachment whose ``contentType`` is not ``application/vnd.microsoft.card.adaptive`` or whose ``content`` is
      not an Adaptive Card (``type`` ``AdaptiveCard``, a ``version``, a ``body`` list): 400 "... Property 'type' must be 'AdaptiveCard'";
    - else 202, no body.
    """

    ACCEPTED = (202, PLAIN, b"")
    NOT_ARRAY = ("The execution of template action 'Send_each_adaptive_card' failed: the result of the evaluation of 'foreach' "
                 "expression '@triggerOutputs()?['body']?['attachments']' is of type 'Null'. The result must be a valid array.")
    NOT_CARD = "The specified Teams flowbot adaptive card request is missing or invalid. Property 'type' must be 'AdaptiveCard'"

    def refusal(self, body: bytes) -> Answer | None:
        if len(body) > 28000:
            return _plain(413, "Request Entity too large")
        message = _object(body) or {}
        attachments = message.get("attachments")
        if message.get("type") != "message" or not isinstance(attachments, list) or not attachments:
            return _plain(400, self.NOT_ARRAY)
        for attachment in attachments:
            card = attachment.get("content") if isinstance(attachment, dict) else None
            if (not isinstance(card, dict) or attachment.get("contentType") != "application/vnd.microsoft.card.adaptive"
                    or card.get("type") != "AdaptiveCard" or not isinstance(card.get("version"), str) or not isinstance(card.get("body"), list)):
                return _plain(400, self.NOT_CARD)
        return None


class GotifyReceiver(Receiver):
    """Gotify's ``POST /message`` (https://gotify.net/api-docs; the server's auth/authentication.go, error/handler.go,
    model/message.go):

    - no application token (``?token=``, ``X-Gotify-Key`` or ``Authorization: Bearer``) or another one: 401
      ``{"error": "Unauthorized", "errorCode": 401, "errorDescription": "you need to provide a valid access token ..."}``;
    - not a JSON object, an empty or missing ``message``, a ``priority`` that is not an integer: 400
      ``{"error": "Bad Request", "errorCode": 400, "errorDescription": "Field 'message' is required"}`` (or ``is not valid``);
    - else 200 with the message as stored.
    """

    def refusal(self, body: bytes) -> Answer | None:
        if self._token() != GOTIFY_TOKEN:
            return self._error(401, "you need to provide a valid access token or user credentials to access this api")
        message = _object(body)
        if message is None or not isinstance(message.get("message"), str) or not message["message"]:
            return self._error(400, "Field 'message' is required")
        priority = message.get("priority")
        if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
            return self._error(400, "Field 'priority' is not valid")
        return None

    def _token(self) -> str:
        """The token as Gotify reads it: the query's ``token``, else ``X-Gotify-Key``, else ``Authorization: Bearer``."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("token") or [""]
        bearer = self.headers.get("Authorization") or ""
        return query[0] or self.headers.get("X-Gotify-Key") or (bearer[7:] if bearer.lower().startswith("bearer ") else "")

    @staticmethod
    def _error(status: int, description: str) -> Answer:
        return _json(status, {"error": "Unauthorized" if status == 401 else "Bad Request", "errorCode": status, "errorDescription": description})

    def accepted(self, taken: dict[str, t.Any]) -> Answer:
        message = json.loads(taken["body"])
        stored = {key: message.get(key) for key in ("message", "title", "priority", "extras")}
        return _json(200, {"id": len(type(self).received), "appid": 1, **stored, "date": "2026-01-01T00:00:00Z"})


class NtfyReceiver(Receiver):
    """An ntfy server's publish (https://docs.ntfy.sh/publish/, "Limitations" and "List of all parameters"; the
    server's server.go and errors.go), on a server without an attachment cache (ntfy's default):

    - a body past 4,096 bytes, or not UTF-8, is an attachment: 400 ``{"code": 40014, "http": 400, "error": "invalid
      request: attachments not allowed", ...}``;
    - a priority (``X-Priority``, ``Priority``, ``prio``, ``p``) not 1-5, min, low, default, high, max or urgent:
      400 ``{"code": 40007, "http": 400, "error": "invalid priority parameter", ...}``;
    - a header value in RFC 2047 encoded words is decoded (``decoded``); else any plain body: 200 with the message as JSON.
    """

    PRIORITIES = ("1", "2", "3", "4", "5", "min", "low", "default", "high", "max", "urgent")

    def refusal(self, body: bytes) -> Answer | None:
        if len(body) > 4096 or not _utf8(body):
            return _json(400, {"code": 40014, "http": 400, "error": "invalid request: attachments not allowed",
                               "link": "https://ntfy.sh/docs/config/#attachments"})
        priority = self.param("X-Priority", "Priority", "prio", "p").lower()
        if priority and priority not in self.PRIORITIES:
            return _json(400, {"code": 40007, "http": 400, "error": "invalid priority parameter", "link": "https://ntfy.sh/docs/publish/#message-priority"})
        return None

    def param(self, *names: str) -> str:
        """The first of the headers ``names`` that is set, RFC 2047 encoded words decoded (as ntfy reads them)."""
        for name in names:
            value = decoded(self.headers.get(name) or "").strip()
            if value:
                return value
        return ""

    def accepted(self, taken: dict[str, t.Any]) -> Answer:
        return _json(200, {"id": str(len(type(self).received)), "event": "message", "topic": taken["path"].lstrip("/"),
                           "message": taken["body"].decode("utf-8").strip(), "title": self.param("X-Title", "Title", "t")})


def decoded(value: str) -> str:
    """A header value with its RFC 2047 encoded words decoded (ntfy's ``maybeDecodeHeader``); as it is when it has none or they are invalid."""
    try:
        return str(email.header.make_header(email.header.decode_header(value)))
    except (ValueError, LookupError, UnicodeDecodeError):
        return value


RECEIVERS: dict[str, type[Receiver]] = {"json": JsonReceiver, "slack": SlackReceiver, "discord": DiscordReceiver, "mattermost": MattermostReceiver,
                                        "teams": TeamsReceiver, "gotify": GotifyReceiver, "ntfy": NtfyReceiver}


def serve(service: str) -> tuple[str, list[dict[str, t.Any]], http.server.ThreadingHTTPServer]:
    """A running stand-in of ``service`` (a key of RECEIVERS) on 127.0.0.1: its webhook URL, the list of the requests
    it took (each ``{"path", "headers", "body"}``) and the server, which the caller shuts down (``server.shutdown()``)."""
    received: list[dict[str, t.Any]] = []
    handler = type(f"{service.title()}Stand_in", (RECEIVERS[service],), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.05,), name=f"receiver-{service}", daemon=True).start()  # polls: a quick shutdown
    return f"http://127.0.0.1:{server.server_address[1]}{PATHS[service]}", received, server


@contextlib.contextmanager
def receiver(service: str) -> t.Iterator[tuple[str, list[dict[str, t.Any]]]]:
    """``serve(service)`` for a ``with`` block: the URL and the requests taken; the server is shut down at its end."""
    url, received, server = serve(service)
    try:
        yield url, received
    finally:
        server.shutdown()
        server.server_close()
