"""The package reads top-down: no module imports from a layer above its own.

sim -> envs -> tasks -> rl -> multitask, export -> evaluation, viewer -> commands; config,
configs and robots sit under everything. A layer may import its own modules and any layer below.
Every import counts, also those inside functions and under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import locomotion

LAYERS = {
    "locomotion": 0, "locomotion.config": 0, "locomotion.configs": 0, "locomotion.robots": 0,
    "locomotion.sim": 1,
    "locomotion.envs": 2,
    "locomotion.tasks": 3,
    "locomotion.rl": 4,
    "locomotion.multitask": 5, "locomotion.export": 5,
    "locomotion.evaluation": 6, "locomotion.viewer": 6,
    "locomotion.commands": 7,
}


def layer_of(module: str) -> tuple[str, int]:
    """The layer (name, rank) a ``locomotion...`` module belongs to: its longest prefix."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LAYERS:
            return name, LAYERS[name]
    raise AssertionError(f"{module} belongs to no layer; add its package to LAYERS")


def package_modules() -> dict[str, Path]:
    """Every module of the installed package, found through the import system (so the
    mapped robots/, tasks/ and configs/ folders count), by dotted name."""
    modules = {}
    for package in [p for p in LAYERS if p != "locomotion.config"]:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        for folder in spec.submodule_search_locations:
            for path in Path(folder).glob("*.py"):
                name = package if path.stem == "__init__" else f"{package}.{path.stem}"
                modules[name] = path
    modules["locomotion.config"] = Path(locomotion.__file__).parent / "config.py"
    return modules


def imported(path: Path) -> set[str]:
    """The ``locomotion`` modules ``path`` imports (the package uses absolute imports only;
    ``from locomotion import tasks`` counts as importing ``locomotion.tasks``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import of {node.module}"
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names
                    if f"{node.module}.{a.name}" in MODULES}
    return {m for m in out if m == "locomotion" or m.startswith("locomotion.")}


MODULES = package_modules()


def test_every_package_of_the_wheel_has_a_layer():
    assert len(MODULES) > 40
    assert "locomotion.tasks.velocity" in MODULES and "locomotion.sim.backend" in MODULES


def test_no_module_imports_from_a_layer_above():
    upward = []
    for module, path in sorted(MODULES.items()):
        own, rank = layer_of(module)
        for target in sorted(imported(path)):
            their, their_rank = layer_of(target)
            sibling = their_rank == rank and their != own and rank > 0  # e.g. export, multitask
            if their_rank > rank or sibling:
                upward.append(f"{module} imports {target} ({own} -> {their})")
    assert not upward, "\n".join(upward)


def test_the_check_catches_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from locomotion.rl.runner import Runner\n")
    assert "locomotion.rl.runner" in imported(bad)
    assert layer_of("locomotion.rl.runner")[1] > layer_of("locomotion.envs.bad")[1]
