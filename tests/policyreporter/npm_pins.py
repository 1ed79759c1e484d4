"""Make npm install what a Bun lockfile (bun.lock) pins, for tests/policyreporter/build-ui.

npm does not read bun.lock: left alone it resolves Policy Reporter UI's ranges to whatever is newest, and the
newest Nuxt, Vite and Vuetify do not build the UI the way its own builds do. This rewrites package.json in place:

- every direct dependency at the exact version bun.lock resolved it to;
- npm "overrides" for every package bun.lock holds: the version at the top of node_modules everywhere, and
  the versions Bun nested under a package (for dependents that need another) in that package's subtree;
- the packages the UI's code imports without declaring them, at the version Bun hoisted to the top
  (``--hoisted NAME``; Bun makes them importable, npm does not).

    python3 npm_pins.py FRONTEND_DIR [--hoisted NAME ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any


def read_bun_lock(text: str) -> dict[str, Any]:
    """bun.lock is JSON with trailing commas (no comments, no commas inside the strings it holds before } or ])."""
    return dict(json.loads(re.sub(r",(\s*[}\]])", r"\1", text)))


def split_ident(ident: str) -> tuple[str, str]:
    """'@scope/name@1.2.3' -> ('@scope/name', '1.2.3')."""
    name, _, version = ident.rpartition("@")
    if not name:
        raise ValueError(f"not name@version: {ident!r}")
    return name, version


def path_names(key: str) -> list[str]:
    """A bun.lock key, 'vite/rolldown/@rolldown/binding-wasm32-wasi', as the packages it nests: each holds the
    next in its own node_modules."""
    parts = key.split("/")
    names = []
    while parts:
        take = 2 if parts[0].startswith("@") else 1
        names.append("/".join(parts[:take]))
        parts = parts[take:]
    return names


def pins(lock: dict[str, Any], hoisted: list[str]) -> tuple[dict[str, str], dict[str, Any], dict[str, str]]:
    """(direct dependencies, overrides, undeclared imports): versions by name, overrides as npm nests them."""
    top: dict[str, str] = {}
    nested: list[tuple[list[str], str]] = []
    for key, entry in lock["packages"].items():
        name, version = split_ident(entry[0])
        if version.startswith(("workspace:", "file:", "link:", "github:", "git+")) or "://" in version:
            continue
        names = path_names(key)
        if names[-1] != name:  # an alias ("string-width-cjs": "npm:string-width@4.2.3"): its spec is exact
            continue
        if len(names) == 1:
            top[name] = version
        else:
            nested.append((names, version))
    workspace = lock["workspaces"][""]
    declared = {**workspace.get("dependencies", {}), **workspace.get("devDependencies", {})}
    direct = {name: top[name] for name in declared}
    extra = {}
    for name in hoisted:
        if name in declared:
            raise ValueError(f"{name} is declared already")
        extra[name] = top[name]
    # A package at the top is pinned wherever npm puts it; one Bun nested under another package is pinned in that
    # package's subtree (npm's nested overrides, "." being the package's own version). A direct dependency's own
    # override must equal its spec, which it does: both are the exact version.
    overrides: dict[str, Any] = {name: version for name, version in sorted(top.items())}
    for names, version in sorted(nested):
        node = overrides
        for parent in names[:-1]:
            here = node.get(parent)
            if not isinstance(here, dict):
                here = {".": here} if here is not None else {}
                node[parent] = here
            node = here
        leaf = node.get(names[-1])
        if isinstance(leaf, dict):
            leaf["."] = version
        else:
            node[names[-1]] = version
    return direct, overrides, extra


def rewrite(package: dict[str, Any], direct: dict[str, str], overrides: dict[str, str],
            extra: dict[str, str]) -> dict[str, Any]:
    out = dict(package)
    for field in ("dependencies", "devDependencies"):
        out[field] = {name: direct[name] for name in package.get(field, {})}
    out["dependencies"] = {**out["dependencies"], **extra}
    out["overrides"] = overrides
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("frontend", type=Path)
    parser.add_argument("--hoisted", action="append", default=[])
    args = parser.parse_args(argv)
    lock = read_bun_lock((args.frontend / "bun.lock").read_text())
    direct, overrides, extra = pins(lock, args.hoisted)
    path = args.frontend / "package.json"
    path.write_text(json.dumps(rewrite(json.loads(path.read_text()), direct, overrides, extra), indent=2) + "\n")
    print(f"pinned {len(direct)} direct dependencies, {len(extra)} undeclared imports and "
          f"{len(overrides)} packages in all from bun.lock", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
