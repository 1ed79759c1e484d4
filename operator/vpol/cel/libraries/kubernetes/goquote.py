"""Go's ``strconv.Quote`` (the ``%q`` verb), so error texts read like Kubernetes'."""

from __future__ import annotations

_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == " " or (ch.isprintable() and ch not in _ESCAPES):
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        else:
            code = ord(ch)
            if code < 0x80:
                out.append(f"\\x{code:02x}")
            elif code < 0x10000:
                out.append(f"\\u{code:04x}")
            else:
                out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
