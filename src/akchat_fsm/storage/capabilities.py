"""Whether a storage has an optional capability: the one check every layer decides by.

A capability (records, the processing, pending and audit indexes, the save that creates
records; port.py) is present when
every method of its protocol can be looked up on the storage and called. This is deliberately not
``isinstance(storage, RecordStorage)``: from Python 3.12 a runtime-checkable protocol looks
attributes up statically (``inspect.getattr_static``), so a wrapper that forwards to its
storage through ``__getattr__`` has the capability on 3.11 and lacks it on 3.12+. A session
over such a wrapper would silently write no audit entries and no propose intents there. An
ordinary attribute lookup answers the same on every version and sees what a call will reach;
it also refuses a name bound to something that is not callable, which ``isinstance`` accepts.
Either flavour passes: the sync and asyncio protocols name the same methods.
"""

from __future__ import annotations

from ..errors import ConfigError
from .port import AuditIndex, PendingIndex, ProcessingIndex, RecordStorage, SaveWithRecords

__all__ = [
    "AUDIT_METHODS",
    "PENDING_METHODS",
    "PROCESSING_METHODS",
    "RECORD_METHODS",
    "SAVE_WITH_RECORDS_METHODS",
    "MissingCapability",
    "has_audit_index",
    "has_pending_index",
    "has_processing_index",
    "keeps_records",
    "provides",
    "saves_with_records",
]


def _methods(protocol: type) -> tuple[str, ...]:
    """The public methods a port protocol declares (its own body, in declaration order)."""
    declared = vars(protocol).items()
    return tuple(name for name, value in declared if not name.startswith("_") and callable(value))


#: The methods of each capability, read from the port protocols so they are written once.
RECORD_METHODS = _methods(RecordStorage)
PROCESSING_METHODS = _methods(ProcessingIndex)
PENDING_METHODS = _methods(PendingIndex)
AUDIT_METHODS = _methods(AuditIndex)
SAVE_WITH_RECORDS_METHODS = _methods(SaveWithRecords)


def provides(storage: object, methods: tuple[str, ...]) -> bool:
    """Whether every one of ``methods`` is an attribute of ``storage`` that can be called."""
    return all(callable(getattr(storage, name, None)) for name in methods)


def keeps_records(storage: object) -> bool:
    """Whether ``storage`` has the records capability (``RecordStorage``, either flavour)."""
    return provides(storage, RECORD_METHODS)


def has_processing_index(storage: object) -> bool:
    """Whether ``storage`` has the processing index (``ProcessingIndex``, either flavour)."""
    return provides(storage, PROCESSING_METHODS)


def has_pending_index(storage: object) -> bool:
    """Whether ``storage`` has the pending index (``PendingIndex``, either flavour)."""
    return provides(storage, PENDING_METHODS)


def has_audit_index(storage: object) -> bool:
    """Whether ``storage`` has the audit index (``AuditIndex``, either flavour)."""
    return provides(storage, AUDIT_METHODS)


def saves_with_records(storage: object) -> bool:
    """Whether ``storage`` saves an envelope and creates records in one atomic write
    (``SaveWithRecords``, either flavour, ADR-0141) and keeps records at all."""
    return keeps_records(storage) and provides(storage, SAVE_WITH_RECORDS_METHODS)


class MissingCapability(ConfigError):
    """A call needs a storage capability the adapter does not provide (a third-party adapter).

    ``capability`` names it (``"AuditIndex"``, ...); ``methods`` are what the adapter lacks.
    """

    def __init__(self, capability: str, methods: tuple[str, ...], what: str, storage: object):
        self.capability = capability
        self.methods = methods
        super().__init__(
            f"{what} needs the {capability} capability, which {type(storage).__name__} does not "
            f"provide (no {', '.join(methods)}).",
            hint="Use a shipped adapter, or implement the capability (docs/adapters.md).",
        )
