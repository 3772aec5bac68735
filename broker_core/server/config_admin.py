"""AlterConfigs (33) and IncrementalAlterConfigs (44): a request body in, the response body out,
over :mod:`broker_core.config_changes` (which holds what may change and how it is stored).

Per resource, in request order (one result each, echoing type and name; the others are still
handled when one fails):

1. a resource named twice in one request → INVALID_REQUEST (each time), as Kafka answers;
2. the ACL (``refuse``): ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or on the
   cluster for a broker resource (CLUSTER_AUTHORIZATION_FAILED);
3. the change, checked whole: an unknown or unsupported key, a bad value, APPEND/SUBTRACT on a
   key that is not a list → INVALID_CONFIG; a broker key that cannot change live →
   POLICY_VIOLATION; a topic that does not exist → UNKNOWN_TOPIC_OR_PARTITION;
4. unless ``validate_only``, the new set is written conditionally; every broker's watch then
   applies it.

More than :data:`~broker_core.config_changes.MAX_RESOURCES` resources: every one gets
INVALID_REQUEST and nothing is read or written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from twisted.logger import Logger

from broker_core.config.broker_config import topic_defaults
from broker_core.config_changes import (
    BROKER,
    MAX_RESOURCES,
    TOPIC,
    Change,
    ConfigChangeError,
    alter_entity,
    apply_full,
    apply_incremental,
)
from broker_core.security.acl import AclOperation
from broker_core.security.acl import ResourceType as AclResourceType
from broker_core.server.authorization import Access
from broker_core.wire.errors import ErrorCode
from broker_core.wire.messages.describe_configs import ResourceType

log = Logger(namespace="sluice.server")

Refuse = Callable[[Any], ErrorCode | None]


class ConfigAdmin:
    """The two alter APIs of one broker; see the module docstring."""

    def __init__(self, store: Any, broker_config: Any) -> None:
        self.store = store
        self.broker_config = broker_config

    async def alter_configs(self, body: Any, refuse: Refuse | None = None) -> dict[str, Any]:
        def change(res: Any) -> Callable[[dict[str, str]], dict[str, str]]:
            changes = [Change(c.name, c.value) for c in res.configs]
            return lambda current: apply_full(_kind(res), changes)
        return await self._alter(body, change, refuse)

    async def incremental_alter_configs(self, body: Any, refuse: Refuse | None = None
                                        ) -> dict[str, Any]:
        defaults = topic_defaults(self.broker_config)

        def change(res: Any) -> Callable[[dict[str, str]], dict[str, str]]:
            changes = [Change(c.name, c.value, c.config_operation) for c in res.configs]
            kind = _kind(res)
            return lambda current: apply_incremental(
                kind, current, changes, defaults=defaults if kind is TOPIC else {})
        return await self._alter(body, change, refuse)

    async def _alter(self, body: Any, change: Callable[[Any], Callable], refuse: Refuse | None
                     ) -> dict[str, Any]:
        resources = list(body.resources)
        named = Counter((r.resource_type, r.resource_name) for r in resources)
        too_many = len(resources) > MAX_RESOURCES
        responses = []
        for res in resources:
            result = {"error_code": 0, "error_message": None,
                      "resource_type": res.resource_type, "resource_name": res.resource_name}
            try:
                if too_many:
                    raise ConfigChangeError(ErrorCode.INVALID_REQUEST,
                                            f"at most {MAX_RESOURCES} resources per request")
                if named[(res.resource_type, res.resource_name)] > 1:
                    raise ConfigChangeError(ErrorCode.INVALID_REQUEST,
                                            "the resource is named more than once")
                denied = None if refuse is None else refuse(res)
                if denied is not None:
                    raise ConfigChangeError(denied,
                                            "ALTER_CONFIGS on this resource is not allowed")
                await alter_entity(self.store, res.resource_type, res.resource_name,
                                   change(res), validate_only=body.validate_only)
            except ConfigChangeError as e:
                result["error_code"], result["error_message"] = int(e.code), str(e)
            except Exception as e:  # e.g. the store unreachable: this resource fails
                log.failure("altering the configs of {type} {name!r} failed",
                            type=res.resource_type, name=res.resource_name)
                result["error_code"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                result["error_message"] = f"could not alter the configs: {e}"
            responses.append(result)
        return {"throttle_time_ms": 0, "responses": responses}


def config_refusal(access: Access, op: AclOperation) -> Refuse | None:
    """The per-resource ACL check of the config APIs: ``op`` on the topic
    (TOPIC_AUTHORIZATION_FAILED), or on the cluster for a broker resource
    (CLUSTER_AUTHORIZATION_FAILED); None when the connection is not restricted."""
    if access.unrestricted:
        return None

    def refuse(res: Any) -> ErrorCode | None:
        if res.resource_type == ResourceType.TOPIC:
            if not access.allows(op, AclResourceType.TOPIC, res.resource_name):
                return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not access.allows_cluster(op):
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return None
    return refuse


def _kind(res: Any) -> Any:
    if res.resource_type == ResourceType.BROKER:
        return BROKER
    return TOPIC  # other types are refused by the store path check before ``change`` runs
