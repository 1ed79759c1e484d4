"""The offline I/O backend: Kyverno's I/O libraries answered from test data.

:class:`OfflineBackend` serves ``resource.*``, ``http.*``,
``globalContext.Get`` and ``image.GetMetadata`` from data the caller has
already read and parsed (this module does no file or network I/O):

* Kubernetes objects (Kyverno CLI ``Context`` ``spec.resources``,
  ``ClusterResource`` ``spec.resources``, ``--cluster-resources`` files),
* CustomResourceDefinitions, which give the plural (and scope) of their kind,
* image metadata (``Context`` ``spec.images``), keyed by the exact reference,
* GlobalContextEntry data: mocked by entry name (a Kyverno CLI test's ``globalContextEntries``, answered as
  Kyverno's CLI answers them), or entries read from files and served as in a cluster
  (:class:`vpol.cel.global_context.GlobalContextView`),
* canned HTTP responses (a Kyverno CLI test's ``apiCallResponses``:
  ``{method, url, response}``; the ``response`` value is what the call
  returns, e.g. ``{"statusCode": 200, "body": {...}}``).

Objects are found by apiVersion, resource (plural), namespace and name, as
the API server would. A kind's plural comes from a CRD when one declares it,
else from Kubernetes' guess (``meta.UnsafeGuessKindToResource``: lower case,
``endpoints`` unchanged, ``s`` -> ``ses``, ``y`` -> ``ies``, else ``+s``).
A missing object is an error worded like the API server's NotFound
(``configmaps "name" not found``), as Kyverno's CLI reports it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from vpol.cel.backend import Backend, BackendUnavailable, ObjectNotFound
from vpol.cel.global_context import GlobalContextView
from vpol.cel.libraries.kubernetes.goquote import go_quote

_CLI_GROUP = "cli.kyverno.io"


class NotFound(LookupError):
    """The requested object or entry is not in the offline data."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "not found"


class MissingObject(NotFound, ObjectNotFound):
    """No such object in the offline data (``resource.Get`` yields null)."""


def split_api_version(api_version: str) -> tuple[str, str]:
    """(group, version); the core group is ``""`` (``"v1"`` -> ``("", "v1")``)."""
    # schema.ParseGroupVersion
    if api_version in ("", "/"):
        return "", ""
    if api_version.count("/") > 1:
        raise ValueError(f"unexpected GroupVersion string: {api_version}")
    group, _, version = api_version.rpartition("/")
    return group, version


def guess_plural(kind: str) -> str:
    """Kubernetes' ``UnsafeGuessKindToResource`` plural for ``kind``."""
    singular = kind.lower()
    if not singular or singular.endswith("endpoints"):
        return singular
    if singular.endswith("s"):
        return singular + "es"
    if singular.endswith("y"):
        return singular[:-1] + "ies"
    return singular + "s"


