"""No private name crosses a package boundary in ``model/``, ``serve/``, ``bench/`` and ``client/``.

A name is private to its module when it starts with ``_`` (dunders aside) or, where the module defines
``__all__``, when ``__all__`` does not list it; a module is private when its file name (or a package
on its path) starts with ``_``, and then only modules of its own package may import it. A package is a
directory: ``serve/routers/ui.py`` and ``serve/routers/_common.py`` share one, ``serve/services/x.py``
does not. A package's ``__init__`` re-exporting a name through its ``__all__`` makes it public there
(httpx's pattern: ``httpx/_exceptions.py`` is private, ``httpx.HTTPError`` is not).

Everything is read with :mod:`ast`, nothing is imported: ``from X import a`` and ``import X.y``
(relative ones too, and those inside functions), and attribute reads through a name bound to one of
our modules (``metrics._pair_matrix`` after ``from model.core import metrics``, or after ``metrics =
importlib.import_module("model.core.metrics")``). Tests directories are not walked (a test may reach a
private name of the module it tests). Modules of one directory may share underscored names (the rule
is about packages); STYLE.md point 15 prefers private modules sharing plain names (serve/redaction).

``ALLOWED`` holds at most five exceptions, ``(importer, module, name): reason``; an entry that no
longer matches an offence fails, so the list only shrinks.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The top-level directories walked. model/, serve/ and bench/ import under their own names; client/ is on
# sys.path itself (its package imports as `agent_triage_client`, its examples are scripts).
TREES = ("model", "serve", "bench", "client")
MAX_ALLOWED = 5
ALLOWED: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Offence:
    importer: str  # path relative to ROOT
    line: int
    module: str  # dotted module the name is read from
    name: str  # "" when the module itself is the private thing

    def __str__(self) -> str:
        what = f"{self.module}.{self.name}" if self.name else self.module
        return f"{self.importer}:{self.line} imports {what}"


def _walked() -> list[Path]:
    found: list[Path] = []
    for top in TREES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if {"tests", "__pycache__", ".ipynb_checkpoints"} & set(rel.parts):
                continue
            found.append(path)
    return found


def _dotted(path: Path) -> str | None:
    """The dotted name ``path`` imports under, or None for a script outside any importable tree."""
    rel = path.relative_to(ROOT)
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "client":
        if len(parts) < 2 or parts[1] != "agent_triage_client":
            return None
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@cache
def _index() -> dict[str, Path]:
    """Every importable module of ours: dotted name -> file."""
    return {name: path for path in _walked() if (name := _dotted(path)) is not None}


def _package_of(path: Path) -> Path:
    """A module's package is its directory (a package's ``__init__`` belongs to the package itself)."""
    return path.parent


def _resolve(name: str, importer: Path) -> str | None:
    """``name`` as one of our modules, or None; bench's scripts also import each other bare."""
    index = _index()
    if name in index:
        return name
    if _package_of(importer) == ROOT / "bench" and f"bench.{name}" in index:
        return f"bench.{name}"
    return None


