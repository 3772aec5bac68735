"""Sluice's operator tools: the ``sluice`` command and what only it uses (the admin client,
ZooKeeper and quorum administration, consumer-group administration, the console producer and
consumer, the load driver, development certificates).

The tools may import broker internals (``broker_core``: topic and ACL stores, ZooKeeper paths,
the Raft admin messages) as well as the client library; the client library
(``consumer_client``) never imports the tools. The layers are checked by ``lint-imports``
(the contracts in ``.importlinter``, drawn in docs/architecture.md).
"""
