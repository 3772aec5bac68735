"""Stopping a quorum-mode cluster and starting it again at once (``scripts/quickstart.sh
--stop``, then ``scripts/quickstart.sh``): three broker processes, each a voter of the metadata
quorum, stopped with SIGTERM either all together (as the quickstart does) or one after another
(then the last broker's quorum is certainly gone when it closes its metadata session), then
started again.

Checked, from the brokers' own logs:

- a broker whose stop could not close its session says so, and its next start closes that
  session itself (``closed session N, left open by this broker's last stop``), or finds it
  already ended (a close committed whose answer was lost with the stopping quorum);
- no restarted broker waits for a previous session's ``/brokers/ids/[id]`` (the old code logged
  "still held by a previous session" until the quorum expired the session, a whole session
  timeout after the restarted quorum elected a leader), and each registers well within a
  session timeout of its start, by the log's timestamps;
- no line of any log is critical, and every broker stopped cleanly both times.
"""

from __future__ import annotations

import re
import signal
from datetime import datetime

import pytest

from tests.support.procs import ProcessCluster

pytestmark = pytest.mark.slow

#: Long, so that waiting for an old session (a whole timeout) cannot pass for a quick start.
SESSION_TIMEOUT_S = 30
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}) ")


@pytest.fixture
def quorum_cluster(tmp_path):
    cluster = ProcessCluster(None, tmp_path / "cluster", size=3, quorum=True, extra={
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_S * 1000),
        "controlled.shutdown.retry.backoff.ms": "500"})
    try:
        yield cluster
    finally:
        cluster.stop()


def _stamp(line: str) -> datetime:
    m = _STAMP.match(line)
    assert m, f"no timestamp in {line!r}"
    return datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S%z")


#: How a broker process ends after SIGTERM: twist ends a run stopped by a signal with that
#: signal (whether the stop was clean is in the log, checked below).
_STOPPED = (0, -signal.SIGTERM)


def _stop(cluster: ProcessCluster, together: bool) -> None:
    procs = [b.proc for b in cluster.brokers.values()]
    for p in procs:
        p.send_signal(signal.SIGTERM)
        if not together:
            assert p.wait(timeout=120) in _STOPPED
    for p in procs:
        assert p.wait(timeout=120) in _STOPPED


@pytest.mark.parametrize("together", [True, False], ids=["together", "one-after-another"])
def test_a_stopped_quorum_cluster_restarts_without_waiting_for_its_old_sessions(
        quorum_cluster, together):
    cluster = quorum_cluster
    cluster.start()
    cluster.wait_registered(timeout=60)
    _stop(cluster, together)

    first_run = {i: b.log_text() for i, b in cluster.brokers.items()}
    left_open = {}
    for i, log in first_run.items():
        assert f"broker {i} stopped cleanly" in log
        m = re.search(r"closing session (\d+) failed", log)
        if m:
            left_open[i] = int(m.group(1))
    if not together:
        # The last one stopped alone: no quorum could take its close (an earlier one's may
        # have failed too, when the quorum leader had just stopped before it).
        assert list(cluster.brokers)[-1] in left_open

    cluster.start()
    cluster.wait_registered(timeout=3 * SESSION_TIMEOUT_S)
    for i, b in cluster.brokers.items():
        second = b.log_text()[len(first_run[i]):]
        lines = second.splitlines()
        assert "still held by a previous session" not in second, \
            f"broker {i} waited for its old session"
        registered = [ln for ln in lines if f"registered /brokers/ids/{i} " in ln]
        assert registered, f"broker {i} did not register: {lines[-5:]}"
        took = (_stamp(registered[0]) - _stamp(lines[0])).total_seconds()
        assert took < SESSION_TIMEOUT_S, f"broker {i} registered {took}s after its start"
        if i in left_open:
            # Its close may have been committed after all, the answer lost with the quorum
            # that stopped: then the start finds the session already gone and says so.
            closed = (f"closed session {left_open[i]}, left open by this broker's last stop"
                      in second)
            ended = (f"session {left_open[i]}, left open by this broker's last stop, had "
                     f"already ended" in second)
            assert closed or ended, f"broker {i} did not deal with session {left_open[i]}"

    _stop(cluster, together=True)
    for i, b in cluster.brokers.items():
        log = b.log_text()
        critical = [ln for ln in log.splitlines() if "#critical]" in ln]
        assert not critical, f"broker {i} logged: {critical[:3]}"
        assert log.count(f"broker {i} stopped cleanly") == 2
