"""Creating a topic through a broker of a quorum-mode cluster that may still be settling.
"""

from __future__ import annotations


def try_create_topic(bootstrap: str, name: str, partitions: int) -> bool:
    from broker_core.wire.errors import ErrorCode
    from sluice_tools.admin import AdminClient, AdminError

    try:
        AdminClient(bootstrap_servers=bootstrap).create_topic(name, partitions, 3)
    except AdminError as e:  # a retry after a first attempt whose answer was lost
        return e.code == ErrorCode.TOPIC_ALREADY_EXISTS
    except OSError:  # no broker answered
        return False
    return True


