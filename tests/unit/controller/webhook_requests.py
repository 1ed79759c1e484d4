"""What the webhook server tests of this directory serve: a policy source with no policies (the server answers
every request allowed, inline) and an AdmissionReview of a ConfigMap."""

from __future__ import annotations

import json

from vpol.controller.admission.policies import Snapshot


class Policies:
    snapshot = Snapshot()
    synced = True

    def listen(self, fn: object) -> None:
        pass


REVIEW = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
    "resource": {"group": "", "version": "v1", "resource": "configmaps"}, "operation": "CREATE",
    "namespace": "default", "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}}}).encode()
