"""Policy Reporter UI (github.com/kyverno/policy-reporter-ui, built from the shared source by
tests/policyreporter/build-ui), the page Kyverno users read their reports in, showing vpol's reports, read in
headless Chromium (Debian's `chromium`) as a user reads it.

On a control plane of its own: vpol runs a ValidatingPolicy with pass and fail results and a PolicyException
(skip), one that is not scored (warn), one that fails to evaluate (error), a NamespacedValidatingPolicy, a
MutatingPolicy mutating existing resources with background results, a GeneratingPolicy generating for an existing
trigger and an ImageValidatingPolicy (fail: an image without a digest, before any registry is asked). Policy
Reporter core reads the reports, the UI reads core. Chromium opens the UI's dashboard (also as it shows a source
by severity), the policies page, a policy's page, a namespace's page and a resource's page, and the test checks
what they say against the PolicyReports read from the API in the same test: each resource's counts by result
(its report's summary) and by severity, vpol's policies under vpol's source, grouped by the category of their
annotations with their severity and counts, each result's severity, status, message and properties.

What the UI does not show from vpol's reports is its own doing, not vpol's: a policy's title (the UI takes titles
only from a policy plugin; without one it shows the policy's name), and the source's name as written (it
capitalizes it: "Vpol"); docs/install.md says so.

Screenshots of every page opened are kept in ``$VPOL_UI_SCREENSHOTS`` when set (CI keeps that directory as an
artifact), else in the test's temporary directory; with them, the text Chromium read from each page.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import websocket

from tests.e2e.conftest import KubeCluster, e2e_required, go_built, unique_name
from tests.e2e.operator_process import REPO, OperatorProcess, end, free_port, sa_kubeconfig
from tests.e2e.test_policy_reporter import PolicyReporter, apply, vpol_reports
from tests.e2e.vpol_fixtures import install_vpol, wait_for

BUILD_CORE = REPO / "tests" / "policyreporter" / "build"
BUILD_UI = REPO / "tests" / "policyreporter" / "build-ui"
SOURCE = "vpol"
STATUSES = ("pass", "fail", "warn", "error", "skip")
SEVERITIES = ("critical", "high", "medium", "low", "info")
CM = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}
PODS = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["pods"]}
#: A public key for the ImageValidatingPolicy's attestor, which nothing here verifies against (tests/e2e/
#: test_image_validating.py's).
KEY = ("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEzJ2Wzd6cGaiU2Ef8b2XIbdmz4Iu2\n"
       "I1rnOOs5l8v2jsjd+5IJYgcsNz+lXLb0rrPaptb0iIdd5iqzHDtyfXeKDw==\n-----END PUBLIC KEY-----\n")


def required_tool(name: str, why: str) -> str:
    """The path of a command the test needs: a local run without it skips, CI (CI=true, VPOL_REQUIRE_E2E=1)
    fails."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed: {why}"
        if e2e_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    named = os.environ.get("VPOL_UI_SCREENSHOTS")
    if named:
        out = Path(named)
        out.mkdir(parents=True, exist_ok=True)
        return out
    return tmp_path_factory.mktemp("policy-reporter-ui-screenshots")


@pytest.fixture(scope="module")
def binaries() -> tuple[Path, Path]:
    """(Policy Reporter core, Policy Reporter UI's backend)."""
    for tool in ("node", "npm"):
        required_tool(tool, "Policy Reporter UI's frontend is built with it (tests/policyreporter/build-ui)")
    return Path(go_built(BUILD_CORE, "Policy Reporter")), Path(go_built(BUILD_UI, "Policy Reporter UI"))


