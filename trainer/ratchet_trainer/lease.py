"""A trainer belongs to one run at a time: the lease.

A trainer holds one run's model in memory, so a second run that loaded into it
would silently replace the first run's weights. The lease says whose trainer it
is. A run claims it through `trainer.announce` (and `trainer.load`); every call
of that run renews it; `trainer.release` gives it back when the run ends. A run
that ended without saying so (terminated, or its worker gone for good) stops
calling: after `ttl_s` without a call, another run may claim the trainer. Sooner:
when another run announces, the worker asks Temporal whether the holder's workflow
still runs, and a holder that does not loses the lease at once (worker.py,
`take_from_ended`).

No Temporal here; the worker consults it on every activity. Not thread-safe on
its own: the worker calls it under its own lock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

# A paused run, or a step whose rollouts take long on the CPU, does not call its
# trainer for a while; half an hour keeps the trainer through that.
DEFAULT_LEASE_TTL_S = 30 * 60.0


@dataclass
class TrainerLease:
    ttl_s: float = DEFAULT_LEASE_TTL_S
    clock: Callable[[], float] = time.monotonic
    holder: str | None = None
    last_used: float = 0.0
    active_calls: int = field(default=0)

    def expired(self) -> bool:
        """A lease whose run has stopped calling (and has no call in flight) for ttl_s."""
        return self.holder is not None and self.active_calls == 0 and self.clock() - self.last_used > self.ttl_s

    def holder_now(self) -> str | None:
        return None if self.holder is None or self.expired() else self.holder

    def claim(self, run_id: str) -> bool:
        """Take (or renew) the lease for run_id; False while another run holds it."""
        held = self.holder_now()
        if held is not None and held != run_id:
            return False
        self.holder = run_id
        self.last_used = self.clock()
        return True

    def begin(self, run_id: str) -> None:
        """A call of the holder starts: the lease cannot expire under it."""
        self.active_calls += 1
        self.last_used = self.clock()

    def end(self, run_id: str) -> None:
        self.active_calls = max(0, self.active_calls - 1)
        self.last_used = self.clock()

    def take_from_ended(self, ended: str, run_id: str) -> bool:
        """The holder `ended` no longer runs: run_id takes the trainer now, even with one of ended's
        calls still in flight (it is being cancelled). False when the holder changed meanwhile."""
        if self.holder != ended:
            return False
        self.holder = run_id
        self.last_used = self.clock()
        return True

    def release(self, run_id: str) -> bool:
        """Give the trainer back; only its holder can. True when it was held by run_id."""
        if self.holder != run_id:
            return False
        self.holder = None
        return True
