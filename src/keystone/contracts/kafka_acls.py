"""Kafka ACLs made what they should be: the bindings a principal's grants make, and one
reconciliation (create the missing, delete the others) for the stack's service users
(`stack.kafka_security`) and apps' own users (`control.kafka_access`) alike."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

Grant = tuple[ResourceType, str, ResourcePatternType, AclOperation]
TIMEOUT = 10.0  # seconds per admin request


def bindings(principal: str, grants: Iterable[Grant]) -> set[AclBinding]:
    allow = AclPermissionType.ALLOW
    return {AclBinding(k, name, p, principal, "*", op, allow) for k, name, p, op in grants}


def reconcile_acls(
    admin: AdminClient, wanted: set[AclBinding], owned: Callable[[AclBinding], bool]
) -> None:
    """Makes the ACLs that `owned` picks exactly `wanted`: the missing created, the others
    deleted (Kafka keeps an ACL made twice once). Raises `KafkaException`."""
    every = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = {b for b in admin.describe_acls(every, request_timeout=TIMEOUT).result() if owned(b)}
    if wanted - found:
        for future in admin.create_acls(list(wanted - found), request_timeout=TIMEOUT).values():
            future.result()
    if found - wanted:
        stale = [_filter(binding) for binding in found - wanted]
        for future in admin.delete_acls(stale, request_timeout=TIMEOUT).values():
            future.result()


def _filter(binding: AclBinding) -> AclBindingFilter:
    """The filter that matches `binding` alone (what `delete_acls` takes)."""
    b = binding
    fields = (b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation)
    return AclBindingFilter(*fields, b.permission_type)