def _group_resource(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


class OfflineBackend(Backend):
    """Answers Kyverno's I/O libraries from already-parsed test data."""

    name = "offline"

    def __init__(
        self,
        *,
        resources: Iterable[Mapping[str, Any]] = (),
        crds: Iterable[Mapping[str, Any]] = (),
        images: Iterable[Mapping[str, Any]] | Mapping[str, Mapping[str, Any]] = (),
        global_context: Mapping[str, Any] | None = None,
        http_responses: Iterable[Mapping[str, Any]] = (),
        global_entries: GlobalContextView | None = None,
    ) -> None:
        """
        :param resources: Kubernetes objects (``apiVersion``, ``kind``,
            ``metadata.name``, optional ``metadata.namespace``); ``List``
            objects are expanded.
        :param crds: CustomResourceDefinition objects; they declare plurals
            and are also served as ``apiextensions.k8s.io/v1`` objects.
        :param images: ``Context`` ``spec.images`` entries (each with an
            ``image`` reference), or a mapping reference -> metadata.
        :param global_context: GlobalContextEntry name -> mocked data (a test's ``globalContextEntries``,
            resolved: the data, or a mapping projection name -> value).
        :param global_entries: GlobalContextEntry objects read from files, with their data (served as in a
            cluster); a mocked name wins.
        :param http_responses: ``{"method": "GET", "url": ..., "response":
            ...}`` entries; ``method`` may be omitted to answer any method.
        """
        crd_list = [dict(c) for c in crds]
        #: (group, kind) -> plural, from CRDs.
        self._plurals: dict[tuple[str, str], str] = {}
        for crd in crd_list:
            spec = crd.get("spec") or {}
            names = spec.get("names") or {}
            if spec.get("group") is not None and names.get("kind") and names.get("plural"):
                self._plurals[(str(spec["group"]), str(names["kind"]))] = str(names["plural"])
        #: (group, version, resource) -> namespace -> name -> object
        self._objects: dict[tuple[str, str, str], dict[str, dict[str, dict[str, Any]]]] = {}
        #: (group, version, resource) -> kind, for List results
        self._kinds: dict[tuple[str, str, str], str] = {}
        for obj in [*crd_list, *resources]:
            self._add(obj)
        self._images: dict[str, dict[str, Any]] = {}
        if isinstance(images, Mapping):
            for ref, data in images.items():
                self._images[str(ref)] = dict(data)
        else:
            for entry in images:
                self._add_image(entry)
        self._global_context: dict[str, Any] = dict(global_context or {})
        self.global_entries = global_entries
        self._responses: dict[tuple[str, str], Any] = {}
        for response in http_responses:
            method = str(response.get("method") or "").upper()
            self._responses[(method, str(response.get("url", "")))] = response.get("response")

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Mapping[str, Any]],
        *,
        global_context: Mapping[str, Any] | None = None,
        http_responses: Iterable[Mapping[str, Any]] = (),
        global_entries: GlobalContextView | None = None,
    ) -> OfflineBackend:
        """Build from parsed YAML documents of context and cluster-resource files.

        Understood: ``cli.kyverno.io`` ``Context`` (``spec.resources``,
        ``spec.images``) and ``ClusterResource`` (``spec.resources``,
        ``spec.crds`` entries that are already-parsed CRD objects; file
        paths there must be read by the caller and passed as documents),
        ``CustomResourceDefinition`` documents, ``List`` documents and any
        other Kubernetes object. Other ``cli.kyverno.io`` documents (Test,
        Value...) are ignored.
        """
        resources: list[Mapping[str, Any]] = []
        crds: list[Mapping[str, Any]] = []
        images: list[Mapping[str, Any]] = []

        def take(doc: Any) -> None:
            if not isinstance(doc, Mapping):
                return
            api_version = str(doc.get("apiVersion") or "")
            kind = str(doc.get("kind") or "")
            spec = doc.get("spec") or {}
            if api_version.startswith(_CLI_GROUP + "/"):
                if kind in ("Context", "ClusterResource"):
                    for item in spec.get("resources") or []:
                        take(item)
                    for crd in spec.get("crds") or []:
                        take(crd)
                    images.extend(i for i in spec.get("images") or [] if isinstance(i, Mapping))
                return
            if kind == "CustomResourceDefinition" and api_version.startswith("apiextensions.k8s.io/"):
                crds.append(doc)
            elif kind.endswith("List") and isinstance(doc.get("items"), list):
                for item in doc["items"]:
                    take(item)
            elif api_version and kind:
                resources.append(doc)

        for document in documents:
            take(document)
        return cls(resources=resources, crds=crds, images=images, global_context=global_context,
                   http_responses=http_responses, global_entries=global_entries)

    # -- indexing -----------------------------------------------------------

    def objects(self) -> Iterable[dict[str, Any]]:
        """Every object held (context and cluster resources, CRDs included)."""
        for by_namespace in self._objects.values():
            for by_name in by_namespace.values():
                yield from by_name.values()

    def plural(self, group: str, kind: str) -> str:
        """The resource name of ``kind`` in ``group``: a CRD's plural, else the guess."""
        return self._plurals.get((group, kind)) or guess_plural(kind)

    def _add(self, obj: Mapping[str, Any]) -> None:
        kind = str(obj.get("kind") or "")
        items = obj.get("items")
        if kind.endswith("List") and isinstance(items, list):
            for item in items:
                if isinstance(item, Mapping):
                    self._add(item)
            return
        metadata = obj.get("metadata") or {}
        name = metadata.get("name")
        if not kind or not name or not obj.get("apiVersion"):
            raise ValueError(f"offline resource without apiVersion, kind or metadata.name: {dict(obj)!r:.200}")
        group, version = split_api_version(str(obj["apiVersion"]))
        key = (group, version, self.plural(group, kind))
        namespace = str(metadata.get("namespace") or "")
        self._objects.setdefault(key, {}).setdefault(namespace, {})[str(name)] = copy.deepcopy(dict(obj))
        self._kinds[key] = kind

    def _add_image(self, entry: Mapping[str, Any]) -> None:
        ref = entry.get("image")
        if not ref:
            raise ValueError(f"image metadata without an 'image' reference: {dict(entry)!r:.200}")
        # Kyverno's ImageData: these three strings are always present.
        data: dict[str, Any] = {"image": str(ref), "resolvedImage": "", "registry": "", "repository": ""}
        data.update(copy.deepcopy(dict(entry)))
        self._images[str(ref)] = data

    # -- Backend ------------------------------------------------------------

    def get_resource(self, api_version: str, resource: str, namespace: str, name: str) -> dict[str, Any]:
        group, version = split_api_version(api_version)
        plural, _, subresource = resource.partition("/")
        if subresource and subresource != "status":
            raise BackendUnavailable(f"the {subresource} subresource is not available offline")
        found = self._objects.get((group, version, plural), {}).get(namespace, {}).get(name)
        if found is None:
            raise MissingObject(f'{_group_resource(group, plural)} "{name}" not found')
        return copy.deepcopy(found)

    def list_resources(self, api_version: str, resource: str, namespace: str) -> dict[str, Any]:
        """The objects of ``resource`` given for ``namespace``, as Kyverno's CLI lists them offline: exactly that
        namespace (``""``: the objects given without one, not every namespace as a cluster would), and an error
        for a resource nothing was given for."""
        group, version = split_api_version(api_version)
        key = (group, version, resource)
        if key not in self._objects:
            raise MissingObject(f"{_group_resource(group, resource)} resource not found")
        by_namespace = self._objects[key]
        items = [copy.deepcopy(obj) for _name, obj in sorted(by_namespace.get(namespace, {}).items())]
        kind = self._kinds.get(key)
        out: dict[str, Any] = {"apiVersion": api_version, "metadata": {}, "items": items}
        if kind:
            out["kind"] = kind + "List"
        return out

    def post_resource(self, api_version: str, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        raise BackendUnavailable("creating resources is not available offline")

    def to_gvr(self, api_version: str, kind: str) -> dict[str, str]:
        if not kind:
            raise ValueError("kind must not be empty")
        group, version = split_api_version(api_version)
        return {"group": group, "version": version, "resource": self.plural(group, kind)}

    def _canned(self, method: str, url: str) -> Any:
        for key in ((method, url), ("", url)):
            if key in self._responses:
                return copy.deepcopy(self._responses[key])
        raise NotFound(f"no canned response for {method} {url}")

    def http_get(self, url: str, headers: dict[str, str] | None = None) -> Any:
        return self._canned("GET", url)

    def http_post(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self._canned("POST", url)

    def http_put(self, url: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self._canned("PUT", url)

    def global_context(self, name: str, projection: str) -> Any:
        # Kyverno's CLI (its FakeContextProvider) answers null for an unknown entry, and looks a projection up as
        # a key of the entry's mocked data.
        if name not in self._global_context:
            return self.global_entries.get_checked(name, projection) if self.global_entries is not None else None
        data = self._global_context[name]
        if not projection:
            return data
        if not isinstance(data, Mapping):
            raise NotFound(f"projection {go_quote(projection)} not found in global context entry {go_quote(name)}: "
                           "stored value is not an object")
        if projection not in data:
            raise NotFound(f"projection {go_quote(projection)} not found in global context entry {go_quote(name)}")
        return data[projection]

    def image_metadata(self, image: str) -> dict[str, Any]:
        found = self._images.get(image)
        if found is None:
            raise NotFound(f"image data for {image} not found in the context")
        return copy.deepcopy(found)
