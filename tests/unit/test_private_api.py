"""No private attribute of openai or aiohttp is used in src/ticketiq outside the one adapter that guards it
(tools/aiohttp_adapter.py, whose test fails the day aiohttp changes what it relies on). Read from the
source with ast, plus one look at the classes as imported:

- imports: no `_` module (`openai._models`), no `_` name, and from a submodule of aiohttp or openai only
  what the package exports at its top (or openai's `types`, its public models);
- attributes: no `x._name` where `_name` is one the libraries define or use and this module does not
  define itself (`self._name = ...`, a method, a class attribute, a slot);
- classes: none built on an aiohttp or openai class defines a `_name` of that class (a private override).

A module that gives one of its own attributes the name of a library's private one (`self._client`) hides a
use of that name on a library object from the second check: the price of reading without types."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import sys
from pathlib import Path
from types import ModuleType

import aiohttp
import openai
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "ticketiq"
LIBRARIES: dict[str, ModuleType] = {"aiohttp": aiohttp, "openai": openai}
ADAPTERS = {"tools/aiohttp_adapter.py"}
PUBLIC_SUBPACKAGES = ("openai.types",)
# A named tuple's API is public though it starts with `_` (urllib's parse results are named tuples).
NAMED_TUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@functools.cache
def library_names() -> frozenset[str]:
    """Every `_name` the libraries define or use, from their source (their generated models left out)."""
    names: set[str] = set()
    for library in LIBRARIES.values():
        root = Path(inspect.getfile(library)).parent
        for path in root.rglob("*.py"):
            if path.relative_to(root).parts[0] in ("types", "resources"):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute):
                    names.add(node.attr)
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.add(node.name)
                elif isinstance(node, ast.Name):
                    names.add(node.id)
    return frozenset(name for name in names if _private(name) and name not in NAMED_TUPLE_API)


def _defined_here(tree: ast.Module) -> set[str]:
    """The `_names` this module gives its own objects."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name):
                        if part.value.id in ("self", "cls"):
                            own.add(part.attr)
                    elif isinstance(part, ast.Name):
                        own.add(part.id)
            if any(isinstance(t, ast.Name) and t.id == "__slots__" for t in targets) and node.value is not None:
                own.update(
                    c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
        elif isinstance(node, ast.alias):
            own.add(node.asname or node.name)
    return own


def _import_uses(node: ast.Import | ast.ImportFrom) -> list[str]:
    found = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            parts = alias.name.split(".")
            if parts[0] in LIBRARIES and any(_private(part) for part in parts):
                found.append(f"import {alias.name}")
        return found
    module = node.module or ""
    parts = module.split(".")
    if node.level or parts[0] not in LIBRARIES:
        return found
    for alias in node.names:
        if any(_private(part) for part in parts) or _private(alias.name):
            found.append(f"from {module} import {alias.name}")
        elif len(parts) > 1 and not module.startswith(PUBLIC_SUBPACKAGES):
            exported = getattr(LIBRARIES[parts[0]], "__all__", ())
            if alias.name not in exported:
                found.append(f"from {module} import {alias.name} (not exported by {parts[0]})")
    return found


def _imported_from(tree: ast.Module) -> dict[str, str]:
    """Each name this module imports, and the top package it comes from."""
    roots: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                roots[alias.asname or alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                roots[alias.asname or alias.name] = node.module.split(".")[0]
    return roots


def _head(base: ast.expr) -> str:
    """The name a base class is reached from: `AsyncConnectionPool[Connection]` and `pool.Pool` by theirs."""
    while isinstance(base, ast.Subscript | ast.Attribute):
        base = base.value
    return base.id if isinstance(base, ast.Name) else ""


def _others_state(tree: ast.Module) -> set[int]:
    """The `self._name` reads inside classes built on another library's class (psycopg_pool's pool): the
    name is that class's, whatever aiohttp or openai call theirs (its own guard test covers it)."""
    roots = _imported_from(tree)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or not node.bases:
            continue
        bases = {roots.get(_head(b)) for b in node.bases}
        if None in bases or bases & set(LIBRARIES):
            continue  # built on one of ours, or on aiohttp or openai: checked as ever
        for part in ast.walk(node):
            if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                skipped.add(id(part))
    return skipped


def private_uses(source: str) -> list[str]:
    """Where this module's source uses a private name of aiohttp or openai, each as `line: what`."""
    tree = ast.parse(source)
    own = _defined_here(tree)
    theirs = library_names()
    others = _others_state(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in others:
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found += [f"{node.lineno}: {use}" for use in _import_uses(node)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in theirs and node.attr not in own:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def private_overrides(module: ModuleType) -> list[str]:
    """The `_names` this module's classes define over those of an aiohttp or openai class they are built on."""
    found = []
    for name, cls in vars(module).items():
        if not inspect.isclass(cls) or cls.__module__ != module.__name__:
            continue
        bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in LIBRARIES]
        for attr in vars(cls):
            if _private(attr) and any(attr in vars(base) for base in bases):
                found.append(f"{name}.{attr} overrides {next(b for b in bases if attr in vars(b)).__qualname__}'s")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).as_posix() not in ADAPTERS)


def test_src_uses_no_private_name_of_aiohttp_or_openai_outside_the_adapter() -> None:
    found = {}
    for path in _modules():
        uses = private_uses(path.read_text(encoding="utf-8"))
        dotted = ".".join(("ticketiq", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        if "aiohttp" in path.read_text(encoding="utf-8") or "openai" in path.read_text(encoding="utf-8"):
            uses += private_overrides(importlib.import_module(dotted))
        if uses:
            found[dotted] = uses
    assert found == {}


def test_the_adapter_is_where_the_private_names_are() -> None:
    """The scan sees the adapter's own uses: it is exempt by name, not because nothing is found in it."""
    uses = private_uses((PACKAGE / "tools" / "aiohttp_adapter.py").read_text(encoding="utf-8"))
    assert any("._acquired_per_host" in use for use in uses), uses
    assert any("from aiohttp.connector import Connection" in use for use in uses), uses


# Each private use this house once had (model/client.py and tools/vendor_pool.py before issue 35), as written.
ONCE = [
    ("from openai._models import FinalRequestOptions\n", "from openai._models import FinalRequestOptions"),
    ("from aiohttp.connector import Connection\n", "from aiohttp.connector import Connection (not exported"),
    ("from aiohttp.tracing import Trace\n", "from aiohttp.tracing import Trace (not exported"),
    (
        "import openai\nclass M:\n    def __init__(self):\n        self._openai = openai.AsyncOpenAI()\n"
        "        self._headers = self._openai._build_headers(None)\n        self._http = self._openai._client\n",
        "._build_headers",
    ),
    ("import openai\nclient = openai.AsyncOpenAI()\ntemplate = client._build_request(None)\n", "._build_request"),
    ("import aiohttp\nsession = aiohttp.ClientSession()\nsession._retry_connection = False\n", "._retry_connection"),
    (
        "import aiohttp\nclass C(aiohttp.TCPConnector):\n    def counts(self):\n"
        "        return len(self._conns), len(self._acquired_per_host)\n",
        "._acquired_per_host",
    ),
    (
        "import aiohttp\nclass C(aiohttp.TCPConnector):\n    async def wait(self, key, traces):\n"
        "        self._release_waiter()\n",
        "._release_waiter",
    ),
]


@pytest.mark.parametrize(("source", "named"), ONCE)
def test_each_private_use_this_house_once_had_is_found(source: str, named: str) -> None:
    assert any(named in use for use in private_uses(source)), private_uses(source)


def test_another_librarys_class_reads_its_own_state_and_only_that() -> None:
    pool = (
        "from psycopg_pool import AsyncConnectionPool\nclass P(AsyncConnectionPool):\n"
        "    def busy(self, conn):\n        return self._lock.locked(), conn._lock\n"
    )
    # The pool's own lock passes; another object's does not.
    assert private_uses(pool) == ["4: ._lock"]
    generic = pool.replace("(AsyncConnectionPool)", "(AsyncConnectionPool[int])")
    assert private_uses(generic) == ["4: ._lock"]
    connector = pool.replace("from psycopg_pool import AsyncConnectionPool", "from aiohttp import TCPConnector")
    assert private_uses(connector.replace("(AsyncConnectionPool)", "(TCPConnector)")) == ["4: ._lock", "4: ._lock"]


def test_a_private_override_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "overriding.py").write_text(
        "import aiohttp\n\n\nclass Pool(aiohttp.TCPConnector):\n"
        "    async def _wait_for_available_connection(self, key, traces):\n        pass\n\n"
        "    async def _create_connection(self, req, traces, timeout):\n        pass\n\n"
        "    def _own(self):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        found = private_overrides(importlib.import_module("overriding"))
    finally:
        sys.modules.pop("overriding", None)
    assert found == [
        "Pool._wait_for_available_connection overrides BaseConnector's",
        "Pool._create_connection overrides TCPConnector's",
    ]
