"""API errors in one line: what a log or a status message should say of them.

The generated client's ``ApiException`` prints as a multi-line dump (status,
headers, body); logs and conditions want ``HTTP 404: <the server's message>``.
"""

from __future__ import annotations

import json


def describe(exc: BaseException) -> str:
    """One line about ``exc``: ``HTTP <status>: <message>`` for API errors, the first line otherwise."""
    status = getattr(exc, "status", None)
    if status is not None:
        body = getattr(exc, "body", None)
        message = ""
        try:
            message = str(json.loads(body or "").get("message", ""))
        except (TypeError, ValueError, AttributeError):
            message = ""
        reason = getattr(exc, "reason", None)
        return f"HTTP {status}: {message or reason or ''}".strip().rstrip(":")
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__
