"""The start procedure on a reactor: :class:`BootstrapRunner` drives a
:class:`~broker_core.raft.bootstrap.BootstrapMachine`, and :func:`persisted_view` is its step 1
input.

The runner only carries out what the machine decides:

- **time**: one ``DelayedCall`` at the machine's ``next_deadline()`` (re-armed after every
  input, cancelled when there is none), which feeds ``tick`` with the clock in milliseconds;
- **AskServers**: one DiscoverBrokers per server through ``ask`` (in a node,
  :meth:`~broker_core.raft.gossip.GossipClient.ask`) telling the machine's gossip; each answer
  is fed back with ``gossip_received``, a failed request is dropped (the machine asks again
  at its next interval);
- **gossip from peers**: the node hands every inbound DiscoverBrokers request to
  :meth:`BootstrapRunner.gossip_received` too, since gossip is two-way;
- **StartNode**: ``start`` is called with it (the node starts its driver), then the Deferred
  of :meth:`BootstrapRunner.run` fires with it. A machine that fails, a ``start`` that raises,
  or :meth:`BootstrapRunner.stop` fail that Deferred instead.

Invariants: ``start`` is called at most once; after the Deferred has fired no timer is armed
and nothing is asked; inputs never nest (an answer that arrives synchronously while actions
are carried out is queued and fed after them), so the machine sees one input at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import defer
from twisted.logger import Logger

from broker_core.raft.bootstrap import Action, AskServers, BootstrapMachine, Phase, StartNode
from broker_core.raft.discovery import Gossip, QuorumView
from broker_core.raft.log import IRaftLog
from broker_core.raft.quorum_state import read_quorum_state
from broker_core.raft.voter_set import VoterSetHistory


class BootstrapFailed(Exception):
    """The node cannot start: the machine's ``failure``, or the runner was stopped first."""


def persisted_view(data_dir: Path | str, log: IRaftLog) -> QuorumView | None:
    """Step 1: what the quorum-state file and the log tell of the quorum. ``None`` for a fresh
    node (no file). The voters are the latest assignment in the log, committed or not: the
    file's (as of ``AppliedOffset``) and then the log's forward scan from there, as the node
    itself recovers them. A file that records no election, no vote and no assignment tells only
    the cluster id: the node never took part in a quorum, so ``quorum.voters`` still decides.
    Raises :class:`~broker_core.raft.quorum_state.QuorumStateError` for a bad file."""
    state = read_quorum_state(Path(data_dir))
    if state is None:
        return None
    history = VoterSetHistory.recover(state.applied_offset, state.current_voters,
                                      state.target_voters, log)
    if (state.leader_epoch == 0 and state.voted_id < 0 and state.leader_id < 0
            and history.latest_offset < 0 and log.end_offset() == 0):
        return QuorumView(state.cluster_id)
    return QuorumView(state.cluster_id, state.leader_id, state.leader_epoch,
                      history.latest_offset, tuple(sorted(history.voters)))


