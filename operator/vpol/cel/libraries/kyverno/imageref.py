"""Container image references parsed the way Kyverno parses them.

Kyverno's image library calls go-containerregistry's ``name.ParseReference``
with default (weak) validation. Its normalisation differs from Docker's own
reference grammar and from the Python packages that implement that grammar
(``docker-image-py`` and the like): Docker Hub is ``index.docker.io`` (the
``docker.io`` alias is rewritten), single-component Docker Hub repositories get
``library/``, a missing tag means ``latest``, a reference with both a tag and
a digest is a digest reference (the tag is dropped), only ``sha256`` digests
are accepted, and a first path component is a registry only if it contains
``.`` or ``:``. Matching those rules exactly is the point, so the parser is
written here rather than borrowed.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_REGISTRY = "index.docker.io"
_REGISTRY_ALIAS = "docker.io"
_DEFAULT_NAMESPACE = "library"
_DEFAULT_TAG = "latest"

_REPOSITORY_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-./"
_TAG_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-.ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DIGEST_CHARS = "sh:0123456789abcdef"
# Characters Go's net/url accepts unescaped in a host (besides letters and digits).
_HOST_CHARS = set("-_.~!$&'()*+,;=:[]<>\"")


class BadReference(ValueError):
    """The string is not an image reference."""


@dataclass(frozen=True)
class Reference:
    """A parsed reference: either a tag reference or a digest reference."""

    original: str
    registry: str
    #: The repository path, with ``library/`` added for Docker Hub single names.
    repository: str
    #: The tag of a tag reference ("latest" when none was given), else "".
    tag: str
    #: The digest of a digest reference, else "".
    digest: str

    @property
    def is_digest(self) -> bool:
        return bool(self.digest)

    @property
    def identifier(self) -> str:
        return self.digest or self.tag

    @property
    def context_name(self) -> str:
        """``registry/repository``, go-containerregistry's ``Context().String()``."""
        return f"{self.registry}/{self.repository}"

    @property
    def identifier_with_separator(self) -> str:
        """Kyverno's ``identifierWithSeparator()``.

        Kyverno takes what follows the normalised repository name in the
        *original* string, falling back to ``":" + identifier``; the same
        arithmetic is kept so results agree, including for inputs where it
        is surprising (a short Docker Hub name with a digest).
        """
        if len(self.original) > len(self.context_name):
            return self.original[len(self.context_name):]
        return ":" + self.identifier if self.identifier else ""


def _check_element(what: str, element: str, allowed: str, minimum: int, maximum: int) -> None:
    if not minimum <= len(element) <= maximum:
        raise BadReference(f"{what} must be between {minimum} and {maximum} characters in length: {element}")
    if any(c not in allowed for c in element):
        raise BadReference(f"{what} can only contain the characters `{allowed}`: {element}")


def _valid_port(port: str) -> bool:
    # Go's validOptionalPort: empty, or ":" followed by digits only.
    return port == "" or (port.startswith(":") and all(c.isdigit() and c.isascii() for c in port[1:]))


def _check_registry(name: str) -> None:
    """go-containerregistry's check: ``url.Parse("//" + name).Host == name``."""
    bad = BadReference(f"registries must be valid RFC 3986 URI authorities: {name}")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name) or any(c in name for c in "?#@"):
        raise bad
    if name.startswith("["):
        end = name.find("]")
        if end < 0 or not _valid_port(name[end + 1:]):
            raise bad
    elif ":" in name and not _valid_port(name[name.rfind(":"):]):
        raise bad
    for c in name:
        if c.isascii() and not c.isalnum() and c not in _HOST_CHARS:
            raise bad


def _repository(name: str) -> tuple[str, str]:
    """(registry, repository path as written) for ``name`` without tag or digest."""
    if not name:
        raise BadReference("a repository name must be specified")
    registry, repo = "", name
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first):
        registry, repo = first, rest
    _check_element("repository", repo, _REPOSITORY_CHARS, 2, 255)
    _check_registry(registry)
    if registry in ("", _REGISTRY_ALIAS):
        registry = DEFAULT_REGISTRY
    return registry, repo


def _repository_str(registry: str, repo: str) -> str:
    if "/" not in repo and registry == DEFAULT_REGISTRY:
        return f"{_DEFAULT_NAMESPACE}/{repo}"
    return repo


def _parse_tag(s: str) -> Reference:
    base, tag = s, ""
    parts = s.split(":")
    if len(parts) > 1 and "/" not in parts[-1]:
        base, tag = ":".join(parts[:-1]), parts[-1]
    if tag:
        _check_element("tag", tag, _TAG_CHARS, 1, 127)
    registry, repo = _repository(base)
    return Reference(s, registry, _repository_str(registry, repo), tag or _DEFAULT_TAG, "")


def _parse_digest(s: str) -> Reference:
    parts = s.split("@")
    if len(parts) != 2:
        raise BadReference(f"a digest must contain exactly one '@' separator (e.g. registry/repository@digest) saw: {s}")
    base, digest = parts
    _check_element("digest", digest, _DIGEST_CHARS, 71, 71)
    try:
        tagged = _parse_tag(base)
        base = tagged.context_name
    except BadReference:
        pass
    registry, repo = _repository(base)
    return Reference(s, registry, _repository_str(registry, repo), "", digest)


def parse(s: str) -> Reference:
    """Parse like ``name.ParseReference(s)``: a tag reference, else a digest reference."""
    if s.startswith(("http://", "https://")):
        raise BadReference(
            f"image reference must not contain a URL scheme (http:// or https://): {s}"
        )
    try:
        return _parse_tag(s)
    except BadReference:
        pass
    try:
        return _parse_digest(s)
    except BadReference:
        pass
    raise BadReference(f"could not parse reference: {s}")
