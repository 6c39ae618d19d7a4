"""The store's shape (issue 28): one class for any number of partitions, every method written
once. A partitioned namespace once had a second store class re-declaring most methods by hand
(scheduler/store/partitioned.py) with `type: ignore`s to make them fit; these checks fail if a
method is written twice again, or the store needs a `type: ignore`."""

from __future__ import annotations

import ast
import inspect
from collections import Counter
from pathlib import Path

import scheduler.store
from scheduler.store.base import StoreBase
from scheduler.store.redis import RedisStore
from scheduler.worker.partitioned import PartitionedWorker

STORE = Path(scheduler.store.__file__).parent


def store_classes() -> list[type]:
    """RedisStore and every class it is made of (its mixins), but `object`."""
    return [c for c in RedisStore.__mro__ if c is not object]


def test_every_store_class_lives_in_the_store_package_and_builds_on_store_base() -> None:
    classes = store_classes()
    assert len(classes) >= 2 and StoreBase in classes
    for c in classes:
        assert c.__module__.startswith("scheduler.store."), c
        assert issubclass(c, StoreBase), c


def test_no_store_method_is_defined_in_two_store_classes() -> None:
    defined = Counter(name for c in store_classes() for name in vars(c) if callable(vars(c)[name]))
    twice = sorted(name for name, n in defined.items() if n > 1)
    assert twice == [], f"defined in more than one store class: {twice}"


def test_no_other_class_of_the_store_package_defines_the_store_methods() -> None:
    """No second store (a class outside RedisStore's MRO re-declaring its methods by hand); the
    connections' own aclose and _call, and Protocols describing other objects, aside."""
    ours = {name for c in store_classes() for name in vars(c) if not name.startswith("__")}
    ours -= {"aclose", "_call"}
    mro = {c.__name__ for c in store_classes()}
    again: dict[str, list[str]] = {}
    for path in sorted(STORE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or node.name in mro:
                continue
            if any(isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases):
                continue
            methods = {
                n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            if methods & ours:
                again[f"{path.name}:{node.name}"] = sorted(methods & ours)
    assert again == {}, f"store methods defined again outside the store: {again}"
    assert not (STORE / "partitioned.py").exists()


def test_the_store_modules_have_no_type_ignore() -> None:
    modules = {inspect.getsourcefile(c) for c in store_classes()}
    assert len(modules) >= 2
    for path in sorted(str(m) for m in modules):
        lines = Path(path).read_text().splitlines()
        ignored = [i + 1 for i, line in enumerate(lines) if "type: ignore" in line]
        assert ignored == [], f"{path}: type: ignore on lines {ignored}"


def test_the_partitioned_worker_forwards_nothing_implicitly() -> None:
    """Every attribute of it is declared (no __getattr__ handing any name to its first loop)."""
    assert "__getattr__" not in vars(PartitionedWorker)
    assert "__getattribute__" not in vars(PartitionedWorker)
