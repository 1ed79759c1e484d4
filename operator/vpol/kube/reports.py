"""Reading and writing PolicyReports and ClusterPolicyReports (wgpolicyk8s.io/v1alpha2)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from vpol.kube.dynamic import list_pages
from vpol.kube.objects import FIELD_MANAGER

GROUP, VERSION = "wgpolicyk8s.io", "v1alpha2"
#: Reports are read back in small pages: a parsed page is several times its JSON size,
#: and a restart reads one report per scanned resource.
REPORT_PAGE_SIZE = 100


class Reports:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self.custom: Any = client.CustomObjectsApi(api)

    def existing(self, label_selector: str) -> Iterator[dict[str, Any]]:
        """Every report carrying ``label_selector``, both kinds, page by page."""
        for plural in ("policyreports", "clusterpolicyreports"):
            try:
                for items, _rv in list_pages(self.api, GROUP, VERSION, plural, label_selector=label_selector,
                                             page_size=REPORT_PAGE_SIZE):
                    yield from items
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def apply(self, report: Mapping[str, Any]) -> None:
        md = report["metadata"]
        kw = dict(field_manager=FIELD_MANAGER, force=True, _content_type="application/apply-patch+yaml")
        if report["kind"] == "PolicyReport":
            self.custom.patch_namespaced_custom_object(GROUP, VERSION, md["namespace"], "policyreports", md["name"],
                                                       dict(report), **kw)
        else:
            self.custom.patch_cluster_custom_object(GROUP, VERSION, "clusterpolicyreports", md["name"], dict(report),
                                                    **kw)

    def create(self, report: Mapping[str, Any]) -> bool:
        """Create a report; False when it exists already (then apply it).

        For a report that does not exist yet a create costs the API server about a
        fifth less than a server-side apply (measured with 1,000 16-result reports:
        5.6 s against 7.1 s of control-plane CPU). Later writes are applies by the
        same field manager; every write sets the same fields, so nothing the create
        set is left behind.
        """
        md = report["metadata"]
        try:
            if report["kind"] == "PolicyReport":
                self.custom.create_namespaced_custom_object(GROUP, VERSION, md["namespace"], "policyreports",
                                                            dict(report), field_manager=FIELD_MANAGER)
            else:
                self.custom.create_cluster_custom_object(GROUP, VERSION, "clusterpolicyreports", dict(report),
                                                         field_manager=FIELD_MANAGER)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def delete(self, name: str, namespace: str) -> None:
        try:
            if namespace:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "policyreports", name)
            else:
                self.custom.delete_cluster_custom_object(GROUP, VERSION, "clusterpolicyreports", name)
        except ApiException as exc:
            if exc.status != 404:
                raise
