"""tests/policyreporter/npm_pins.py: package.json pinned to what a bun.lock resolved, for npm."""

from __future__ import annotations

import json
from typing import Any

from tests.policyreporter.npm_pins import path_names, pins, read_bun_lock, rewrite

LOCK = """{
  "lockfileVersion": 1,
  "workspaces": {
    "": {
      "name": "frontend",
      "dependencies": { "nuxt": "^4.5.1", "vue": "^3.5.0", },
      "devDependencies": { "vuetify": "^4.1.5", },
    },
  },
  "packages": {
    "nuxt": ["nuxt@4.5.1", "", { "dependencies": { "@nuxt/kit": "4.5.1" } }, "sha512-a"],
    "nuxt/@nuxt/kit": ["@nuxt/kit@4.5.1", "", {}, "sha512-b"],
    "@nuxt/kit": ["@nuxt/kit@4.5.0", "", {}, "sha512-c"],
    "vue": ["vue@3.5.40", "", {}, "sha512-d"],
    "vuetify": ["vuetify@4.1.6", "", {}, "sha512-e"],
    "yaml": ["yaml@2.9.0", "", {}, "sha512-f"],
    "vite": ["vite@8.1.5", "", {}, "sha512-g"],
    "vite/rolldown": ["rolldown@1.1.5", "", {}, "sha512-h"],
    "vite/rolldown/@emnapi/core": ["@emnapi/core@1.11.1", "", {}, "sha512-i"],
    "rolldown": ["rolldown@1.2.0", "", {}, "sha512-j"],
    "@emnapi/core": ["@emnapi/core@1.11.2", "", {}, "sha512-k"],
    "string-width-cjs": ["string-width@4.2.3", "", {}, "sha512-l"],
  }
}
"""


def test_bun_lock_is_read_with_its_trailing_commas() -> None:
    lock = read_bun_lock(LOCK)
    assert lock["packages"]["vue"][0] == "vue@3.5.40"


def test_keys_name_the_packages_they_nest() -> None:
    assert path_names("vite/rolldown/@emnapi/core") == ["vite", "rolldown", "@emnapi/core"]
    assert path_names("@nuxt/kit") == ["@nuxt/kit"]


def test_direct_dependencies_are_exact_and_every_other_package_is_overridden_where_bun_put_it() -> None:
    direct, overrides, extra = pins(read_bun_lock(LOCK), ["yaml"])
    assert direct == {"nuxt": "4.5.1", "vue": "3.5.40", "vuetify": "4.1.6"}
    assert extra == {"yaml": "2.9.0"}
    assert overrides["@nuxt/kit"] == "4.5.0"
    # nested under a package: its own version under ".", the nested one in its subtree
    assert overrides["nuxt"] == {".": "4.5.1", "@nuxt/kit": "4.5.1"}
    assert overrides["vite"] == {".": "8.1.5", "rolldown": {".": "1.1.5", "@emnapi/core": "1.11.1"}}
    assert (overrides["rolldown"], overrides["@emnapi/core"]) == ("1.2.0", "1.11.2")
    # an alias's spec is exact already; npm cannot override it by its key
    assert "string-width-cjs" not in overrides and "string-width" not in overrides


def test_package_json_is_rewritten_with_the_pins() -> None:
    package: dict[str, Any] = {"name": "frontend", "scripts": {"build": "nuxt build"},
                               "dependencies": {"nuxt": "^4.5.1", "vue": "^3.5.0"},
                               "devDependencies": {"vuetify": "^4.1.5"}}
    direct, overrides, extra = pins(read_bun_lock(LOCK), ["yaml"])
    out = rewrite(package, direct, overrides, extra)
    assert out["dependencies"] == {"nuxt": "4.5.1", "vue": "3.5.40", "yaml": "2.9.0"}
    assert out["devDependencies"] == {"vuetify": "4.1.6"}
    assert out["scripts"] == package["scripts"] and out["overrides"] is overrides
    json.dumps(out)
