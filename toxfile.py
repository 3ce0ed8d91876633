"""tox plugin (loaded from the project root): let tox find pyenv-installed Pythons.

pyenv's shims for versions that are installed but not selected answer "command not found", and
tox then skips py312/py313 as missing. We put versioned symlinks (``python3.12`` ...) to every
pyenv CPython 3.x in a private folder at the front of PATH. Only versioned names are linked, so
``python3`` and ``pip`` keep meaning what they meant. Without pyenv this does nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path


def _pyenv_root() -> Path | None:
    root = os.environ.get("PYENV_ROOT")
    if root:
        return Path(root)
    exe = shutil.which("pyenv")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "root"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(out.stdout.strip())


def _link_pyenv_pythons() -> None:
    root = _pyenv_root()
    if root is None or not (root / "versions").is_dir():
        return
    links = Path(__file__).resolve().parent / ".tox" / ".pyenv-pythons"
    links.mkdir(parents=True, exist_ok=True)
    for version in sorted((root / "versions").iterdir()):
        match = re.fullmatch(r"(3\.\d+)\.\d+", version.name)
        exe = version / "bin" / f"python{match.group(1)}" if match else None
        if exe is None or not exe.exists():
            continue
        link = links / exe.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(exe)
    os.environ["PATH"] = f"{links}{os.pathsep}{os.environ.get('PATH', '')}"


_link_pyenv_pythons()
