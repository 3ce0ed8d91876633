"""The coverage gate runs where `tox` (and so CI) runs, on every gated package (ADR-0119)."""

from __future__ import annotations

import configparser
import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _floors_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "coverage_floors", ROOT / "scripts" / "coverage_floors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tox() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini", encoding="utf-8")
    return parser


def _commands(section: str) -> list[str]:
    raw = _tox()[section]["commands"]
    return [line.strip() for line in raw.splitlines() if line.strip()]


def test_every_measured_package_has_a_floor_of_at_least_95() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    measured = pyproject["tool"]["coverage"]["run"]["source_pkgs"]
    floors = _floors_script().FLOORS
    assert {f"akchat_fsm.{package}" for package in floors} == set(measured)
    assert pyproject["tool"]["coverage"]["run"]["branch"] is True
    assert min(floors.values()) >= 95.0


def test_the_default_tox_run_measures_and_judges_coverage() -> None:
    tox = _tox()
    assert "py311" in [env.strip() for env in tox["tox"]["env_list"].split(",")]
    commands = _commands("testenv:py311")
    run = [c for c in commands if c.startswith("coverage run -m pytest")]
    assert len(run) == 1
    judged = commands.index("python scripts/coverage_floors.py {posargs}")
    assert judged > commands.index(run[0])
    # `tox -e coverage` is the same run, not a second definition of it.
    assert _commands("testenv:coverage") == ["{[testenv:py311]commands}"]


def test_a_package_under_its_floor_or_missing_fails() -> None:
    script = _floors_script()
    at_floor = dict(script.FLOORS)
    assert script.verdicts(at_floor) == []
    under = {**at_floor, "session": 94.9}
    assert script.verdicts(under) == ["session: 94.9% is under its floor of 95.0%"]
    missing = {k: v for k, v in at_floor.items() if k != "wire"}
    assert script.verdicts(missing) == ["wire: not measured (floor 95.0%)"]


def test_a_full_run_under_a_floor_exits_1_and_a_subset_is_only_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _floors_script()
    low = {**script.FLOORS, "core": 50.0}
    monkeypatch.setattr(script, "measure", lambda: low)
    assert script.main([]) == 1
    assert "core: 50.0% is under its floor" in capsys.readouterr().err
    assert script.main(["tests/wire"]) == 0
    assert "floors not checked" in capsys.readouterr().out