class BootstrapRunner:
    """See the module docstring.

    :param machine: a new machine (its constructor's actions not yet taken).
    :param clock: ``IReactorTime``.
    :param ask: sends one DiscoverBrokers ``(server, gossip)``; a Deferred of the answer.
    :param start: starts the node; called once, with the machine's :class:`StartNode`.
    :param on_phase: hears of every phase the machine enters, in order (after the input that
        made it enter it).
    """

    log = Logger(namespace="sluice.raft.bootstrap")

    def __init__(self, machine: BootstrapMachine, clock: Any,
                 ask: Callable[[tuple[str, int], Gossip], defer.Deferred],
                 start: Callable[[StartNode], None],
                 on_phase: Callable[[Phase], None] | None = None,
                 node_id: int | None = None) -> None:
        self.machine = machine
        self.clock = clock
        self._ask = ask
        self._start = start
        self._on_phase = on_phase
        self.node_id = machine.directory.me.node_id if node_id is None else node_id
        self._timer: Any = None
        self._done: defer.Deferred | None = None
        self._reported = 1  # phases of ``machine.history`` told (restoring needs no telling)
        self._busy = False
        self._queue: list[Callable[[], list[Action]]] = []

    @property
    def finished(self) -> bool:
        return self._done is not None and self._done.called

    def _now(self) -> float:
        return self.clock.seconds() * 1000.0

    def run(self) -> defer.Deferred:
        """Carry out step 1's outcome and drive the machine until it starts or fails; the
        Deferred fires with the :class:`StartNode` (after ``start`` ran)."""
        if self._done is not None:
            raise RuntimeError("run() once")
        self._done = defer.Deferred()
        self._input(self.machine.take_actions)
        return self._done

    def gossip_received(self, gossip: Gossip) -> None:
        """A DiscoverBrokers answer, or a request from a peer."""
        if not self.finished:
            self._input(lambda: self.machine.gossip_received(gossip, self._now()))

    def stop(self) -> None:
        """Give up: no more timers or requests; the Deferred fails if it had not fired."""
        self._cancel_timer()
        if self._done is not None and not self._done.called:
            self._done.errback(BootstrapFailed("stopped before the quorum was found"))

    # -- internals -------------------------------------------------------------------------

    def _input(self, step: Callable[[], list[Action]]) -> None:
        self._queue.append(step)
        if self._busy:
            return  # runs after the current input's actions
        self._busy = True
        try:
            while self._queue and not self.finished:
                self._apply(self._queue.pop(0)())
        finally:
            self._busy = False
            self._queue.clear()
        if not self.finished:
            self._arm()

    def _apply(self, actions: list[Action]) -> None:
        self._phase_changed()
        for action in actions:
            if isinstance(action, AskServers):
                gossip = self.machine.gossip()
                for server in action.servers:
                    d = self._ask(server, gossip)
                    d.addCallbacks(self.gossip_received, self._unanswered,
                                   errbackArgs=(server,))
            else:
                self._started(action)
                return
        if self.machine.phase is Phase.FAILED:
            self._cancel_timer()
            assert self._done is not None
            self._done.errback(BootstrapFailed(self.machine.failure or "bootstrap failed"))

    def _started(self, start: StartNode) -> None:
        self._cancel_timer()
        assert self._done is not None
        self.log.info("quorum node {node} starts as {role} of voters {voters} (cluster id "
                      "{cluster_id}, leader {leader})", node=self.node_id,
                      role="a voter" if start.as_voter else "an observer",
                      voters=list(start.voter_ids), cluster_id=start.cluster_id,
                      leader=start.leader_id)
        try:
            self._start(start)
        except Exception:
            self._done.errback()
            return
        self._done.callback(start)

    def _phase_changed(self) -> None:
        """Tell every phase the machine entered since the last input (one input may pass
        through several: a fall back that finds a majority at once starts)."""
        history = self.machine.history
        while self._reported < len(history):
            self._told(history[self._reported])
            self._reported += 1

    def _told(self, phase: Phase) -> None:
        if phase is Phase.FAILED:
            self.log.error("quorum node {node} cannot start: {why}", node=self.node_id,
                           why=self.machine.failure)
        elif phase is not Phase.STARTED:
            self.log.info("quorum node {node}: {phase} (bootstrap servers {servers})",
                          node=self.node_id, phase=phase.value,
                          servers=[f"{h}:{p}" for h, p in self.machine.servers])
        if self._on_phase is not None:
            self._on_phase(phase)

    def _unanswered(self, failure: Any, server: tuple[str, int]) -> None:
        self.log.debug("DiscoverBrokers to {host}:{port} unanswered: {why}", host=server[0],
                       port=server[1], why=failure.getErrorMessage())

    def _arm(self) -> None:
        self._cancel_timer()
        deadline = self.machine.next_deadline()
        if deadline is not None:
            self._timer = self.clock.callLater(max(0.0, deadline - self._now()) / 1000.0,
                                               self._tick, deadline)

    def _tick(self, deadline: float) -> None:
        self._timer = None
        # A timer may fire a hair before its deadline (seconds to milliseconds in floats):
        # it is the deadline's tick all the same, or the machine would be woken in a loop.
        self._input(lambda: self.machine.tick(max(self._now(), deadline)))

    def _cancel_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None
