"""The per-role halves of :class:`~broker_core.raft.node.RaftNode`, sans-IO like it.

The node owns what outlives a role (epoch, vote, log, snapshots, high watermark, voter
history) and dispatches; each module here holds one role's state, rebuilt on every
transition, and the handlers that read or change it. Their methods take the node explicitly
(never a mixin sharing all of its ``self``), so what a role touches of the node is visible at
each call:

- :mod:`.leader`: replica progress, high-watermark advance, fetch serving (parked fetches),
  voter changes while leading, DescribeQuorum;
- :mod:`.fetcher`: the follower's and observer's fetching (the observer has no state of its
  own beyond the probe flag, so both share one fetcher);
- :mod:`.candidate`: vote collection;
- :mod:`.snapshot_transfer`: FetchSnapshot chunks, the serving and the fetching side.
"""