@pytest.fixture(scope="module")
def chromium() -> str:
    return required_tool("chromium", "the UI is read in headless Chromium (Debian's chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def operator(own_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    install_vpol(own_cluster)
    tmp = tmp_path_factory.mktemp("ui-operator")
    op = OperatorProcess(sa_kubeconfig(own_cluster, tmp / "kubeconfig"), tmp / "operator.log",
                         extra=("--scan-interval", "15")).start()
    yield op
    op.stop()


# ------------------------------------------------------------------------------------------ scenario


@dataclass(frozen=True)
class Scenario:
    token: str
    #: the namespaces the policies apply to (a: most results, b: the namespaced policy's)
    a: str
    b: str
    #: the policies as reports name them -> their annotations
    policies: dict[str, dict[str, str]]


def described(title: str, category: str, severity: str, **more: str) -> dict[str, str]:
    return {"policies.kyverno.io/title": title, "policies.kyverno.io/category": category,
            "policies.kyverno.io/severity": severity, **{f"policies.kyverno.io/{k}": v for k, v in more.items()}}


def validating(name: str, notes: dict[str, str], selector: dict[str, Any], expression: str, message: str,
               rules: dict[str, Any] = CM) -> dict[str, Any]:
    return {"apiVersion": "policies.kyverno.io/v1", "kind": "ValidatingPolicy",
            "metadata": {"name": name, "annotations": notes},
            "spec": {"validationActions": ["Audit"],
                     "matchConstraints": {"resourceRules": [rules], "namespaceSelector": selector},
                     "validations": [{"expression": expression, "message": message}]}}


@pytest.fixture(scope="module")
def scenario(own_cluster: KubeCluster, operator: OperatorProcess) -> Scenario:
    cluster = own_cluster
    token = unique_name("ui")
    label = {"ui-e2e": token}
    selector = {"matchLabels": label}
    a, b = f"{token}-shop", f"{token}-billing"
    for ns in (a, b):
        apply(cluster, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": label}})
    for ns, name, data in ((a, "complete", {"owner": "x", "n": "3"}), (a, "bare", {}),
                           (a, "wrong-number", {"owner": "x", "n": "many"}), (a, "exempt-legacy", {}),
                           (b, "owner-only", {"owner": "x"}), (b, "nothing", {})):
        apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
                        "data": data})
    # the Pod waits for its namespace's default ServiceAccount
    wait_for(f"the default ServiceAccount of {a}", lambda: cluster.kubectl(
        "get", "serviceaccount", "default", "-n", a, check=False).returncode == 0, 60, 0.5)
    apply(cluster, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": a},
                    "spec": {"containers": [{"name": "app", "image": "registry.invalid/shop/web:1.0"}]}})

    owner, unscored, number = f"{token}-require-owner", f"{token}-team-advice", f"{token}-positive-n"
    local, mutate, generate, images = (f"{token}-local-owner", f"{token}-label-reviewed", f"{token}-copy-config",
                                       f"{token}-trusted-images")
    notes = {
        owner: described("Require an owner", "Best Practices", "high"),
        unscored: described("Advise a team key", "Other Checks", "medium", scored="false"),
        number: described("Positive n", "Validation", "low"),
        f"{b}/{local}": described("Owner in billing", "Multi-Tenancy", "critical"),
        mutate: described("Mark as reviewed", "Labels", "info"),
        generate: described("Copy configuration", "Generation", "medium"),
        images: described("Trusted images", "Supply Chain", "high"),
    }
    policies: list[dict[str, Any]] = [
        validating(owner, notes[owner], selector, "has(object.data) && 'owner' in object.data",
                   "the key owner is required"),
        validating(unscored, notes[unscored], selector, "has(object.data) && 'team' in object.data",
                   "a team key is advised"),
        validating(number, notes[number], selector,
                   "!has(object.data) || !('n' in object.data) || int(object.data.n) > 0", "n must be positive"),
        {**validating(local, notes[f"{b}/{local}"], {}, "has(object.data) && 'owner' in object.data",
                      "billing needs an owner"),
         "kind": "NamespacedValidatingPolicy", "metadata": {"name": local, "namespace": b,
                                                            "annotations": notes[f"{b}/{local}"]}},
        {"apiVersion": "policies.kyverno.io/v1", "kind": "MutatingPolicy",
         "metadata": {"name": mutate, "annotations": notes[mutate]},
         "spec": {"evaluation": {"mutateExisting": {"enabled": True}, "background": {"enabled": True}},
                  "matchConstraints": {"resourceRules": [CM], "namespaceSelector": selector,
                                       "objectSelector": {"matchExpressions": [
                                           {"key": "generated-by", "operator": "DoesNotExist"}]}},
                  "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                      "expression": 'Object{metadata: Object.metadata{labels: {"reviewed": "yes"}}}'}}]}},
        {"apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
         "metadata": {"name": generate, "annotations": notes[generate]},
         "spec": {"matchConstraints": {"resourceRules": [CM], "namespaceSelector": {"matchLabels": {
             "kubernetes.io/metadata.name": b}}, "objectSelector": {"matchLabels": {"copy": "yes"}}},
                  "evaluation": {"synchronize": {"enabled": False}, "generateExisting": {"enabled": True}},
                  "generate": [{"expression": 'generator.Apply(object.metadata.namespace, [{"apiVersion": "v1", '
                                              '"kind": "ConfigMap", "metadata": {"name": "copy-of-" + '
                                              'object.metadata.name, "labels": {"generated-by": "vpol"}}, '
                                              '"data": object.data}])'}]}},
        {"apiVersion": "policies.kyverno.io/v1", "kind": "ImageValidatingPolicy",
         "metadata": {"name": images, "annotations": notes[images]},
         "spec": {"validationActions": ["Audit"],
                  "matchConstraints": {"resourceRules": [PODS], "namespaceSelector": selector},
                  "matchImageReferences": [{"glob": "registry.invalid/*"}],
                  "attestors": [{"name": "unused", "cosign": {"key": {"data": KEY},
                                                             "ctlog": {"insecureIgnoreTlog": True}}}],
                  "validations": [{"expression": "images.containers.all(i, i.startsWith('registry.invalid/'))",
                                   "message": "images come from the trusted registry"}]}},
        {"apiVersion": "policies.kyverno.io/v1", "kind": "PolicyException",
         "metadata": {"name": f"{token}-legacy", "namespace": a},
         "spec": {"policyRefs": [{"name": owner, "kind": "ValidatingPolicy"}],
                  "matchConditions": [{"name": "legacy", "expression": "object.metadata.name.startsWith('exempt-')"}]}},
    ]
    for pol in policies:
        apply(cluster, pol)
    # the GeneratingPolicy's existing trigger, labelled after the policy is there
    cluster.kubectl("label", "configmap", "owner-only", "-n", b, "copy=yes")
    for kind, name, ns in (("validatingpolicies", owner, ""), ("validatingpolicies", unscored, ""),
                           ("validatingpolicies", number, ""), ("namespacedvalidatingpolicies", local, b),
                           ("mutatingpolicies", mutate, ""), ("generatingpolicies", generate, ""),
                           ("imagevalidatingpolicies", images, "")):
        cluster.kubectl("wait", "--for=condition=Ready", f"{kind}.policies.kyverno.io/{name}", "--timeout=120s",
                        *(["-n", ns] if ns else []), timeout=150)
    scenario = Scenario(token, a, b, notes)
    wait_for("vpol's reports of every policy to settle", lambda: settled(cluster, scenario), 240, 3)
    return scenario


def results(cluster: KubeCluster, scenario: Scenario) -> list[dict[str, Any]]:
    """Every result of vpol's reports, with the report's namespace and resource."""
    out = []
    for report in vpol_reports(cluster):
        for r in report.get("results") or []:
            if r["policy"] in scenario.policies:
                out.append({**r, "namespace": report["metadata"].get("namespace", ""),
                            "kind": report["scope"]["kind"], "name": report["scope"]["name"],
                            "report": report["metadata"]["name"]})
    return out


def settled(cluster: KubeCluster, scenario: Scenario) -> bool:
    first = results(cluster, scenario)
    if {r["policy"] for r in first} != set(scenario.policies):
        return False
    time.sleep(4)
    return sorted(map(json.dumps, results(cluster, scenario))) == sorted(map(json.dumps, first))


# --------------------------------------------------------------------------------------- Policy Reporter


class PolicyReporterUI:
    """The UI's backend (serving the frontend too), reading one Policy Reporter core."""

    def __init__(self, binary: Path, core: PolicyReporter, cluster: KubeCluster, workdir: Path,
                 sources: list[dict[str, str]] | None = None):
        self.port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "config.yaml"
        # JSON is YAML: the UI reads its configuration file as YAML.
        config.write_text(json.dumps({"clusters": [{"name": "Default", "host": f"http://127.0.0.1:{core.port}"}],
                                      **({"sources": sources} if sources else {})}))
        self.log_path = workdir / "policy-reporter-ui.log"
        self._log = open(self.log_path, "wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PR_")}
        env.update(KUBECONFIG=cluster.kubeconfig, KO_DATA_PATH=str(binary.parent))
        self.proc = subprocess.Popen([str(binary), "run", "--config", str(config), "--port", str(self.port),
                                      "--local"], stdout=self._log, stderr=subprocess.STDOUT, cwd=workdir, env=env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def ready(self) -> bool:
        assert self.proc.poll() is None, self.log()
        try:
            with urllib.request.urlopen(self.url + "healthz", timeout=5):
                return True
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        end(self.proc)
        self._log.close()


@dataclass
class Reporters:
    core: PolicyReporter
    #: the UI as it starts without configuration
    ui: PolicyReporterUI
    #: the UI with vpol's source shown by severity (its `sources[].type: severity`)
    severity_ui: PolicyReporterUI


@pytest.fixture(scope="module")
def reporters(binaries: tuple[Path, Path], own_cluster: KubeCluster, scenario: Scenario,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reporters]:
    core_binary, ui_binary = binaries
    tmp = tmp_path_factory.mktemp("policy-reporter-ui")
    core = PolicyReporter(core_binary, own_cluster, tmp / "core", None)
    uis: list[PolicyReporterUI] = []
    try:
        wait_for("Policy Reporter to be ready", core.ready, 120, 1)
        uis.append(PolicyReporterUI(ui_binary, core, own_cluster, tmp / "ui"))
        uis.append(PolicyReporterUI(ui_binary, core, own_cluster, tmp / "ui-severity",
                                    [{"name": SOURCE, "type": "severity"}]))
        for ui in uis:
            wait_for("Policy Reporter UI to be ready", ui.ready, 60, 0.5)
        yield Reporters(core, *uis)
    finally:
        for ui in uis:
            ui.stop()
        core.stop()


# ------------------------------------------------------------------------------------------- Chromium

#: What a page shows, read in the page: the text of every list item (a resource, a policy) and the counts on its
#: chips by their tooltips ("pass results", "high results"), under the last heading before it (a namespace, a
#: category) and in the card its heading names (a source); every table row's cells, under its heading; the
#: result-count cards by their titles.
READ_PAGE = """(() => {
  const headings = [...document.querySelectorAll('.v-toolbar-title')];
  const heading = (el) => headings.filter(h => h.compareDocumentPosition(el) & Node.DOCUMENT_POSITION_FOLLOWING)
      .map(h => h.innerText.trim()).pop() ?? '';
  const chips = (el) => Object.fromEntries([...el.querySelectorAll('.v-chip[title]')]
      .map(c => [c.getAttribute('title'), c.innerText.trim()]));
  return {
    items: [...document.querySelectorAll('.v-list-item')].map(li => ({
      heading: heading(li),
      card: li.closest('.v-card')?.querySelector('.v-toolbar-title')?.innerText.trim() ?? '',
      title: li.querySelector('.v-list-item-title')?.innerText.trim() ?? '',
      subtitle: li.querySelector('.v-list-item-subtitle')?.innerText.trim() ?? '',
      avatar: li.querySelector('.v-avatar')?.innerText.trim() ?? '',
      chips: chips(li)})),
    rows: [...document.querySelectorAll('tbody tr')].map(tr => ({
      heading: heading(tr), cells: [...tr.children].map(td => td.innerText.trim())})),
    counts: Object.fromEntries([...document.querySelectorAll('.v-card-title')]
      .filter(t => t.innerText.trim().endsWith(' results'))
      .map(t => [t.innerText.trim(), t.closest('.v-card').querySelector('.v-card-text')?.innerText.trim() ?? ''])),
    text: document.body.innerText,
  };
})()"""


@dataclass
class Page:
    name: str
    items: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    counts: dict[str, str]
    text: str
    screenshot: Path


class Browser:
    """Headless Chromium driven over the DevTools protocol (a websocket; websocket-client, which the Kubernetes
    client uses as well): it opens a page, waits until it shows what is asked, can click, reads the page and
    takes a screenshot of all of it."""

    def __init__(self, binary: str, out: Path):
        self.out = out
        self.port = free_port()
        self._log = open(out / "chromium.log", "wb")
        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--no-first-run", f"--user-data-dir={out / '.chromium-profile'}", "--window-size=1440,1000",
             f"--remote-debugging-port={self.port}", "--remote-allow-origins=*", "about:blank"],
            stdout=self._log, stderr=subprocess.STDOUT)
        url = wait_for("Chromium's DevTools endpoint", self._page_socket, 60, 0.5)
        self.ws = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self._id = 0

    def _page_socket(self) -> str | None:
        assert self.proc.poll() is None, (self.out / "chromium.log").read_text(errors="replace")[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=5) as r:
                targets = json.loads(r.read())
        except OSError:
            return None
        return next((str(t["webSocketDebuggerUrl"]) for t in targets if t.get("type") == "page"), None)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                assert "error" not in msg, (method, msg["error"])
                return dict(msg["result"])

    def evaluate(self, expression: str) -> Any:
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in out, out["exceptionDetails"]
        return out["result"].get("value")

    def open(self, url: str, name: str, shows: list[str], click: str = "") -> Page:
        """Opens ``url``, waits until its text has every string of ``shows`` and stays the same for a second,
        clicks every element the CSS selector ``click`` finds (then waits again), and reads it."""
        self.call("Page.navigate", url="about:blank")
        self.call("Page.navigate", url=url)
        self._settle(name, shows)
        if click:
            self.evaluate(f"document.querySelectorAll({json.dumps(click)}).forEach(e => e.click())")
            self._settle(name, shows)
        read = self.evaluate(READ_PAGE)
        shot = self.out / f"{name}.png"
        shot.write_bytes(self.screenshot())
        (self.out / f"{name}.txt").write_text(read["text"])
        return Page(name, read["items"], read["rows"], read["counts"], read["text"], shot)

    def _settle(self, name: str, shows: list[str]) -> None:
        last = {"text": ""}

        def steady() -> bool:
            text = str(self.evaluate("document.body?.innerText ?? ''"))
            same, last["text"] = text == last["text"], text
            return same and all(s in text for s in shows)

        try:
            wait_for(f"the page {name} to show {shows}", steady, 60, 1)
        except BaseException:
            (self.out / f"{name}.txt").write_text(last["text"])
            self.out.joinpath(f"{name}.png").write_bytes(self.screenshot())
            raise

    def screenshot(self) -> bytes:
        """The whole page, as tall as its content."""
        size = self.call("Page.getLayoutMetrics")["cssContentSize"]
        self.call("Emulation.setDeviceMetricsOverride", width=1440, height=max(1000, int(size["height"]) + 1),
                  deviceScaleFactor=1, mobile=False)
        try:
            return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        finally:
            self.call("Emulation.clearDeviceMetricsOverride")

    def stop(self) -> None:
        self.ws.close()
        end(self.proc)
        self._log.close()


