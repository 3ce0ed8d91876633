"""Every use of pydantic's private machinery, in one place (ADR-0118).

pydantic promises nothing about ``pydantic._internal``; this package relies on it for one
thing: a metaclass ``__call__`` on the models, which runs for ``Model(...)`` only and never
for the instances pydantic-core builds while validating nested data (ADR-0007). That is how
the constructors raise this package's typed errors while the decoder keeps its all-Rust path.

Nothing else in ``src/`` may import ``pydantic._internal`` or touch a ``__pydantic_*__``
attribute (tests/wire/test_pydantic_compat.py pins both); the same test exercises every name
here against the installed pydantic, so an upgrade that moves or changes them fails there,
with this file's name on it, not somewhere deep in a decoder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel

__all__ = ["ModelMetaclass"]

if TYPE_CHECKING:
    # The type checker needs the class itself to accept it as a base class.
    from pydantic._internal._model_construction import ModelMetaclass
else:
    # At run time the metaclass is read from the public BaseModel, so a move of the private
    # module cannot break an import; the test checks both spellings name one class.
    ModelMetaclass = type(BaseModel)
