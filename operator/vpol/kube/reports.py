"""Reading and writing PolicyReports and ClusterPolicyReports (wgpolicyk8s.io/v1alpha2)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.kube.dynamic import (
    METADATA_ANSWER,
    collection_path,
    encoded,
    get_object,
    list_items,
    list_pages,
    object_path,
    send_encoded,
)
from vpol.kube.objects import FIELD_MANAGER

logger = logging.getLogger(__name__)

GROUP, VERSION = "wgpolicyk8s.io", "v1alpha2"
#: Reports are read back in small pages: a parsed page is several times its JSON size,
#: and a restart reads one report per scanned resource.
REPORT_PAGE_SIZE = 100
#: The APIService of the reports' group-version: local (the API server's CRDs) or another API server's (Kyverno's
#: reports-server, which keeps them in PostgreSQL).
APISERVICE = f"{VERSION}.{GROUP}"


class Reports:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self.custom: Any = client.CustomObjectsApi(api)
        #: Whether another API server served the reports when they were last read back (:meth:`existing`).
        self.served_elsewhere = False

    def existing(self, label_selector: str) -> Iterator[dict[str, Any]]:
        """Every report carrying ``label_selector``, both kinds, page by page; the next page is fetched while the
        caller works on this one (a restart reads back one report per scanned resource).

        Served by another API server (:meth:`aggregated`: Kyverno's reports-server), whose lists ignore ``limit``
        and come whole, PolicyReports are read namespace by namespace, each answer one report at a time as it
        arrives (:func:`list_items`): a restart holds one report of the answer in hand, not a whole namespace's
        parsed (1,000 reports: 18.5 MiB), nor every report in one answer (at 10,000 Pods, 480 MiB)."""
        aggregated = self.served_elsewhere = self.aggregated()
        namespaces: list[str] = [""]
        if aggregated:
            namespaces = [str((n.get("metadata") or {}).get("name", "")) for items, _rv in
                          list_pages(self.api, "", "v1", "namespaces") for n in items]
            logger.info("reports are served by the APIService %s's own server (its lists are not paged): reading "
                        "them back namespace by namespace (%d), one report at a time", APISERVICE, len(namespaces))
        for plural in ("policyreports", "clusterpolicyreports"):
            try:
                for namespace in namespaces if plural == "policyreports" else [""]:
                    if aggregated:
                        yield from list_items(self.api, GROUP, VERSION, plural, namespace=namespace,
                                              label_selector=label_selector, page_size=REPORT_PAGE_SIZE)
                        continue
                    for items, _rv in list_pages(self.api, GROUP, VERSION, plural, namespace=namespace,
                                                 label_selector=label_selector, page_size=REPORT_PAGE_SIZE,
                                                 prefetch=True):
                        yield from items
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def aggregated(self) -> bool:
        """Whether another API server serves the reports (the APIService names a Service, as Kyverno's
        reports-server registers it) rather than the API server's own CRDs. False when that cannot be read (no
        such APIService, or no permission to get it: the operator's ClusterRole grants exactly this one)."""
        try:
            service = get_object(self.api, "apiregistration.k8s.io", "v1", "apiservices", "", APISERVICE)
        except (ApiException, ValueError):
            return False
        return bool(((service or {}).get("spec") or {}).get("service"))

    def apply(self, report: Mapping[str, Any]) -> str:
        """Server-side apply of a whole report (field manager vpol, forced); the report's new resourceVersion."""
        return _version(send_encoded(self.api, "PATCH", self._path(report, named=True), encoded(report),
                                     content_type="application/apply-patch+yaml", accept=METADATA_ANSWER,
                                     query=[("fieldManager", FIELD_MANAGER), ("force", "true")]))

    def create(self, report: Mapping[str, Any]) -> str | None:
        """Create a report; its resourceVersion, or None when it exists already (then apply it).

        For a report that does not exist yet a create costs the API server about a
        fifth less than a server-side apply (measured with 1,000 16-result reports:
        5.6 s against 7.1 s of control-plane CPU). Every write sets the same fields,
        so nothing the create set is left behind by a later update or apply.
        """
        try:
            answer = send_encoded(self.api, "POST", self._path(report, named=False), encoded(report),
                                  content_type="application/json", accept=METADATA_ANSWER,
                                  query=[("fieldManager", FIELD_MANAGER)])
        except ApiException as exc:
            if exc.status == 409:
                return None
            raise
        return _version(answer)

    def update(self, report: Mapping[str, Any], version: str) -> str | None:
        """Replace a report that is still at ``version`` (the resourceVersion of vpol's last write of it); its new
        resourceVersion, or None when it changed or went away since (then apply it).

        An update (PUT) of a report costs the API server about a fifth less than a server-side apply of the same
        report (bench/results/scan.md, "Ways of writing a report"): it is not merged with the stored object's fields
        and managers. It replaces the whole object, so it is used only at the version vpol itself wrote: a
        report someone else changed since fails the precondition, and the apply that follows keeps their
        fields.
        """
        body = dict(report)
        body["metadata"] = {**report["metadata"], "resourceVersion": version}
        try:
            answer = send_encoded(self.api, "PUT", self._path(report, named=True), encoded(body),
                                  content_type="application/json", accept=METADATA_ANSWER,
                                  query=[("fieldManager", FIELD_MANAGER)])
        except ApiException as exc:
            if exc.status in (404, 409):
                return None
            raise
        return _version(answer)

    @staticmethod
    def _path(report: Mapping[str, Any], *, named: bool) -> str:
        md = report["metadata"]
        namespaced = report["kind"] == "PolicyReport"
        plural = "policyreports" if namespaced else "clusterpolicyreports"
        namespace = str(md.get("namespace") or "") if namespaced else ""
        if named:
            return object_path(GROUP, VERSION, plural, namespace, str(md["name"]))
        return collection_path(GROUP, VERSION, plural, namespace)

    def delete(self, name: str, namespace: str) -> None:
        try:
            if namespace:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "policyreports", name)
            else:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterpolicyreports", name)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _version(answer: bytes) -> str:
    """The resourceVersion of the object a write answered with ("" when it cannot be read)."""
    try:
        return str(json.loads(answer or b"{}").get("metadata", {}).get("resourceVersion", ""))
    except (ValueError, AttributeError):
        return ""
