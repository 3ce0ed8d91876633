"""Transitional: the old private name of :mod:`.js` (removed once every import is rewritten)."""

from ._fields import NonNegativeInt, StrictStr
from .js import *  # noqa: F403
from .js import __all__ as _public

__all__ = [*_public, "NonNegativeInt", "StrictStr"]
