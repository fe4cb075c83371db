"""Every module of the package imports, in the quick lane: a name a change moved is found here,
not when the one command or benchmark that uses it next runs (the wheel's own check,
tests/test_package.py, builds and installs it first)."""

from __future__ import annotations

import importlib
import pkgutil

import keystone


def test_every_module_imports() -> None:
    names = [m.name for m in pkgutil.walk_packages(keystone.__path__, "keystone.")]
    assert len(names) > 150, "the walk found the package"
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # each one named, not the first alone
            failed[name] = f"{type(e).__name__}: {e}"
    assert failed == {}
