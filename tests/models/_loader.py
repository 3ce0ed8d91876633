"""Import the scripts of ``models/`` (not a package) by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

MODELS = Path(__file__).resolve().parents[2] / "models"


def load(name: str) -> ModuleType:
    """Load ``models/<name>.py`` once, registered as ``akchat_models_<name>``."""
    module_name = f"akchat_models_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, MODELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up while executing
    spec.loader.exec_module(module)
    return module
