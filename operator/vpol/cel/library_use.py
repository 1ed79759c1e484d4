"""Which of Kyverno's I/O libraries a policy calls that the operator cannot serve.

Every library is served in every kind and path (vpol.kube.live_backend), with one exception of vpol's own making:
``http.*`` reaches only the URL prefixes the operator is given (``--http-allow``), and none when it is given
none. A policy calling ``http.*`` there would fail every evaluation, so it must not be ``Ready``: the reconcilers
put what this module finds in the policy's status (``LibrariesServed``, vpol.desired.status). Calls are found in
the expressions' tokens (vpol.cel.compat), so a mention in a string or a comment does not count.
"""

from __future__ import annotations

from collections.abc import Iterable

from vpol.cel.compat import tokenize
from vpol.cel.compat.syntax import names

#: How many field paths a message names before it says how many more there are.
NAMED = 3


def unserved_libraries(expressions: Iterable[tuple[str, str, str]], *, http_enabled: bool) -> list[str]:
    """What the operator cannot serve of what these ``(field path, source, role)`` expressions call, a sentence
    each (empty: everything they call is served)."""
    if http_enabled:
        return []
    paths = [path for path, src, _role in expressions if names(tokenize(src), "http")]
    if not paths:
        return []
    more = f" and {len(paths) - NAMED} more" if len(paths) > NAMED else ""
    return [f"http.* is called ({', '.join(paths[:NAMED])}{more}) but this operator makes no HTTP calls, so every "
            "evaluation would fail: allow the URLs it calls with --http-allow PREFIX (Helm: operator.httpAllow)"]
