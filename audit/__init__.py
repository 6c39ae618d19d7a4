"""The Postgres audit trail: SQL migrations, the outbox -> Postgres relay, and
the read API. Names resolve on first use, so the migrations, the fold and the
Spark child (`audit.analytics`) import without the relay's Redis client."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit.options import RelayOptions
    from audit.reader import AuditTrail
    from audit.records import AttemptRecord, AuditRecord
    from audit.relay.consumer import AuditRelay

_EXPORTS = {
    "AuditTrail": "audit.reader",
    "AuditRelay": "audit.relay.consumer",
    "RelayOptions": "audit.options",
    "AuditRecord": "audit.records",
    "AttemptRecord": "audit.records",
}

__all__ = ["AttemptRecord", "AuditRecord", "AuditRelay", "AuditTrail", "RelayOptions"]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'audit' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