def _is_private_name(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@cache
def _exports(module: str) -> frozenset[str] | None:
    """The literal ``__all__`` of ``module`` (with ``+=`` extensions), or None when it has none."""
    tree = ast.parse(_index()[module].read_text(encoding="utf-8"))
    names: set[str] | None = None
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        if not any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        value = node.value
        assert isinstance(value, ast.List | ast.Tuple), f"{module}: __all__ must be a literal list or tuple"
        items = {elt.value for elt in value.elts if isinstance(elt, ast.Constant) and isinstance(elt.value, str)}
        assert len(items) == len(value.elts), f"{module}: __all__ must list string literals only"
        names = items if names is None or not isinstance(node, ast.AugAssign) else names | items
    return None if names is None else frozenset(names)


def _private_module(module: str, importer: Path) -> bool:
    """Whether ``module`` has a private part (``_x``) whose package ``importer`` is not in (a subpackage
    is in it: ``pkg/sub/a.py`` may import ``pkg/_impl.py``, as httpx's ``_transports`` import ``_models``)."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _is_private_name(part):
            owner = _index().get(".".join(parts[:i]))
            if owner is None:
                return True
            owner_dir = _package_of(owner)
            if not _package_of(importer).is_relative_to(owner_dir):
                return True
    return False


def _crosses(importer: Path, module: str) -> bool:
    return _package_of(importer) != _package_of(_index()[module])


def _name_offence(importer: Path, module: str, name: str) -> bool:
    """Reading ``name`` from our ``module`` in ``importer``: a private name across a boundary?"""
    if not _crosses(importer, module):
        return False
    if _is_private_name(name):
        return True
    exports = _exports(module)
    return exports is not None and name not in exports


def _base_package(importer: Path, level: int) -> str:
    """The dotted package a relative import of ``level`` dots starts from."""
    module = _dotted(importer)
    assert module is not None, f"{importer}: a relative import outside a package"
    parts = module.split(".")
    if importer.name != "__init__.py":
        parts = parts[:-1]
    return ".".join(parts[: len(parts) - (level - 1)])


def _import_module_call(node: ast.expr) -> str | None:
    """The literal name in ``importlib.import_module("x.y")`` (or a bare ``import_module``), else None."""
    if not isinstance(node, ast.Call) or len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    name = node.args[0].value
    return name if called == "import_module" and isinstance(name, str) else None


def _offences_in(path: Path, source: str | None = None) -> Iterator[Offence]:
    """The offences of the module at ``path`` (its text read from disk unless ``source`` is given)."""
    rel = str(path.relative_to(ROOT))
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source, filename=rel)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bound: dict[str, str] = {}  # local name -> our module it stands for

    def check_module(module: str, line: int) -> Iterator[Offence]:
        if _private_module(module, path):
            yield Offence(rel, line, module, "")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                module = _resolve(alias.name, path)
                if module is None:
                    continue
                yield from check_module(module, node.lineno)
                if alias.asname:
                    bound[alias.asname] = module
                else:
                    head = alias.name.split(".")[0]
                    if (top := _resolve(head, path)) is not None:
                        bound[head] = top
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _base_package(path, node.level)
                raw = f"{base}.{node.module}" if node.module and base else (node.module or base)
            else:
                raw = node.module or ""
            module = _resolve(raw, path)
            if module is None:
                continue
            yield from check_module(module, node.lineno)
            for alias in node.names:
                if alias.name == "*":
                    continue
                submodule = _resolve(f"{module}.{alias.name}", path)
                if submodule is not None:  # a submodule counts as a module, not a name
                    yield from check_module(submodule, node.lineno)
                    bound[alias.asname or alias.name] = submodule
                elif _name_offence(path, module, alias.name):
                    yield Offence(rel, node.lineno, module, alias.name)

        elif isinstance(node, ast.Assign) and (dynamic := _import_module_call(node.value)) is not None:
            module = _resolve(dynamic, path)
            if module is None:
                continue
            yield from check_module(module, node.lineno)
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound[target.id] = module

    # Attribute reads through a bound module name: `metrics._x`, `model.core.metrics._x`.
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or isinstance(node.value, ast.Attribute):
            continue
        if not isinstance(node.value, ast.Name) or node.value.id not in bound:
            continue
        module = bound[node.value.id]
        chain = [node.attr]
        parent: ast.AST = node
        while isinstance(up := parents.get(id(parent)), ast.Attribute):
            chain.append(up.attr)
            parent = up
        for attr in chain:
            submodule = _resolve(f"{module}.{attr}", path)
            if submodule is not None:
                module = submodule
                continue
            if _name_offence(path, module, attr):
                yield Offence(rel, node.lineno, module, attr)
            break


def offences() -> list[Offence]:
    """Every private import across a package boundary in the walked trees, in file order."""
    found: set[Offence] = set()
    for path in _walked():
        found.update(_offences_in(path))
    return sorted(found, key=lambda o: (o.importer, o.line, o.module, o.name))


def test_the_walk_finds_our_packages() -> None:
    index = _index()
    assert len(index) > 150, "too few modules found: is TREES right?"
    for module in ("model.core.metrics", "serve.routers._common", "agent_triage_client._conversation", "bench.service"):
        assert module in index, module


def test_the_rule_catches_each_shape() -> None:
    """The checker itself can fail: one import of each forbidden shape, and the allowed ones beside."""
    cases = {
        # importer (relative to ROOT), source: expected offences (module, name)
        "serve/services/probe.py": (
            "from serve.routers._common import x\n"  # a private module from another package
            "from model.core.metrics import _bin_index\n"  # a leading underscore
            "from model.core import metrics\n"
            "def f():\n"
            "    from ..routers import ui\n"  # a submodule: public
            "    return metrics._pair_matrix\n"  # an attribute read through a bound module
            "sem = importlib.import_module('model.training.semantic')\n"
            "sem._Z95, sem.load_cases\n"  # through a module imported by name: the first only
        ),
        "serve/routers/probe.py": "from ._common import x\nfrom . import _common\n",  # same package: fine
        "client/agent_triage_client/probe.py": "from agent_triage_client._conversation import X\n",
        "client/examples/probe.py": (
            "from agent_triage_client._conversation import X\n"
            "from agent_triage_client import TriageClient, _version\n"  # re-exported by __all__: public
            "import agent_triage_client._errors as errors\n"
        ),
        "bench/probe.py": (
            "from service import _helper\n"  # bench's scripts import each other bare: one package
            "from model.core.metrics import auroc, sigmoid\n"  # both in the module's __all__
            "from model.core.metrics import np\n"  # imported there, not exported: private
        ),
    }
    expected = {
        "serve/services/probe.py": {("serve.routers._common", ""), ("model.core.metrics", "_bin_index"),
                                    ("model.core.metrics", "_pair_matrix"), ("model.training.semantic", "_Z95")},
        "serve/routers/probe.py": set(),
        "client/agent_triage_client/probe.py": set(),
        "client/examples/probe.py": {("agent_triage_client._conversation", ""), ("agent_triage_client", "_version"),
                                     ("agent_triage_client._errors", "")},
        "bench/probe.py": {("model.core.metrics", "np")},
    }
    for rel, source in cases.items():
        assert not (ROOT / rel).exists(), rel
        got = {(o.module, o.name) for o in _offences_in(ROOT / rel, source)}
        assert got == expected[rel], (rel, got)


def test_a_name_left_out_of_all_is_private() -> None:
    module = next(m for m in sorted(_index()) if m.startswith("model.") and _exports(m) is not None)
    exported = _exports(module)
    assert exported is not None
    outsider = ROOT / "bench" / "probe.py"
    assert _name_offence(outsider, module, "certainly_not_exported_name")
    for name in exported:
        assert not _name_offence(outsider, module, name)


def test_the_allow_list_is_short_and_each_entry_gives_a_reason() -> None:
    assert len(ALLOWED) <= MAX_ALLOWED, f"at most {MAX_ALLOWED} exceptions; got {len(ALLOWED)}"
    for key, reason in ALLOWED.items():
        assert reason.strip() and "\n" not in reason, f"{key}: one line of reason"


def test_no_private_name_crosses_a_package_boundary() -> None:
    found = offences()
    matched = {(o.importer, o.module, o.name) for o in found}
    stale = sorted(set(ALLOWED) - matched)
    assert not stale, f"allow-list entries that no longer match an offence (remove them): {stale}"
    left = [o for o in found if (o.importer, o.module, o.name) not in ALLOWED]
    assert not left, f"{len(left)} private imports across a package boundary:\n" + "\n".join(map(str, left))
