"""Kafka's DescribeAcls, CreateAcls and DeleteAcls: the ACLs in the metadata store
(:mod:`broker_core.acl_store`), which every broker's authorizer follows.

Without an authorizer (``authorizer.enabled=false``) each answers SECURITY_DISABLED and changes
nothing. A binding or filter that is not valid is answered INVALID_REQUEST on its own; the
others of the request are still handled. Who may call them (DESCRIBE or ALTER on the cluster)
was checked before dispatch (:mod:`broker_core.server.authorization`).
"""

from __future__ import annotations

from typing import Any

from twisted.logger import Logger

from broker_core import acl_store
from broker_core.security.acl import AclFilter, Authorizer, InvalidAcl, binding, group_by_pattern
from broker_core.wire.errors import ErrorCode


class AclApis:
    """The three APIs of the module docstring for one broker; :class:`RequestHandler`
    delegates to it."""

    log = Logger(namespace="sluice.server")

    def __init__(self, *, store: Any, authorizer: Authorizer | None) -> None:
        self.store = store
        self.authorizer = authorizer

    def _security_disabled(self) -> str:
        return "no authorizer is configured on this broker (authorizer.enabled=false)"

    def describe_acls(self, header: Any, body: Any) -> dict:
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.SECURITY_DISABLED),
                    "error_message": self._security_disabled(), "resources": []}
        try:
            f = AclFilter.from_wire(body.resource_type_filter, body.pattern_type_filter,
                                    body.resource_name_filter, body.principal_filter,
                                    body.host_filter, body.operation, body.permission_type)
        except InvalidAcl as e:
            return {"throttle_time_ms": 0, "error_code": int(ErrorCode.INVALID_REQUEST),
                    "error_message": str(e), "resources": []}
        resources = [
            {"resource_type": int(p.resource_type), "resource_name": p.name,
             "pattern_type": int(p.pattern_type),
             "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                       "permission_type": int(e.permission)} for e in entries]}
            for p, entries in group_by_pattern(self.authorizer.matching(f)).items()]
        if header.api_version == 0:  # v0 cannot say a pattern is PREFIXED
            resources = [r for r in resources if r["pattern_type"] == 3]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "resources": resources}

    async def create_acls(self, header: Any, body: Any) -> dict:
        results: list[dict] = []
        valid = []
        for c in body.creations:
            if self.authorizer is None:
                results.append({"error_code": int(ErrorCode.SECURITY_DISABLED),
                                "error_message": self._security_disabled()})
                continue
            try:
                valid.append(binding(c.resource_type, c.resource_pattern_type, c.resource_name,
                                     c.principal, c.host, c.operation, c.permission_type))
            except InvalidAcl as e:
                results.append({"error_code": int(ErrorCode.INVALID_REQUEST),
                                "error_message": str(e)})
                continue
            results.append({"error_code": 0, "error_message": None})
        if valid:
            try:
                await acl_store.create_acls(self.store, valid)
                self.log.info("ACLs created: {acls}", acls="; ".join(str(b) for b in valid))
            except Exception as e:
                self.log.failure("CreateAcls failed")
                for r in results:
                    if r["error_code"] == 0:
                        r["error_code"] = int(ErrorCode.UNKNOWN_SERVER_ERROR)
                        r["error_message"] = f"the ACLs could not be stored: {e}"
        return {"throttle_time_ms": 0, "results": results}

    async def delete_acls(self, header: Any, body: Any) -> dict:
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": int(ErrorCode.SECURITY_DISABLED),
                 "error_message": self._security_disabled(), "matching_acls": []}
                for _ in body.filters]}
        filters: list[AclFilter | None] = []
        errors: list[str | None] = []
        for f in body.filters:
            try:
                filters.append(AclFilter.from_wire(
                    f.resource_type_filter, f.pattern_type_filter, f.resource_name_filter,
                    f.principal_filter, f.host_filter, f.operation, f.permission_type))
                errors.append(None)
            except InvalidAcl as e:
                filters.append(None)
                errors.append(str(e))
        good = [f for f in filters if f is not None]
        try:
            deleted = iter(await acl_store.delete_acls(self.store, good))
        except Exception as e:
            self.log.failure("DeleteAcls failed")
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                 "error_message": f"the ACLs could not be deleted: {e}", "matching_acls": []}
                for _ in body.filters]}
        out = []
        for f, error in zip(filters, errors, strict=True):
            if f is None:
                out.append({"error_code": int(ErrorCode.INVALID_REQUEST), "error_message": error,
                            "matching_acls": []})
                continue
            gone = next(deleted)
            if gone:
                self.log.info("ACLs deleted: {acls}", acls="; ".join(str(b) for b in gone))
            out.append({"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None,
                 "resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
                 "pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
                 "host": b.entry.host, "operation": int(b.entry.operation),
                 "permission_type": int(b.entry.permission)} for b in gone]})
        return {"throttle_time_ms": 0, "filter_results": out}