@pytest.fixture(scope="module")
def browser(chromium: str, screenshots: Path) -> Iterator[Browser]:
    b = Browser(chromium, screenshots)
    yield b
    b.stop()


# --------------------------------------------------------------------------- what the reports say


def count(values: Any, keys: tuple[str, ...]) -> dict[str, int]:
    c = Counter(values)
    return {k: c.get(k, 0) for k in keys}


def by_resource(found: list[dict[str, Any]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in found:
        out.setdefault((r["namespace"], r["kind"], r["name"]), []).append(r)
    return out


def summaries(cluster: KubeCluster) -> dict[tuple[str, str, str], dict[str, int]]:
    """The summary of each of vpol's reports, by the resource it is about."""
    return {(r["metadata"].get("namespace", ""), r["scope"]["kind"], r["scope"]["name"]):
            {k: int(r["summary"].get(k, 0)) for k in STATUSES} for r in vpol_reports(cluster)}


def chip_counts(item: dict[str, Any], keys: tuple[str, ...]) -> dict[str, int]:
    """A list item's counts by its chips' tooltips; a chip the page leaves out (skip, where nothing is
    skipped) counts 0."""
    return {k: int(item["chips"].get(f"{k} results", 0)) for k in keys}


@pytest.fixture(scope="module")
def reported(own_cluster: KubeCluster, scenario: Scenario, reporters: Reporters,
             screenshots: Path) -> list[dict[str, Any]]:
    """vpol's results, once Policy Reporter core holds every one of them."""
    found = results(own_cluster, scenario)
    (screenshots / "reports.json").write_text(json.dumps(vpol_reports(own_cluster), indent=1))
    wait_for("Policy Reporter to hold every result", lambda: reporters.core.get(
        "/v2/namespace-scoped/results", sources=SOURCE)["count"] == len(found), 90, 2)
    return found


def test_the_scenario_has_every_kind_of_result(reported: list[dict[str, Any]], scenario: Scenario) -> None:
    assert {r["result"] for r in reported} == set(STATUSES)
    assert {r["policy"] for r in reported} == set(scenario.policies)
    assert {r["severity"] for r in reported} == set(SEVERITIES)
    by_policy = {p: {r["result"] for r in reported if r["policy"] == p} for p in scenario.policies}
    assert by_policy[f"{scenario.token}-team-advice"] == {"warn"}  # scored: false
    assert "skip" in by_policy[f"{scenario.token}-require-owner"]  # the PolicyException
    assert "error" in by_policy[f"{scenario.token}-positive-n"]


def test_the_dashboard_shows_each_resources_counts(own_cluster: KubeCluster, scenario: Scenario,
                                                   reported: list[dict[str, Any]], reporters: Reporters,
                                                   browser: Browser) -> None:
    names = sorted({r["name"] for r in reported})
    page = browser.open(reporters.ui.url + "#/", "dashboard", [scenario.a, scenario.b, *names])
    shown = {(i["heading"], i["subtitle"].split(" ")[-1], i["title"]): chip_counts(i, STATUSES)
             for i in page.items if i["subtitle"]}
    # every resource vpol reported on, with its report's summary, and nothing else
    assert shown == summaries(own_cluster)
    # the categories of vpol's policies in the navigation
    categories = {n["policies.kyverno.io/category"] for n in scenario.policies.values()}
    assert categories <= {i["title"] for i in page.items}
    assert "Vpol" in {i["title"] for i in page.items}  # the source, as the UI capitalizes it


def test_a_namespace_page_shows_its_resources(own_cluster: KubeCluster, scenario: Scenario,
                                              reported: list[dict[str, Any]], reporters: Reporters,
                                              browser: Browser) -> None:
    mine = sorted({r["name"] for r in reported if r["namespace"] == scenario.a})
    page = browser.open(reporters.ui.url + f"#/namespace/{scenario.a}", "namespace", [scenario.a, *mine])
    shown = {(i["subtitle"].split(" ")[-1], i["title"]): chip_counts(i, STATUSES) for i in page.items if i["subtitle"]}
    assert shown == {(kind, name): s for (ns, kind, name), s in summaries(own_cluster).items() if ns == scenario.a}


def test_the_policies_page_lists_vpols_policies_by_category(scenario: Scenario, reported: list[dict[str, Any]],
                                                            reporters: Reporters, browser: Browser) -> None:
    page = browser.open(reporters.ui.url + "#/policies", "policies", list(scenario.policies))
    shown = {i["title"]: i for i in page.items if i["title"] in scenario.policies}
    assert set(shown) == set(scenario.policies)
    for policy, notes in scenario.policies.items():
        item = shown[policy]
        # in vpol's source (its name as the UI capitalizes it), under its category, with the first letter of its
        # severity, and its counts
        assert item["card"] == "Vpol", item
        assert item["heading"] == notes["policies.kyverno.io/category"], item
        assert item["avatar"] == notes["policies.kyverno.io/severity"][0].upper(), item
        assert chip_counts(item, STATUSES) == count((r["result"] for r in reported if r["policy"] == policy),
                                                    STATUSES), item


def test_a_policys_page_lists_its_results(scenario: Scenario, reported: list[dict[str, Any]],
                                          reporters: Reporters, browser: Browser) -> None:
    policy = f"{scenario.token}-require-owner"
    mine = [r for r in reported if r["policy"] == policy]
    page = browser.open(reporters.ui.url + f"#/policies/{SOURCE}/{policy}", "policy",
                        sorted({r["name"] for r in mine}))
    # APIVersion, Kind, Name, Rule, Severity, Status (and the expansion toggle), under the namespace's heading
    shown = Counter((row["heading"], *row["cells"][1:6]) for row in page.rows if len(row["cells"]) >= 6)
    assert shown == Counter((r["namespace"], r["kind"], r["name"], r.get("rule", ""), r["severity"], r["result"])
                            for r in mine)


def test_a_resources_page_shows_its_results_with_their_messages(own_cluster: KubeCluster, scenario: Scenario,
                                                                reported: list[dict[str, Any]],
                                                                reporters: Reporters, browser: Browser) -> None:
    # a ConfigMap with pass, warn and fail results
    key = (scenario.a, "ConfigMap", "bare")
    mine = by_resource(reported)[key]
    [resource] = [i for i in reporters.core.get("/v2/namespace-scoped/resource-results", sources=SOURCE,
                                                namespaces=scenario.a)["items"] if i["name"] == "bare"]
    page = browser.open(reporters.ui.url + f"#/resource/{resource['id']}", "resource",
                        [f"{scenario.a}/bare", *(r["policy"] for r in mine)], click="tr.cursor-pointer")
    summary = summaries(own_cluster)[key]
    # the counts at the top (the page shows no skip count)
    assert {k.removesuffix(" results"): int(v) for k, v in page.counts.items()} == \
        {k: n for k, n in summary.items() if k != "skip"}
    # Policy, Rule, Severity, Status, each row followed by its expansion: the message and the properties
    rows = [row["cells"] for row in page.rows]
    shown = {}
    for i, cells in enumerate(rows):
        if len(cells) >= 4 and cells[0] in scenario.policies:
            shown[cells[0]] = (cells[2], cells[3], rows[i + 1][0] if i + 1 < len(rows) else "")
    assert set(shown) == {r["policy"] for r in mine}
    for r in mine:
        severity, status, expansion = shown[r["policy"]]
        assert (severity, status) == (r["severity"], r["result"]), r
        # the message, and each property as a chip "Name: value" (the UI capitalizes the name's first letter)
        words = " ".join(expansion.split())
        assert r["message"] in words, (r, expansion)
        for name, value in r["properties"].items():
            assert f"{name[:1].upper()}{name[1:]}: {value}" in words, (name, value, expansion)


def test_the_severity_view_counts_each_resources_severities(own_cluster: KubeCluster, scenario: Scenario,
                                                            reported: list[dict[str, Any]],
                                                            reporters: Reporters, browser: Browser) -> None:
    names = sorted({r["name"] for r in reported})
    page = browser.open(reporters.severity_ui.url + "#/", "dashboard-severities", [scenario.a, scenario.b, *names])
    shown = {(i["heading"], i["subtitle"].split(" ")[-1], i["title"]): chip_counts(i, SEVERITIES)
             for i in page.items if i["subtitle"]}
    assert shown == {k: count((r["severity"] for r in rs), SEVERITIES) for k, rs in by_resource(reported).items()}
