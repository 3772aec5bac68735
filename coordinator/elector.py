"""Consumer-coordinator election through ``/consumers/coordinator`` (docs/design.md).

Every broker runs an elector. It keeps a data watch on ``/consumers/coordinator``: while the
node is absent it stands for election, which is one multi that creates the ephemeral node (value:
this broker's id) and bumps ``/consumers/coordinator_epoch`` conditionally on the version it
read, so a winner always holds a fresh epoch (the controller's pattern, KAFKA-6082). The epoch's
znode version is what every coordinator write checks.

Session states (``handleNewSession``): SUSPENDED pauses the coordinator (it does not
act: ``suspended`` is True until CONNECTED); LOST resigns (the ephemeral node went with the
session) and clears the coordinator's state; the next CONNECTED re-arms and stands again.

Elect and resign never interleave: they run one at a time, in order, through a DeferredLock.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core import metadata_paths as paths
from broker_core.metadata import (
    BadVersion,
    Create,
    MetadataStoreError,
    NodeExists,
    NoNode,
    SessionState,
    SetData,
    TransactionFailed,
)

log = Logger(namespace="sluice.coordinator.elector")


class CoordinatorElector:
    """See the module docstring. ``on_elected(epoch, epoch_version)`` runs (awaited) when this
    broker wins; ``on_resigned()`` when it stops being the coordinator; ``on_suspended(bool)``
    on SUSPENDED / back to CONNECTED."""

    def __init__(self, broker_id: int, store: Any, *,
                 on_elected: Callable[[int, int], Awaitable[None]],
                 on_resigned: Callable[[], Awaitable[None]],
                 on_suspended: Callable[[bool], None] = lambda s: None) -> None:
        self.broker_id = broker_id
        self.store = store
        self.on_elected = on_elected
        self.on_resigned = on_resigned
        self.on_suspended = on_suspended
        self.active = False
        self.suspended = False
        self.epoch = -1
        self.epoch_version = -1
        #: The coordinator as last seen in ZooKeeper (-1: none).
        self.coordinator_id = -1
        self._lock = defer.DeferredLock()
        self._watch: Any = None
        self._started = False

    def start(self) -> None:
        self._started = True
        self.store.add_state_listener(self._on_session_state)
        self._watch = self.store.watch_data(paths.CONSUMERS_COORDINATOR, self._on_node)

    async def stop(self) -> None:
        """Resign, deleting ``/consumers/coordinator`` if it is still ours."""
        self._started = False
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self.store.remove_state_listener(self._on_session_state)
        was_active = self.active
        await self._locked(self._resign)
        if was_active:
            try:
                data, _ = await self.store.get(paths.CONSUMERS_COORDINATOR)
                if paths.CoordinatorRegistration.from_bytes(data).broker_id == self.broker_id:
                    await self.store.delete(paths.CONSUMERS_COORDINATOR)
            except (MetadataStoreError, ValueError):
                pass

    def resign_soon(self) -> None:
        """Step down because a fenced write failed (the epoch moved on). If
        ``/consumers/coordinator`` still names this broker, delete it so that a new election
        runs (whoever bumped the epoch without holding the node left the seat empty)."""
        async def fenced_off() -> None:
            was_active = self.active
            await self._resign()
            if not was_active:
                return
            try:
                data, stat = await self.store.get(paths.CONSUMERS_COORDINATOR)
                if paths.CoordinatorRegistration.from_bytes(data).broker_id == self.broker_id:
                    await self.store.delete(paths.CONSUMERS_COORDINATOR, stat.version)
            except (MetadataStoreError, ValueError):
                pass

        self._spawn(fenced_off)

    # -- events ----------------------------------------------------------------------------------

    def _spawn(self, fn: Callable[[], Awaitable[None]]) -> None:
        d = self._locked(fn)
        d.addErrback(lambda f: log.failure("coordinator election step failed", f))

    def _locked(self, fn: Callable[[], Awaitable[None]]) -> defer.Deferred:
        return self._lock.run(lambda: defer.Deferred.fromCoroutine(fn()))

    def _on_node(self, data: bytes | None, stat: Any) -> None:
        if data is None:
            self.coordinator_id = -1
            if self._started and not self.suspended:
                self._spawn(self._elect)
            return
        try:
            owner = paths.CoordinatorRegistration.from_bytes(data).broker_id
        except ValueError:
            log.error("unreadable /consumers/coordinator value {v!r}", v=data)
            return
        self.coordinator_id = owner
        if owner != self.broker_id and self.active:
            self._spawn(self._resign)

    def _on_session_state(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            if not self.suspended:
                log.warn("ZooKeeper connection suspended: the consumer coordinator pauses")
            self.suspended = True
            self.on_suspended(True)
        elif state is SessionState.LOST:
            log.warn("ZooKeeper session lost: the consumer coordinator resigns")
            self.suspended = False
            self.on_suspended(False)
            self._spawn(self._resign)
        elif state is SessionState.CONNECTED:
            was = self.suspended
            self.suspended = False
            if was:
                self.on_suspended(False)
            if self._started and not self.active:
                self._spawn(self._elect_if_vacant)

    async def _elect_if_vacant(self) -> None:
        try:
            await self.store.get(paths.CONSUMERS_COORDINATOR)
        except NoNode:
            await self._elect()
        except MetadataStoreError:
            pass
        else:
            pass  # held by someone; the data watch tells us when it goes

    # -- election --------------------------------------------------------------------------------

    async def _elect(self) -> None:
        if self.active or not self._started:
            return
        for _ in range(5):
            try:
                data, stat = await self.store.get(paths.CONSUMERS_COORDINATOR_EPOCH)
                epoch, version = int(data.decode() or 0), stat.version
            except NoNode:
                try:
                    await self.store.create(paths.CONSUMERS_COORDINATOR_EPOCH, b"0",
                                            makepath=True)
                except NodeExists:
                    pass
                continue
            reg = paths.CoordinatorRegistration(self.broker_id, int(time.time() * 1000))
            try:
                await self.store.multi([
                    Create(paths.CONSUMERS_COORDINATOR, reg.to_bytes(), ephemeral=True),
                    SetData(paths.CONSUMERS_COORDINATOR_EPOCH, str(epoch + 1).encode(),
                            version),
                ])
            except TransactionFailed as e:
                if isinstance(e.first_error, BadVersion):
                    continue
                return  # NodeExists: another broker won; its node's watch tells us
            except MetadataStoreError as e:
                log.warn("coordinator election failed: {e}", e=e)
                return
            self.epoch, self.epoch_version = epoch + 1, version + 1
            break
        else:
            return
        self.active = True
        self.coordinator_id = self.broker_id
        log.info("broker {b} is now the consumer coordinator (epoch {e})", b=self.broker_id,
                 e=self.epoch)
        try:
            await self.on_elected(self.epoch, self.epoch_version)
        except Exception:
            log.failure("coordinator start-up failed; resigning")
            await self._resign()
            try:
                await self.store.delete(paths.CONSUMERS_COORDINATOR)
            except MetadataStoreError:
                pass

    async def _resign(self) -> None:
        if not self.active:
            return
        log.info("broker {b} resigns as consumer coordinator (epoch {e})", b=self.broker_id,
                 e=self.epoch)
        self.active = False
        await self.on_resigned()
