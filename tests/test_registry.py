"""One registry for every plugin kind: discovery by package (a plugin is one file), duplicates refused, names
listed; each kind's names each work, looped over rather than counted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from rltrace.collectors.importers import IMPORTERS
from rltrace.collectors.sources import COLLECTORS
from rltrace.replay.schedulers import create
from rltrace.replay.schedulers.base import SCHEDULERS
from rltrace.replay.topologies.base import TOPOLOGIES, user_keys

from rltrace.errors import ConfigError
from rltrace.registry import Registry

KINDS = {"scheduler": SCHEDULERS, "topology": TOPOLOGIES, "import kind": IMPORTERS, "collector": COLLECTORS}


def _package(root: Path, name: str, plugins: dict[str, str]) -> None:
    """A package ``name`` under ``root`` whose ``base`` module creates a registry, with one file per plugin."""
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text("from rltrace.registry import Registry\nTHINGS = Registry('thing')\n")
    for module, plugin in plugins.items():
        (pkg / f"{module}.py").write_text(f"from {name}.base import THINGS\n\n@THINGS.register({plugin!r})\n"
                                          f"class Plugin:\n    pass\n")


def _run(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], check=False, cwd=root, capture_output=True, text=True,
                          timeout=60)


def test_a_new_plugin_is_one_file_found_by_discovery(tmp_path: Path) -> None:
    _package(tmp_path, "plugs", {"alpha": "a", "beta": "b", "_private": "hidden"})
    done = _run(tmp_path, "from plugs.base import THINGS; print(THINGS.package, THINGS.names(), THINGS.shipped())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["plugs", "['a',", "'b']", "['a',", "'b']"]  # _private is not a plugin module


def test_a_duplicate_name_across_files_is_an_error_naming_both(tmp_path: Path) -> None:
    _package(tmp_path, "dupes", {"one": "same", "two": "same"})
    done = _run(tmp_path, "from dupes.base import THINGS; THINGS.names()")
    assert done.returncode != 0
    assert "thing name 'same' is registered twice" in done.stderr


def test_a_plugin_registered_outside_the_package_is_listed_but_not_shipped() -> None:
    things: Registry[object] = Registry("widget", package="rltrace.replay.topologies")
    insider = type("Insider", (), {"__module__": "rltrace.replay.topologies.widgets"})  # as if defined there
    things.add("insider", insider)
    things.add("outsider", object())
    assert things.names() == ["insider", "outsider"] and things.shipped() == ["insider"]
    with pytest.raises(ValueError, match="widget name 'outsider' is registered twice"):
        things.add("outsider", object())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_discovers_its_package_and_refuses_unknown_names(kind: str) -> None:
    registry = KINDS[kind]
    assert registry.kind == kind and registry.shipped()
    assert set(registry.shipped()) <= set(registry.names())
    with pytest.raises(ConfigError, match=f"unknown {kind} 'no-such-thing' \\(known: "):
        registry.lookup("no-such-thing")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_taking_a_shipped_name_from_outside_is_an_error(kind: str) -> None:
    registry = KINDS[kind]
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(registry.shipped()[0], lambda: None)


def test_every_scheduler_builds_with_its_default_config() -> None:
    for name in SCHEDULERS.shipped():
        scheduler, config = create(name)
        assert type(config) is SCHEDULERS.lookup(name).Config and scheduler is not None


def test_every_topology_builds_from_its_defaults_and_lists_its_keys() -> None:
    for name in TOPOLOGIES.shipped():
        cls = TOPOLOGIES.lookup(name)
        assert "gpu" in user_keys(cls), name
        assert len(cls().links()) > 0, name


def test_every_importer_and_collector_is_callable() -> None:
    for registry in (IMPORTERS, COLLECTORS):
        for name in registry.shipped():
            assert callable(registry.lookup(name)), name


def test_an_outside_plugin_taking_a_shipped_name_first_fails_at_once(tmp_path: Path) -> None:
    """In a fresh process, before anything asked the registry for names, a plugin from outside the package that
    takes a shipped name fails where it registers (the registry discovers its package first), not later."""
    code = ("from rltrace.replay.schedulers.base import SCHEDULERS, register\n"
            "assert not SCHEDULERS.loaded()\n"
            "try:\n"
            "    @register('disagg-sync')\n"
            "    class Mine:\n"
            "        pass\n"
            "except ValueError as e:\n"
            "    print('refused:', e)\n")
    done = _run(tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: scheduler name 'disagg-sync' is registered twice (DisaggSync"), done.stdout


def test_a_plugin_that_cannot_be_imported_is_named_and_never_leaves_a_partial_list(tmp_path: Path) -> None:
    _package(tmp_path, "broken", {"alpha": "a", "beta": "b", "gamma": "c"})
    beta = tmp_path / "broken" / "beta.py"
    beta.write_text("import no_such_module_here\n" + beta.read_text())
    code = ("from broken.base import THINGS\n"
            "for _ in range(2):\n"
            "    try:\n"
            "        print(THINGS.names())\n"
            "    except Exception as e:\n"
            "        print(type(e).__name__, e)\n")
    done = _run(tmp_path, code)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # both calls fail the same way (the second does not answer from the modules that did import), naming beta
    assert len(lines) == 2 and lines[0] == lines[1], lines
    assert lines[0].startswith("ConfigError thing plugins that cannot be imported: broken.beta (ModuleNotFoundError")
