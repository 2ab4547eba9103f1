"""The package's layers: a module imports only from its own layer or lower ones (no import of a higher
layer, not even a lazy one inside a function), and every declared entry point runs."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import unie

PKG = Path(unie.__file__).parent
REPO = PKG.parent
# lowest first; a module may import its own layer and the layers before it
LAYERS = {"core": 0, "data": 1, "models": 1, "methods": 2, "energy": 3, "dllm": 4, "eval": 5, "report": 6,
          "pipeline": 7, "cli": 8, "lmeval": 8}


def layer_of(module: str) -> str | None:
    """``unie.methods.mdlm`` -> ``methods``; ``unie`` itself (the registration hub) -> None."""
    parts = module.split(".")
    if parts[0] != "unie" or len(parts) < 2:
        return None
    return parts[1]


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every ``unie.*`` module imported anywhere in ``path`` (top level or inside functions), absolute."""
    rel = path.relative_to(REPO).with_suffix("")
    package = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
            out += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in out if m == "unie" or m.startswith("unie.")]


def test_every_module_belongs_to_a_layer():
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if rel.name == "__init__.py" and len(rel.parts) == 1:
            continue
        top = rel.parts[0].removesuffix(".py")
        assert top in LAYERS, f"{rel}: not in a known layer {sorted(LAYERS)}"


def test_no_module_imports_a_higher_layer():
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if len(rel.parts) == 1 and rel.name == "__init__.py":
            continue  # the package hub imports everything to fill the registries
        own = LAYERS[rel.parts[0].removesuffix(".py")]
        for line, mod in imports_of(path):
            target = layer_of(mod)
            if target is None:
                if own < LAYERS["pipeline"]:  # `import unie` runs every registration: only the top may do it
                    bad.append(f"{rel}:{line} imports the whole package")
                continue
            if LAYERS[target] > own:
                bad.append(f"{rel}:{line} ({rel.parts[0]}) imports {mod} ({target})")
    assert not bad, "\n".join(bad)


def test_layer_check_catches_a_violation(tmp_path, monkeypatch):
    """The checker itself: a methods module importing the pipeline is reported."""
    fake = PKG / "methods" / "_layer_probe.py"
    fake.write_text("from ..pipeline.sample import run_sampler\n")
    try:
        with pytest.raises(AssertionError, match="_layer_probe.py:1"):
            test_no_module_imports_a_higher_layer()
    finally:
        fake.unlink()


def test_declared_entry_points_run():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("scripts", {})
    assert scripts, "pyproject declares no console script"
    for name, target in scripts.items():
        module, func = target.split(":")
        code = f"import sys; sys.argv = ['{name}', '--help']; from {module} import {func}; {func}()"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode == 0 and "usage" in r.stdout.lower(), (name, r.stdout, r.stderr)
