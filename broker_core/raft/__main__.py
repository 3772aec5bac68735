"""Run one metadata-quorum node as a process: ``python -m broker_core.raft`` (or
``sluice-quorum``).

::

    sluice-quorum --node-id 1 --cluster-id sluice-1 \\
        --quorum-voters 1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095 \\
        --listen 127.0.0.1:9093 --data-dir /var/lib/sluice/quorum-1

Every start follows the start procedure (``bootstrap_runner.py``): the node reads
what it persisted; a node that knows its quorum and its voters' addresses starts at once.
Otherwise, with ``--bootstrap-servers host:port,...``, it asks those (DiscoverBrokers, which
also tells them its own address) and joins the quorum it finds, never forming a second one.
If none is found within ``--discovery-timeout-ms``, ``--quorum-voters`` decides: a listed
node names itself a voter in its gossip and begins the vote once it knows the addresses of a
majority of the listed voters; any other node is an **observer**, which fetches from the
leader and can be made a voter with ``sluice quorum reassign``. With bootstrap servers the
voters may be given by id only (``--quorum-voters 1,2,3``): their addresses are learned by
gossip. ``--peers`` (``id@host:port,...``) is the fixed alternative without gossip: the
addresses of the nodes outside ``--quorum-voters``, which the others need once those vote.

The node keeps its quorum-state file and its log (``__cluster_metadata-0``) under
``--data-dir`` and logs its role changes. SIGTERM or SIGINT stops it cleanly: a leader resigns
first (EndQuorumEpoch), and the log is closed with its clean-shutdown marker.

``--cluster-id`` may be left out on a restart (the quorum-state file has it), by a node that
learns it from the quorum it discovers, and by a fresh node that is the only voter of
``--quorum-voters`` (the bootstrapping example): when it finds no quorum it generates
one, logs it and prints it as a ``cluster-id`` event.

``--events`` prints one JSON object per line on stdout for tools (the benchmark and the system
tests read them): ``listening``, ``bootstrap`` (every phase of the start procedure: ``phase``
is ``discovering``, ``waiting for voters``, ``started`` with the voters, or ``failed``),
``discovered`` (started in a quorum found through gossip), ``cluster-id``, ``role`` (every
role change),
``leader-committed`` (a leader's first entry of its epoch committed: from then on it serves
writes), ``load`` (once a second while the load loop runs) and, with ``--print-acks``,
``ack`` (one committed write).

``--load-in-flight N`` makes the node, while it leads, keep N proposals of
``--load-payload-bytes`` bytes in flight, proposing a new one as each commits. It is the
only way to write to this quorum from outside for now (there is no client API yet), and it
is what the benchmark measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from twisted.internet import defer
from twisted.logger import (
    FilteringLogObserver,
    Logger,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)

from broker_core import stop_signals
from broker_core.config.quorum import (
    RaftConfig,
    RaftConfigError,
    parse_bootstrap_servers,
    parse_configured_voters,
    parse_quorum_voters,
)
from broker_core.raft.bootstrap import DEFAULT_DISCOVERY_TIMEOUT_MS, Phase
from broker_core.raft.bootstrap_runner import BootstrapFailed
from broker_core.raft.cluster_id import resolve_cluster_id
from broker_core.raft.driver import RaftDriver
from broker_core.raft.effects import Transition
from broker_core.raft.entries import LeaderChange, LogEntry
from broker_core.raft.quorum_state import QuorumStateError, read_quorum_state
from broker_core.raft.roles import Role
from broker_core.raft.service import QuorumNode
from broker_core.security.cluster_secret import ClusterCredential, ClusterSecretError

log = Logger(namespace="sluice.raft")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sluice-quorum", description=__doc__.split("\n\n")[0])
    p.add_argument("--node-id", type=int, required=True, help="this node's id (node.id)")
    p.add_argument("--quorum-voters", default="",
                   help="quorum.voters: id@host:port,id@host:port,... (needed for the first "
                        "start of a quorum; without it the node discovers the voters through "
                        "--bootstrap-servers, with which an entry may be a bare id whose "
                        "address is learned by gossip)")
    p.add_argument("--bootstrap-servers", default="",
                   help="bootstrap.servers: host:port,... of quorum nodes to ask for the quorum "
                        "(DiscoverBrokers) and to tell this node's address")
    p.add_argument("--discovery-timeout-ms", type=float,
                   default=DEFAULT_DISCOVERY_TIMEOUT_MS,
                   help="how long a node with --bootstrap-servers looks for an existing quorum "
                        "before --quorum-voters decides (default "
                        f"{DEFAULT_DISCOVERY_TIMEOUT_MS:g})")
    p.add_argument("--peers", default="",
                   help="id@host:port,... of other quorum nodes that are not in "
                        "--quorum-voters (observers that may become voters)")
    p.add_argument("--listen", required=True, help="host:port of the quorum listener")
    p.add_argument("--data-dir", required=True, help="quorum-state file and metadata log")
    p.add_argument("--secret-file", default=None,
                   help="a cluster.secret.file: the listener then serves the quorum to "
                        "connections that log in with it only, and this node logs in with it "
                        "(without it the listener is open to anyone: tests and benchmarks)")
    p.add_argument("--cluster-id", default=None,
                   help="the quorum's cluster id; may be left out on a restart (it is read "
                        "from the quorum-state file) and by a fresh node that is the only "
                        "voter of --quorum-voters, which generates one")
    defaults = RaftConfig()
    for flag, key in (("--election-timeout-ms", "election_timeout_ms"),
                      ("--fetch-timeout-ms", "fetch_timeout_ms"),
                      ("--election-backoff-max-ms", "election_backoff_max_ms"),
                      ("--request-timeout-ms", "request_timeout_ms"),
                      ("--retry-backoff-ms", "retry_backoff_ms"),
                      ("--fetch-max-wait-ms", "fetch_max_wait_ms")):
        p.add_argument(flag, type=int, default=getattr(defaults, key),
                       help=f"default {getattr(defaults, key)}")
    p.add_argument("--persist-thread", action="store_true",
                   help="write the quorum state and flush the log on a writer thread instead "
                        "of the reactor thread")
    p.add_argument("--events", action="store_true", help="JSON event lines on stdout")
    p.add_argument("--load-in-flight", type=int, default=0,
                   help="while leading, keep this many proposals in flight (0: none)")
    p.add_argument("--load-payload-bytes", type=int, default=100)
    p.add_argument("--print-acks", action="store_true",
                   help="with --events: one 'ack' event per committed load write")
    return p.parse_args(argv)


def _listen_address(raw: str) -> tuple[str, int]:
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise RaftConfigError(f"invalid value {raw!r} for '--listen': expected host:port")
    return host.strip("[]"), int(port)


class Events:
    """JSON lines on stdout (or nothing)."""

    def __init__(self, enabled: bool, node_id: int) -> None:
        self.enabled = enabled
        self.node_id = node_id

    def emit(self, event: str, **fields: Any) -> None:
        if self.enabled:
            line = json.dumps({"event": event, "node": self.node_id, "t": time.time(), **fields})
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


class LoadLoop:
    """While the node leads, keep ``in_flight`` proposals outstanding. Payloads name the
    writer, epoch and sequence number, so an acknowledged write can be found in the log."""

    def __init__(self, driver: RaftDriver, events: Events, in_flight: int, size: int,
                 print_acks: bool) -> None:
        self.driver = driver
        self.events = events
        self.in_flight = in_flight
        self.size = size
        self.print_acks = print_acks
        self._outstanding = 0
        self._seq = 0
        self.committed = 0
        self._reported = 0

    def kick(self) -> None:
        while (self._outstanding < self.in_flight and self.driver.role is Role.LEADER
               and self.driver.running):
            self._seq += 1
            tag = f"w{self.driver.node_id}-e{self.driver.node.epoch}-s{self._seq}"  # type: ignore[union-attr]
            payload = tag.encode().ljust(self.size, b".")
            self._outstanding += 1
            d = self.driver.propose(payload)
            d.addCallbacks(self._acked, self._failed, callbackArgs=(tag,))

    def _acked(self, offset: int, tag: str) -> None:
        self._outstanding -= 1
        self.committed += 1
        if self.print_acks:
            self.events.emit("ack", offset=offset, tag=tag)
        self.kick()

    def _failed(self, failure: Any) -> None:
        self._outstanding -= 1  # not leading any more, or truncated: nothing was acknowledged

    def report(self) -> None:
        if self.committed != self._reported:
            self.events.emit("load", committed=self.committed, steps=self.driver.steps,
                             flushes=self.driver.flushes,
                             persist_s=round(self.driver.persist_seconds, 4))
            self._reported = self.committed


def _checked_arguments(args: argparse.Namespace) -> tuple[
        dict, list, dict, tuple[str, int], ClusterCredential | None, RaftConfig]:
    """The start arguments, checked before anything is opened: ``(voters, bootstrap
    servers, peers, listen address, cluster credential, RaftConfig)``. Raises
    RaftConfigError naming the argument at fault."""
    voters = (parse_configured_voters(args.quorum_voters, "--quorum-voters")
              if args.quorum_voters.strip() else {})
    bootstrap = (parse_bootstrap_servers(args.bootstrap_servers, "--bootstrap-servers")
                 if args.bootstrap_servers.strip() else [])
    if not voters and not bootstrap:
        raise RaftConfigError("give --quorum-voters (the first start of a quorum) or "
                              "--bootstrap-servers (to discover it)")
    unaddressed = sorted(n for n, a in voters.items() if a is None)
    if unaddressed and not bootstrap:
        raise RaftConfigError(f"--quorum-voters gives no address for {unaddressed}: give "
                              "id@host:port, or --bootstrap-servers to learn it by gossip")
    peers = parse_quorum_voters(args.peers, "--peers") if args.peers.strip() else {}
    both = sorted(set(voters) & set(peers))
    if both:
        raise RaftConfigError(f"--peers names voters {both}: list each node once")
    host, port = _listen_address(args.listen)
    credential = None
    if args.secret_file is not None:
        try:
            credential = ClusterCredential.from_file(args.secret_file)
        except ClusterSecretError as e:
            raise RaftConfigError(f"--secret-file: {e}") from None
    config = RaftConfig(election_timeout_ms=args.election_timeout_ms,
                        fetch_timeout_ms=args.fetch_timeout_ms,
                        election_backoff_max_ms=args.election_backoff_max_ms,
                        request_timeout_ms=args.request_timeout_ms,
                        retry_backoff_ms=args.retry_backoff_ms,
                        fetch_max_wait_ms=args.fetch_max_wait_ms)
    return voters, bootstrap, peers, (host, port), credential, config


def _watch(node: QuorumNode, events: Events, args: argparse.Namespace) -> None:
    """Once the node has started: report its role changes and its own LeaderChange
    committing as events, and drive the --load-in-flight load loop if asked."""
    driver = node.driver
    load = (LoadLoop(driver, events, args.load_in_flight, args.load_payload_bytes,
                     args.print_acks) if args.load_in_flight > 0 else None)

    def on_transition(t: Transition) -> None:
        events.emit("role", role=t.to_role.value, epoch=t.to_epoch, leader=t.leader_id)

    def on_committed(entries: tuple[LogEntry, ...]) -> None:
        # Our own LeaderChange of the epoch we lead now. The role is asked of the driver, not
        # remembered from on_transition: a single voter commits its LeaderChange in the step
        # that makes it leader, and committed entries are told before transitions. A replay
        # at start never matches: a restarted node never starts as leader.
        for e in entries:
            if (isinstance(e.payload, LeaderChange) and e.payload.leader_id == args.node_id
                    and driver.role is Role.LEADER
                    and e.epoch == driver.node.epoch):  # type: ignore[union-attr]
                events.emit("leader-committed", epoch=e.epoch, offset=e.offset)
                if load is not None:
                    load.kick()

    driver.subscribe_transitions(on_transition)
    driver.subscribe_committed(on_committed)
    if load is not None:
        from twisted.internet.task import LoopingCall  # noqa: PLC0415

        LoopingCall(load.report).start(1.0, now=False)


async def run(reactor: Any, args: argparse.Namespace) -> None:
    voters, bootstrap, peers, (host, port), credential, config = _checked_arguments(args)
    from broker_core.raft.storage import DiskRaftLog  # noqa: PLC0415 (after arg checks)

    events = Events(args.events, args.node_id)
    persisted = read_quorum_state(Path(args.data_dir))
    raft_log = DiskRaftLog.open(args.data_dir, time_ms=lambda: int(reactor.seconds() * 1000))
    cluster_id: str | None
    try:
        cluster_id, generated = resolve_cluster_id(
            args.cluster_id, None if persisted is None else persisted.cluster_id,
            raft_log.end_offset() == 0, args.node_id, voters)
    except RaftConfigError:
        if not bootstrap or raft_log.end_offset() > 0:
            raft_log.close()
            raise
        cluster_id, generated = None, False  # DiscoverBrokers supplies it
    if generated:
        # Only if no quorum is found (the start procedure's step 5) does the sole voter make
        # one up; a quorum found through the bootstrap servers has its own.
        cluster_id = None
    node = QuorumNode(args.node_id, cluster_id, raft_log, args.data_dir, config, reactor,
                      persist_thread=args.persist_thread, bootstrap_servers=bootstrap,
                      credential=credential)
    stopping = defer.Deferred()
    shutting_down: list[bool] = []

    async def shutdown() -> None:
        shutting_down.append(True)
        await node.stop(graceful=True)
        raft_log.close()
        stopping.callback(None)

    reactor.addSystemEventTrigger("before", "shutdown",
                                  lambda: defer.Deferred.fromCoroutine(shutdown()))
    bound = await node.listen(host, port)
    events.emit("listening", port=bound)
    phases: list[Phase] = []

    def on_phase(phase: Phase) -> None:
        phases.append(phase)
        if phase is not Phase.STARTED:
            events.emit("bootstrap", phase=phase.value)

    try:
        start = await node.bootstrap(voters, peers, args.discovery_timeout_ms, on_phase)
    except BootstrapFailed:
        if shutting_down:
            await stopping  # stopped while looking for the quorum
            return
        raise
    assert node.runner is not None and node.driver is not None and node.directory is not None
    view = node.directory.view
    events.emit("bootstrap", phase=Phase.STARTED.value, voters=list(start.voter_ids),
                as_voter=start.as_voter, leader=start.leader_id)
    if Phase.DISCOVERING in phases[-2:-1]:
        events.emit("discovered", cluster_id=start.cluster_id, leader=view.leader_id,
                    epoch=view.leader_epoch, voters=list(start.voter_ids))
    generated = node.runner.machine.cluster_id_generated
    if generated:
        log.info("quorum node {node} generated cluster id {cluster_id}: start the other nodes "
                 "with --cluster-id {cluster_id}, or with --bootstrap-servers to learn it",
                 node=args.node_id, cluster_id=start.cluster_id)
    events.emit("cluster-id", cluster_id=start.cluster_id, generated=generated)
    _watch(node, events, args)
    await stopping


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from twisted.internet import reactor  # noqa: PLC0415 (installed by the import)

    # Info and up on stderr; stdout is left alone for the --events lines.
    observer = FilteringLogObserver(textFileLogObserver(sys.stderr),
                                    [LogLevelFilterPredicate(LogLevel.info)])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
    failed: list[BaseException] = []

    def start() -> None:
        d = defer.Deferred.fromCoroutine(run(reactor, args))

        def fail(f: Any) -> None:
            failed.append(f.value)
            if isinstance(f.value, RaftConfigError | QuorumStateError | OSError
                          | BootstrapFailed):
                print(f"sluice-quorum: {f.value}", file=sys.stderr)
            else:
                log.failure("quorum node failed", f)
            if reactor.running:
                reactor.stop()

        d.addErrback(fail)

    reactor.callWhenRunning(stop_signals.install, reactor)
    reactor.callWhenRunning(start)
    reactor.run()
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
