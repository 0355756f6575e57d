"""Baton: distributed locks over HTTP, for Python (standard library only).

    from baton import Client, LockHeld

    c = Client()                      # BATON_URL, BATON_API_KEY
    with c.lock("reports", ttl=30.0, wait=10.0) as lease:
        write_report(fence=lease.fence)

See the README next to this package for the whole surface.
"""

import logging

from ._client import Client
from ._errors import (
    AccessDenied,
    BatonError,
    Forbidden,
    IdempotencyError,
    IdempotencyKeyMismatch,
    IdempotencyKeyUsed,
    InvalidRequest,
    LeaseLost,
    LimitMismatch,
    LockHeld,
    Overloaded,
    SessionLost,
    TicketGone,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from ._lease import Lease
from ._session import Session

__version__ = "0.1.0"

# A library leaves logging to the program; without this, a lost hold's warning
# would reach stderr through logging's last resort.
logging.getLogger("baton").addHandler(logging.NullHandler())

__all__ = [
    "Client",
    "Lease",
    "Session",
    "BatonError",
    "LockHeld",
    "LeaseLost",
    "SessionLost",
    "TicketGone",
    "AccessDenied",
    "Unauthorized",
    "Forbidden",
    "LimitMismatch",
    "IdempotencyError",
    "IdempotencyKeyUsed",
    "IdempotencyKeyMismatch",
    "InvalidRequest",
    "TooManyRequests",
    "Unavailable",
    "Overloaded",
]
