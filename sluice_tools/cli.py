"""``sluice``: the admin command (Kafka's flag names).

    sluice topics create --topic T --partitions N --replication-factor R [--config k=v ...]
    sluice topics list | describe [--topic T] | delete --topic T | add-partitions --topic T --partitions N
    sluice cluster describe
    sluice reassign --reassignment-json-file FILE (--execute | --verify | --cancel)
    sluice elect-leaders [--election-type preferred|unclean]
                         (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)
    sluice delete-records --bootstrap-server B --offset-json-file FILE
    sluice groups list | describe [--group G ...] | delete --group G [--group G ...]
    sluice groups reset-offsets --group G --topic T[:P,...] (--to-earliest | --to-latest |
                   --to-offset N | --shift-by N | --to-datetime ISO) [--execute]
    sluice loadtest --topic T --consumers N [--processes M] [--groups G] [--duration S] ...
    sluice consume --topic T --group G [--members N] [--from-beginning] [--max-messages N]
                   [--consumer-property KEY=VALUE ...]
    sluice quorum describe [--json] [--secret-file F] [--command-config F]
    sluice quorum reassign (--voters ID,ID,... [--wait] | --cancel) [--secret-file F]
                           [--command-config F]
    sluice secret create FILE
    sluice certs create-dev --out DIR --host HOST [--host HOST ...]
    sluice zookeeper secure --zookeeper HOST:PORT/chroot --auth-file F [--unsecure] [--dry-run]
    sluice metrics-password USER [--password-stdin] [--iterations N]
    sluice users add USER [--mechanism M ...] [--iterations N] [--password-file FILE]
    sluice users remove USER [--mechanism M ...]
    sluice users list [--user USER ...]
    sluice configs describe (--topic T | --broker ID | --broker-defaults) [--key K ...]
                   [--synonyms] [--docs]
    sluice configs alter (--topic T | --broker ID | --broker-defaults) [--set K=V ...]
                   [--delete K ...] [--append K=ITEM ...] [--subtract K=ITEM ...] [--validate-only]
    sluice acls add (--allow-principal P | --deny-principal P)... [--operation OP]...
                    [--allow-host H | --deny-host H] (--topic T | --group G | --cluster)...
                    [--resource-pattern-type literal|prefixed]
    sluice acls list | remove [--principal P] [--operation OP] [--topic T | --group G | --cluster]
                    [--resource-pattern-type any|match|literal|prefixed]

Each takes ``--bootstrap-server HOST:PORT[,...]`` (with ``--command-config F``, a properties file
of client security keys, ``security.protocol``, ``sasl.*``, ``ssl.*``, for a TLS or SASL
listener) or ``--zookeeper HOST:PORT[/chroot]``
(with ``--zookeeper-auth-file F`` when the cluster's znodes are secured, and
``--zookeeper-auth-mechanism digest`` when the brokers log in with the ``digest`` scheme)
(``reassign`` and ``elect-leaders`` through either, a broker carrying them out with Kafka's
AlterPartitionReassignments, ListPartitionReassignments and ElectLeaders in both metadata modes;
``users`` through either, the
password read from a prompt or a file, never from the command line; ``groups`` through the brokers
only, since the members live in the coordinator's memory, and ``configs`` too, the
AlterConfigs APIs' checks being the brokers'; ``quorum`` takes the metadata
quorum's listeners, ``sluice-quorum --listen`` or a broker's ``quorum.listener``: any one
will do, the client finds the leader through DiscoverBrokers; a broker's quorum serves brokers
only, so the tool logs in with the cluster secret, ``--secret-file`` or the file named by
``$SLUICE_CLUSTER_SECRET_FILE``, and with ``--command-config`` (``security.protocol=SSL``,
``ssl.ca.location``, ...) it reaches a quorum listener on TLS). ``secret create`` writes a
new cluster secret (the
``cluster.secret.file`` every broker needs); ``certs create-dev`` a development CA and broker
certificate (for trying TLS on one machine, never for production). Errors go
to stderr as one line: exit code 1 for a failed operation, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import difflib
import getpass
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from broker_core import metadata_paths as paths
from broker_core import topic_admin
from broker_core.config.metadata_keys import SASL_DIGEST_MD5
from broker_core.config.parsing import ConfigError
from broker_core.config.properties import read_properties
from broker_core.security.acl import (
    CLUSTER_NAME,
    AccessEntry,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermission,
    InvalidAcl,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from broker_core.security.sasl import SaslAuthenticationError
from broker_core.security.scram_credential import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    salted_password,
)
from broker_core.security.user_store import validate_user_name
from broker_core.server import user_admin
from broker_core.wire.messages.describe_configs import ResourceType as ConfigResourceType
from broker_core.wire.messages.describe_user_scram_credentials import MECHANISM_CODES
from broker_core.wire.messages.incremental_alter_configs import OpType
from consumer_client.security import ClientSecurity
from sluice_tools.admin import AdminClient, AdminError, error_name


class UsageError(Exception):
    pass


def _positive(name: str):
    def parse(raw: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {raw!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be at least 1, got {v}")
        return v
    return parse


def _key_value(flag: str):
    def parse(raw: str) -> tuple[str, str]:
        key, sep, value = raw.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{flag} expects key=value, got {raw!r}")
        return key.strip(), value.strip()
    return parse


_config = _key_value("--config")

_COMMAND_CONFIG_HELP = ("with --bootstrap-server: a properties file of client security keys "
                        "(security.protocol, sasl.mechanism, sasl.username, sasl.password, "
                        "ssl.ca.location, ...) for a TLS or SASL listener")


def _command_config(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--command-config", metavar="FILE", help=_COMMAND_CONFIG_HELP)


def _connection(sp: argparse.ArgumentParser) -> None:
    """How a command reaches the cluster: a broker list or ZooKeeper (one of the two)."""
    g = sp.add_mutually_exclusive_group(required=True)
    g.add_argument("--bootstrap-server", help="HOST:PORT[,HOST:PORT...] of brokers")
    g.add_argument("--zookeeper", help="ZooKeeper connect string, e.g. 127.0.0.1:2181")
    sp.add_argument("--zookeeper-auth-file", metavar="FILE",
                    help="with --zookeeper: the brokers' zookeeper.auth.file "
                    "(username:password), needed when the znodes are secured")
    sp.add_argument("--zookeeper-auth-mechanism", default=SASL_DIGEST_MD5,
                    metavar="MECHANISM",
                    help="with --zookeeper-auth-file: the brokers' "
                    "zookeeper.auth.mechanism, DIGEST-MD5 (SASL, the default) or digest")
    _command_config(sp)


def _config_resource_args(sp: argparse.ArgumentParser) -> None:
    """The brokers and the one resource (topic, broker or broker defaults) a configs command
    names."""
    sp.add_argument("--bootstrap-server", required=True,
                    help="HOST:PORT[,HOST:PORT...] of brokers")
    _command_config(sp)
    g = sp.add_mutually_exclusive_group(required=True)
    g.add_argument("--topic", help="a topic's configs")
    g.add_argument("--broker", type=int, metavar="ID", help="a broker's configs")
    g.add_argument("--broker-defaults", action="store_true",
                   help="the cluster-wide dynamic broker defaults")


def _quorum_connection(sp: argparse.ArgumentParser) -> None:
    """How a quorum command reaches the metadata quorum, and how long it may take."""
    sp.add_argument("--bootstrap-server", required=True,
                    help="HOST:PORT[,HOST:PORT...] of quorum listeners: any quorum "
                    "node will do, the leader is found through DiscoverBrokers")
    sp.add_argument("--timeout", type=float, default=30.0,
                    help="seconds for the whole operation, retries included (default 30)")
    sp.add_argument("--secret-file", metavar="FILE",
                    default=os.environ.get("SLUICE_CLUSTER_SECRET_FILE"),
                    help="the brokers' cluster.secret.file: a broker's quorum serves "
                    "brokers only (default $SLUICE_CLUSTER_SECRET_FILE)")
    sp.add_argument("--command-config", metavar="FILE",
                    help="a properties file of TLS keys (security.protocol=SSL, "
                    "ssl.ca.location, ...) for a quorum listener on SSL or SASL_SSL")


def _add_topics(sub: argparse._SubParsersAction) -> None:
    """The ``topics`` command and its arguments."""
    topics = sub.add_parser("topics", help="create, list, describe, delete topics")
    tsub = topics.add_subparsers(dest="action", required=True)
    c = tsub.add_parser("create", help="create a topic")
    _connection(c)
    c.add_argument("--topic", required=True)
    c.add_argument("--partitions", type=_positive("--partitions"), default=1)
    c.add_argument("--replication-factor", type=_positive("--replication-factor"), default=1)
    c.add_argument("--config", type=_config, action="append", default=[],
                   help="per-topic override key=value (repeatable)")
    ls = tsub.add_parser("list", help="list topics")
    _connection(ls)
    d = tsub.add_parser("describe", help="leaders, epochs, ISR and replicas per partition")
    _connection(d)
    d.add_argument("--topic", action="append", help="topic to describe (repeatable; default all)")
    rm = tsub.add_parser("delete", help="delete a topic")
    _connection(rm)
    rm.add_argument("--topic", required=True)
    ap = tsub.add_parser("add-partitions", help="raise a topic's partition count")
    _connection(ap)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=_positive("--partitions"), required=True,
                    help="the new total number of partitions")


def _add_cluster(sub: argparse._SubParsersAction) -> None:
    """The ``cluster`` command and its arguments."""
    cluster = sub.add_parser("cluster", help="describe the cluster")
    csub = cluster.add_subparsers(dest="action", required=True)
    cd = csub.add_parser("describe", help="brokers, controller, controller epoch")
    _connection(cd)


def _add_reassign(sub: argparse._SubParsersAction) -> None:
    """The ``reassign`` command and its arguments."""
    ra = sub.add_parser("reassign", help="move partitions to other brokers "
                        "(kafka-reassign-partitions)")
    _connection(ra)
    ra.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                    help='{"version":1,"partitions":[{"topic":T,"partition":P,"replicas":[..]}]}')
    ag = ra.add_mutually_exclusive_group(required=True)
    ag.add_argument("--execute", action="store_true", help="start the reassignment")
    ag.add_argument("--verify", action="store_true", help="report the status of each partition")
    ag.add_argument("--cancel", action="store_true",
                    help="revert partitions not yet moved to their original replicas")


def _add_users(sub: argparse._SubParsersAction) -> None:
    """The ``users`` command and its arguments."""
    us = sub.add_parser("users", help="SCRAM users (kafka-configs --entity-type users)")
    usub = us.add_subparsers(dest="action", required=True)
    mechanisms = sorted(MECHANISMS)
    ua = usub.add_parser("add", help="create a user or set its password")
    _connection(ua)
    ua.add_argument("user")
    ua.add_argument("--mechanism", action="append", choices=mechanisms,
                    help="SCRAM mechanism (repeatable; default SCRAM-SHA-512)")
    ua.add_argument("--iterations", type=_positive("--iterations"), default=MIN_ITERATIONS,
                    help=f"PBKDF2 iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} "
                         f"(default {MIN_ITERATIONS})")
    ua.add_argument("--password-file", metavar="FILE",
                    help="read the password from FILE (its first line) instead of a prompt")
    ur = usub.add_parser("remove", help="delete a user's credentials")
    _connection(ur)
    ur.add_argument("user")
    ur.add_argument("--mechanism", action="append", choices=mechanisms,
                    help="only this mechanism's credential (repeatable; default all)")
    ul = usub.add_parser("list", help="users, their mechanisms and iterations (never keys)")
    _connection(ul)
    ul.add_argument("--user", action="append", help="user to list (repeatable; default all)")


def _add_configs(sub: argparse._SubParsersAction) -> None:
    """The ``configs`` command and its arguments."""
    cf = sub.add_parser("configs", help="topic and broker configs (kafka-configs)")
    cfsub = cf.add_subparsers(dest="action", required=True)

    cfd = cfsub.add_parser("describe", help="every key with its value, source and synonyms")
    _config_resource_args(cfd)
    cfd.add_argument("--key", action="append", help="only this key (repeatable)")
    cfd.add_argument("--synonyms", action="store_true",
                     help="also list each key's synonyms, most specific first")
    cfd.add_argument("--docs", action="store_true", help="also print each key's documentation")
    cfa = cfsub.add_parser("alter", help="set, delete, append to or subtract from keys")
    _config_resource_args(cfa)
    cfa.add_argument("--set", action="append", type=_key_value("--set"), default=[],
                     metavar="KEY=VALUE", help="set a key (repeatable)")
    cfa.add_argument("--delete", action="append", default=[], metavar="KEY",
                     help="remove a key: back to its default (repeatable)")
    cfa.add_argument("--append", action="append", type=_key_value("--append"), default=[],
                     metavar="KEY=ITEM", help="add an item to a list key (repeatable)")
    cfa.add_argument("--subtract", action="append", type=_key_value("--subtract"), default=[],
                     metavar="KEY=ITEM", help="remove an item from a list key (repeatable)")
    cfa.add_argument("--validate-only", action="store_true",
                     help="check the change on the broker without applying it")


def _add_quorum(sub: argparse._SubParsersAction) -> None:
    """The ``quorum`` command and its arguments."""
    qu = sub.add_parser("quorum", help="the metadata quorum (kafka-metadata-quorum)")
    qsub = qu.add_subparsers(dest="action", required=True)

    qd = qsub.add_parser("describe", help="leader, epoch, high watermark, voters and "
                         "observers with their lag")
    _quorum_connection(qd)
    qd.add_argument("--json", action="store_true", help="print the answer as JSON")
    qr = qsub.add_parser("reassign", help="move the quorum's voters (one member at a time)")
    _quorum_connection(qr)
    qg = qr.add_mutually_exclusive_group(required=True)
    qg.add_argument("--voters", metavar="ID,ID,...", help="the voters wanted, e.g. 4,5,6")
    qg.add_argument("--cancel", action="store_true",
                    help="stop a running reassignment where it is")
    qr.add_argument("--wait", action="store_true",
                    help="with --voters: return once the voters are exactly those")

def _add_elect_leaders(sub: argparse._SubParsersAction) -> None:
    """The ``elect-leaders`` command and its arguments."""
    el = sub.add_parser("elect-leaders", help="move leadership to preferred replicas, or "
                        "give leaderless partitions a leader (kafka-leader-election)")
    _connection(el)
    el.add_argument("--election-type", default="preferred", type=str.lower,
                    choices=["preferred", "unclean"],
                    help="preferred (default): the first replica leads where it is in sync; "
                    "unclean: a partition without a live leader gets a live replica, even "
                    "one outside the ISR (committed messages may be lost)")
    which = el.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="with --partition: one partition")
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of every topic")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='{"partitions":[{"topic":T,"partition":P}]}')
    el.add_argument("--partition", type=int, help="partition of --topic")


def _add_delete_records(sub: argparse._SubParsersAction) -> None:
    """The ``delete-records`` command and its arguments."""
    dr = sub.add_parser("delete-records", help="move partitions' log start offsets forward "
                        "(kafka-delete-records)")
    dr.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    _command_config(dr)
    dr.add_argument("--offset-json-file", required=True, metavar="FILE",
                    help='{"partitions":[{"topic":T,"partition":P,"offset":O}],"version":1} '
                         "(offset -1: the high watermark)")


def _add_groups(sub: argparse._SubParsersAction) -> None:
    """The ``groups`` command and its arguments."""
    groups = sub.add_parser("groups", help="consumer groups, Sluice's and Kafka's "
                            "(kafka-consumer-groups)")
    gsub = groups.add_subparsers(dest="action", required=True)
    gl = gsub.add_parser("list", help="every group (asked of every broker), with kind, state and "
                         "size")
    gl.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    _command_config(gl)
    gd = gsub.add_parser("describe", help="members, assignments, offsets and lag")
    gd.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    _command_config(gd)
    gd.add_argument("--group", action="append", help="group to describe (repeatable; "
                    "default all)")
    gx = gsub.add_parser("delete", help="delete groups without members, with their offsets")
    gx.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    _command_config(gx)
    gx.add_argument("--group", action="append", required=True,
                    help="group to delete (repeatable)")
    gr = gsub.add_parser("reset-offsets", help="move a group's committed offsets (a dry run "
                         "printing the plan unless --execute); the group must have no members")
    gr.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    _command_config(gr)
    gr.add_argument("--group", required=True)
    gr.add_argument("--topic", action="append", required=True, metavar="T[:P,...]",
                    help="a topic (every partition) or some of its partitions (repeatable)")
    to = gr.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the high watermark")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset plus N (negative: back)")
    to.add_argument("--to-datetime", metavar="ISO",
                    help="the first message at or after this time (no zone: UTC)")
    gr.add_argument("--execute", action="store_true",
                    help="write the new offsets (default: print the plan only)")


def _add_acls(sub: argparse._SubParsersAction) -> None:
    """The ``acls`` command and its arguments."""
    acls = sub.add_parser("acls", help="access control lists (kafka-acls)")
    asub = acls.add_subparsers(dest="action", required=True)
    for action, text in (("add", "add ACLs: each principal x operation x resource"),
                         ("list", "list the ACLs that match"),
                         ("remove", "remove the ACLs that match")):
        a = asub.add_parser(action, help=text)
        _connection(a)
        if action == "add":
            a.add_argument("--allow-principal", action="append", default=[], metavar="P",
                           help="e.g. User:alice (repeatable)")
            a.add_argument("--deny-principal", action="append", default=[], metavar="P")
            a.add_argument("--allow-host", action="append", default=[], metavar="IP",
                           help="hosts the allow ACLs apply to (default *)")
            a.add_argument("--deny-host", action="append", default=[], metavar="IP",
                           help="hosts the deny ACLs apply to (default *)")
        else:
            a.add_argument("--principal", action="append", default=[], metavar="P",
                           help="only ACLs of this principal (repeatable; default any)")
        a.add_argument("--operation", action="append", default=[], type=_acl_operation,
                       metavar="OP", help="Read, Write, Create, Delete, Alter, Describe, "
                       "ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All "
                       "(repeatable; add defaults to All, list/remove to any)")
        a.add_argument("--topic", action="append", default=[], metavar="T",
                       help="a topic name, a prefix, or * (repeatable)")
        a.add_argument("--group", action="append", default=[], metavar="G")
        a.add_argument("--cluster", action="store_true", help="the cluster resource")
        a.add_argument("--resource-pattern-type", type=_pattern_type,
                       default=PatternType.LITERAL if action == "add" else None,
                       help="literal or prefixed (add; default literal); any, match, literal "
                       "or prefixed (list/remove; default any for list, literal for remove)")


def _add_consume(sub: argparse._SubParsersAction) -> None:
    """The ``consume`` command and its arguments."""
    co = sub.add_parser("consume", help="a console consumer group: print messages "
                        "(kafka-console-consumer)")
    co.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    co.add_argument("--consumer.config", "--command-config", dest="command_config",
                    metavar="FILE", help="a properties file of consumer config keys, the "
                    "security keys included (--consumer-property wins over it)")
    co.add_argument("--topic", required=True)
    co.add_argument("--group", required=True)
    co.add_argument("--members", type=_positive("--members"), default=1,
                    help="group members to run in this process (default 1)")
    co.add_argument("--from-beginning", action="store_true",
                    help="without a committed offset, start at the earliest message")
    co.add_argument("--max-messages", type=_positive("--max-messages"),
                    help="stop after this many messages in total")
    co.add_argument("--session-timeout-ms", type=_positive("--session-timeout-ms"),
                    default=10000)
    co.add_argument("--quiet", action="store_true", help="do not print the messages")
    co.add_argument("--consumer-property", type=_key_value("--consumer-property"),
                    action="append", default=[], metavar="KEY=VALUE",
                    help="a consumer config key (repeatable), e.g. default.api.timeout.ms=5000: "
                    "how long an unreachable cluster or a missing topic may last before the "
                    "command gives up with exit code 1 (default 60000)")


def _add_produce(sub: argparse._SubParsersAction) -> None:
    """The ``produce`` command and its arguments."""
    pr = sub.add_parser("produce", help="a console producer: each line of standard input is "
                        "one message (kafka-console-producer)")
    pr.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    pr.add_argument("--producer.config", "--command-config", dest="command_config",
                    metavar="FILE", help="a properties file of producer config keys, the "
                    "security keys included (--producer-property and --acks win over it)")
    pr.add_argument("--topic", required=True)
    pr.add_argument("--key-separator", metavar="SEP",
                    help="each line is KEY SEP VALUE, split at the first SEP (a line without "
                    "it stops the command, unsent); without it, lines are values with no key")
    pr.add_argument("--acks", choices=("all", "-1", "0", "1"),
                    help="acknowledgements each request waits for (default: the producer's, all)")
    pr.add_argument("--producer-property", type=_key_value("--producer-property"),
                    action="append", default=[], metavar="KEY=VALUE",
                    help="a producer config key (repeatable), e.g. linger.ms=5")


def _add_zookeeper(sub: argparse._SubParsersAction) -> None:
    """The ``zookeeper`` command and its arguments."""
    zk = sub.add_parser("zookeeper", help="the cluster's znodes (ACLs)")
    zsub = zk.add_subparsers(dest="action", required=True)
    zs = zsub.add_parser("secure", help="give every znode the ACL of zookeeper.set.acl=true "
                         "(Kafka's zookeeper-security-migration)")
    zs.add_argument("--zookeeper", required=True,
                    help="ZooKeeper connect string with the cluster's chroot, e.g. "
                    "127.0.0.1:2181/sluice")
    zs.add_argument("--auth-file", required=True, metavar="FILE",
                    help="the brokers' zookeeper.auth.file (username:password)")
    zs.add_argument("--auth-mechanism", default=SASL_DIGEST_MD5, metavar="MECHANISM",
                    help="the brokers' zookeeper.auth.mechanism: DIGEST-MD5 (SASL, the "
                    "default) or digest")
    zs.add_argument("--unsecure", action="store_true",
                    help="open every znode to all again (world:anyone:cdrwa)")
    zs.add_argument("--dry-run", action="store_true",
                    help="list the nodes whose ACL would change; change nothing")


def _add_secret(sub: argparse._SubParsersAction) -> None:
    """The ``secret`` command and its arguments."""
    se = sub.add_parser("secret", help="the cluster secret brokers authenticate each other with")
    ssub = se.add_subparsers(dest="action", required=True)
    sc = ssub.add_parser("create", help="write a new random cluster secret to FILE (mode 0600; "
                         "an existing file is never overwritten)")
    sc.add_argument("file", help="where to write it; then cluster.secret.file=FILE on every "
                    "broker")


def _add_certs(sub: argparse._SubParsersAction) -> None:
    """The ``certs`` command and its arguments."""
    ce = sub.add_parser("certs", help="development TLS certificates")
    cesub = ce.add_subparsers(dest="action", required=True)
    cc = cesub.add_parser("create-dev", help="FOR DEVELOPMENT ONLY: a new CA and a broker "
                          "certificate it signs (ca.pem, ca.key, broker.pem, broker.key; keys "
                          "mode 0600; existing files are never overwritten)")
    cc.add_argument("--out", required=True, metavar="DIR", help="the directory to write to")
    cc.add_argument("--host", action="append", required=True,
                    help="a name or IP address clients connect to (repeatable)")


def _add_metrics_password(sub: argparse._SubParsersAction) -> None:
    """The ``metrics-password`` command and its arguments."""
    pw = sub.add_parser("metrics-password", help="a line for metrics.basic.auth.file "
                        "(user:<salted hash>)")
    pw.add_argument("user", help="the user name the scraper sends")
    pw.add_argument("--password-stdin", action="store_true",
                    help="read the password from stdin (first line) instead of generating "
                    "a random one")
    pw.add_argument("--iterations", type=_positive("--iterations"), default=None,
                    help="PBKDF2 iterations (default 100000)")


def _add_loadtest(sub: argparse._SubParsersAction) -> None:
    """The ``loadtest`` command and its arguments."""
    lt = sub.add_parser("loadtest", help="run many consumers in several processes and report "
                        "join times, rebalances, heartbeats, expirations and each broker's "
                        "coordinator load")
    lt.add_argument("--bootstrap-server", required=True, help="HOST:PORT[,HOST:PORT...]")
    _command_config(lt)
    lt.add_argument("--topic", required=True, help="topic to consume (created if missing)")
    lt.add_argument("--partitions", type=_positive("--partitions"), default=12,
                    help="partitions when the topic is created (default 12)")
    lt.add_argument("--replication-factor", type=_positive("--replication-factor"), default=1)
    lt.add_argument("--consumers", type=_positive("--consumers"), required=True)
    lt.add_argument("--processes", type=_positive("--processes"), default=2)
    lt.add_argument("--groups", type=_positive("--groups"), default=1)
    lt.add_argument("--group-prefix", default="loadtest")
    lt.add_argument("--session-timeout-ms", type=_positive("--session-timeout-ms"),
                    default=30000)
    lt.add_argument("--fetch-max-wait-ms", type=int, default=500,
                    help="each consumer's fetch.max.wait.ms (default 500): the load test's "
                    "topic stays empty, so each consumer sends a Fetch this often")
    lt.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    lt.add_argument("--ramp", type=float, default=0.0,
                    help="seconds over which each process starts its consumers (default 0)")
    lt.add_argument("--kill-share", type=float, default=0.0,
                    help="share of consumers to kill abruptly (0..1)")
    lt.add_argument("--kill-at", type=float, default=0.0, help="seconds after start")
    lt.add_argument("--pause-share", type=float, default=0.0,
                    help="share of worker processes to SIGSTOP (0..1; at least one)")
    lt.add_argument("--pause-at", type=float, default=0.0, help="seconds after start")
    lt.add_argument("--pause-for", type=float, default=0.0, help="seconds paused")
    lt.add_argument("--metrics-url", action="append", default=[], metavar="ID=URL",
                    help="a broker's /metrics, e.g. 1=http://127.0.0.1:9404/metrics "
                    "(repeatable; every one given is scraped)")
    lt.add_argument("--scrape-interval", type=float, default=5.0)
    lt.add_argument("--out", default="loadtest-result", help="directory for loadtest.json "
                    "and loadtest.png")
    lt.add_argument("--quiet", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    """The ``sluice`` parser: one ``_add_*`` builder per command, called in the order the
    commands are listed in ``--help``."""
    p = argparse.ArgumentParser(prog="sluice", description="Administer a Sluice cluster.")
    sub = p.add_subparsers(dest="area", required=True)

    _add_topics(sub)
    _add_cluster(sub)
    _add_reassign(sub)
    _add_users(sub)
    _add_configs(sub)
    _add_quorum(sub)
    _add_elect_leaders(sub)
    _add_delete_records(sub)
    _add_groups(sub)
    _add_acls(sub)
    _add_consume(sub)
    _add_produce(sub)
    _add_zookeeper(sub)
    _add_secret(sub)
    _add_certs(sub)
    _add_metrics_password(sub)
    _add_loadtest(sub)
    return p


def _acl_operation(raw: str) -> AclOperation:
    key = raw.replace("-", "").replace("_", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in (AclOperation.UNKNOWN,
                                                                    AclOperation.ANY):
            return op
    raise argparse.ArgumentTypeError(f"unknown operation {raw!r}")


def _pattern_type(raw: str) -> PatternType:
    try:
        pt = PatternType[raw.upper()]
    except KeyError:
        pt = PatternType.UNKNOWN
    if pt is PatternType.UNKNOWN:
        raise argparse.ArgumentTypeError(f"unknown resource pattern type {raw!r}")
    return pt


def _acl_resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, t) for t in args.topic]
    resources += [(ResourceType.GROUP, g) for g in args.group]
    if args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def _acl_filters(args: argparse.Namespace) -> list[AclFilter]:
    """list/remove: one filter per resource x principal x operation given (any, if none)."""
    pattern = args.resource_pattern_type
    if pattern is None:
        pattern = PatternType.ANY if args.action == "list" else PatternType.LITERAL
    resources: list[tuple[ResourceType, str | None]] = list(_acl_resources(args)) or \
        [(ResourceType.ANY, None)]
    principals: list[str | None] = list(args.principal) or [None]
    ops = list(args.operation) or [AclOperation.ANY]
    return [AclFilter(rt, pattern, name, p, None, op, AclPermission.ANY)
            for rt, name in resources for p in principals for op in ops]


def _acl_add_bindings(args: argparse.Namespace) -> list[AclBinding]:
    resources = _acl_resources(args)
    if not resources:
        raise ValueError("name a resource: --topic, --group or --cluster")
    if not (args.allow_principal or args.deny_principal):
        raise ValueError("name a principal: --allow-principal or --deny-principal")
    if args.resource_pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError("acls add takes --resource-pattern-type literal or prefixed")
    ops = list(args.operation) or [AclOperation.ALL]
    out = []
    for perm, principals, hosts in (
            (AclPermission.ALLOW, args.allow_principal, args.allow_host or ["*"]),
            (AclPermission.DENY, args.deny_principal, args.deny_host or ["*"])):
        for rt, name in resources:
            for p in principals:
                for host in hosts:
                    for op in ops:
                        b = AclBinding(ResourcePattern(rt, args.resource_pattern_type, name),
                                       AccessEntry(p, host, op, perm))
                        try:
                            b.validate()
                        except InvalidAcl as e:
                            raise ValueError(str(e)) from None
                        out.append(b)
    return out


def _print_acls(bindings: Sequence[AclBinding], out: Any) -> None:
    """kafka-acls' listing: one block per resource pattern."""
    by_pattern: dict[ResourcePattern, list[AccessEntry]] = {}
    for b in bindings:
        by_pattern.setdefault(b.pattern, []).append(b.entry)
    for pattern in sorted(by_pattern, key=str):
        print(f"Current ACLs for resource `ResourcePattern(resourceType="
              f"{pattern.resource_type.name}, name={pattern.name}, patternType="
              f"{pattern.pattern_type.name})`:", file=out)
        for e in sorted(by_pattern[pattern], key=lambda e: (e.principal, e.host, e.operation)):
            print(f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
                  f"permissionType={e.permission.name})", file=out)
        print("", file=out)


def run_acls(args: argparse.Namespace, admin: AdminClient, out: Any = sys.stdout) -> None:
    if args.action == "add":
        bindings = _acl_add_bindings(args)
        admin.create_acls(bindings)
        print(f"Adding ACLs: {len(bindings)}", file=out)
        _print_acls(bindings, out)
        return
    filters = _acl_filters(args)
    if args.action == "list":
        found: dict[AclBinding, None] = {}  # in order, once each
        for f in filters:
            for b in admin.describe_acls(f):
                found[b] = None
        _print_acls(list(found), out)
        return
    removed = [b for group in admin.delete_acls(filters) for b in group]
    print(f"Removed ACLs: {len(removed)}", file=out)
    _print_acls(removed, out)


def _metrics_urls(items: Sequence[str]) -> dict[int, str]:
    urls = {}
    for item in items:
        key, sep, url = item.partition("=")
        if not sep or not key.strip().isdigit() or not url.startswith("http"):
            raise ValueError(f"--metrics-url expects BROKER_ID=http://HOST:PORT/metrics, "
                             f"got {item!r}")
        urls[int(key)] = url
    return urls


def run_loadtest(args: argparse.Namespace, out=sys.stdout) -> None:
    from sluice_tools.loadtest.driver import LoadTestConfig, run

    cfg = LoadTestConfig(
        bootstrap_servers=args.bootstrap_server, topic=args.topic, consumers=args.consumers,
        processes=args.processes, groups=args.groups, partitions=args.partitions,
        replication_factor=args.replication_factor, session_timeout_ms=args.session_timeout_ms,
        fetch_max_wait_ms=args.fetch_max_wait_ms, duration_s=args.duration,
        kill_share=args.kill_share, kill_at_s=args.kill_at,
        pause_share=args.pause_share, pause_at_s=args.pause_at, pause_for_s=args.pause_for,
        group_prefix=args.group_prefix, ramp_s=args.ramp,
        metrics_urls=_metrics_urls(args.metrics_url), scrape_interval_s=args.scrape_interval,
        out_dir=Path(args.out), progress=not args.quiet, command_config=args.command_config)
    _security(args)  # a bad file is bad usage, before any worker starts
    result = run(cfg)
    for line in loadtest_summary(result, args.consumers, Path(args.out)):
        print(line, file=out)


def loadtest_summary(result: dict, consumers: int, out_dir: Path) -> list[str]:
    """The lines ``sluice loadtest`` prints at the end: every figure rounded, with its unit
    (the JSON result keeps the full values)."""
    def sec(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f} s"

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1000:.1f} ms"

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}%"

    def count(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"

    from sluice_tools.loadtest.brokers import shards_label

    def mib(v: float | None) -> str:
        return "-" if v is None else f"{v / 2**20:.0f} MiB"

    join = result["join_time_s"]
    reb = result["rebalances"]["duration_s"]
    per_group = result["rebalances"].get("per_group") or {}
    lines = [
        f"consumers joined: {result['consumers_joined']}/{consumers}  "
        f"join time p50 {sec(join['p50'])}  p99 {sec(join['p99'])}  max "
        f"{sec(join.get('max'))}",
        f"rebalances seen by members: {reb['count']}  p50 {sec(reb['p50'])}  "
        f"max {sec(reb['max'])}",
        f"rebalances per group: p50 {count(per_group.get('p50'))}  "
        f"p99 {count(per_group.get('p99'))}  max {count(per_group.get('max'))}",
        f"memberships lost: {result['memberships_lost']}  false expirations: "
        f"{result['false_expirations']}"]
    coord = result.get("coordination")
    if coord:
        rtt = coord["ping_round_trip_s"] or {}
        lines.append(
            f"coordination: expirations {count(coord['expirations'])}  leaves "
            f"{count(coord['leaves'])}  failed pings {count(coord['failed_pings'])}  "
            f"ping p50 {ms(rtt.get('p50'))}  p99 {ms(rtt.get('p99'))}")
    for bid, b in sorted((result.get("brokers") or {}).items(), key=lambda kv: int(kv[0])):
        hot = b["cpu_hot_longest_s"]
        lines.append(
            f"broker {bid} ({shards_label(b)}): cpu mean {pct(b['cpu_percent_mean'])}  "
            f"max {pct(b['cpu_percent_max'])}  above 90% for {hot:.0f} s at most"
            f"{' (over 10 s)' if b['cpu_hot_over_limit'] else ''}  rss max "
            f"{mib(b['rss_bytes_max'])}  members max {count(b['members_max'])}")
    workers = result.get("workers") or {}
    if workers:
        lines.append(
            f"workers: {workers['workers']}  rss max {mib(workers['rss_bytes_max'])} "
            f"({count((workers['rss_bytes_per_consumer'] or 0) / 1024)} KiB per consumer)  "
            f"timers per consumer {workers['timers_per_consumer']}  reactor late max "
            f"{sec(workers['reactor_late_s_max'])}")
    lines.append(f"result: {out_dir / 'loadtest.json'}")
    if result.get("plot"):
        lines.append(f"plot: {result['plot']}")
    return lines


def run_groups(args: argparse.Namespace, out=sys.stdout) -> None:
    from sluice_tools import group_admin

    security = _security(args)
    if args.action == "list":
        rows = group_admin.list_groups(args.bootstrap_server, security=security)
        print(f"{'GROUP':<30} {'KIND':<7} {'STATE':<20} MEMBERS", file=out)
        for r in rows:
            print(f"{r.group_id:<30} {r.kind:<7} {r.state:<20} {r.members}", file=out)
        return
    if args.action == "delete":
        _delete_groups(group_admin.delete_groups(args.bootstrap_server, args.group,
                                                 security=security), out)
        return
    if args.action == "reset-offsets":
        _reset_offsets(args, security, out)
        return

    def show(v: object) -> str:
        return "-" if v is None else str(v)

    for g in group_admin.describe_groups(args.bootstrap_server, args.group, security=security):
        if isinstance(g, group_admin.KafkaGroupDescription):
            print(f"\nGroup: {g.group_id}\tKind: kafka\tState: {g.state}\t"
                  f"Protocol: {g.protocol_type or '-'}/{g.protocol or '-'}\t"
                  f"Coordinator: {g.coordinator_id}\tMembers: {len(g.members)}", file=out)
            header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                      "CONSUMER-ID", "HOST", "CLIENT-ID")
        else:
            print(f"\nGroup: {g.group_id}\tKind: sluice\tState: {g.state}\t"
                  f"Generation: {g.generation_id}\tCoordinator: {g.coordinator_id}\t"
                  f"Members: {len(g.members)}", file=out)
            header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER",
                      "HOST")
        print("\t".join(header), file=out)
        for p in g.partitions:
            cells = [p.topic, p.partition, p.current_offset, p.log_end_offset, p.lag, p.owner,
                     p.host]
            if isinstance(g, group_admin.KafkaGroupDescription):
                cells.append(p.consumer_id)
            print("\t".join(show(v) for v in cells), file=out)
        if isinstance(g, group_admin.KafkaGroupDescription):
            # Members without partitions (or of another protocol type) show here too.
            for m in g.members:
                parts = ("-" if m.partitions is None else
                         ",".join(f"{t}-{p}" for t, p in sorted(m.partitions)) or "none")
                print(f"member {m.member_id}\tclient {m.client_id}\thost {m.host}\t"
                      f"partitions {parts}", file=out)


def _delete_groups(results: list[tuple[str, int]], out) -> None:
    failed = []
    for group, code in results:
        if code == 0:
            print(f"Deleted group {group}", file=out)
        else:
            failed.append(f"{group}: {error_name(code)}")
    if failed:
        raise AdminError(None, "not deleted: " + "; ".join(failed))


def _reset_offsets(args: argparse.Namespace, security: Any, out) -> None:
    from sluice_tools import group_admin

    spec = group_admin.ResetSpec(to_earliest=args.to_earliest, to_latest=args.to_latest,
                                 to_offset=args.to_offset, shift_by=args.shift_by,
                                 to_datetime=args.to_datetime)
    if args.to_datetime is not None:
        group_admin.parse_datetime_ms(args.to_datetime)  # a bad date is bad usage, up front
    plan = group_admin.reset_offsets(
        args.bootstrap_server, args.group, group_admin.parse_topic_partitions(args.topic),
        spec, execute=args.execute, security=security)
    print(f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'CURRENT-OFFSET':<15} NEW-OFFSET",
          file=out)
    for r in plan:
        current = "-" if r.current_offset is None else str(r.current_offset)
        print(f"{args.group:<30} {r.topic:<30} {r.partition:<10} {current:<15} {r.new_offset}",
              file=out)
    if not args.execute:
        print("Dry run: nothing written (add --execute to write these offsets)", file=out)


def _command_properties(args: argparse.Namespace) -> dict[str, str]:
    """The ``--command-config`` file's keys (none without the flag)."""
    path = getattr(args, "command_config", None)
    if path is None:
        return {}
    if getattr(args, "zookeeper", None):
        raise ValueError("--command-config goes with --bootstrap-server (it says how to reach "
                         "the brokers), not --zookeeper")
    return read_properties(Path(path))


def _security(args: argparse.Namespace) -> ClientSecurity | None:
    """The ``--command-config`` file as client security settings (None without the flag);
    a key that is not a security key is bad usage."""
    props = _command_properties(args)
    if not props:
        return None
    try:
        return ClientSecurity.from_mapping(props)
    except ConfigError as e:
        raise ConfigError(f"{args.command_config}: {e}", e.key) from None


def _client(args: argparse.Namespace) -> AdminClient:
    """The admin client a command's arguments name. Commands that reach the cluster through
    the brokers only have no ZooKeeper flags: their defaults stand in."""
    zookeeper = getattr(args, "zookeeper", None)
    auth_file = getattr(args, "zookeeper_auth_file", None)
    if auth_file and not zookeeper:
        raise ValueError("--zookeeper-auth-file goes with --zookeeper")
    return AdminClient(bootstrap_servers=args.bootstrap_server, zookeeper=zookeeper,
                       zookeeper_auth_file=auth_file, security=_security(args),
                       zookeeper_auth_mechanism=getattr(args, "zookeeper_auth_mechanism",
                                                        SASL_DIGEST_MD5))


def _read_json_file(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None


def _names(tps: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


def run_reassign(args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
    try:
        proposal = topic_admin.parse_reassignment(_read_json_file(args.reassignment_json_file))
    except topic_admin.TopicAdminError as e:
        raise ValueError(f"{args.reassignment_json_file}: {e}") from None
    if args.execute:
        current = admin.reassign_execute(proposal)
        print("Current partition replica assignment\n", file=out)
        print(paths.PartitionReassignment(current).to_bytes().decode(), file=out)
        print("\nSave this to use as the --reassignment-json-file option during rollback",
              file=out)
        print(f"Successfully started partition reassignment for {_names(list(proposal))}",
              file=out)
    elif args.verify:
        print("Status of partition reassignment:", file=out)
        for (t, p), status in sorted(admin.reassign_verify(proposal).items()):
            if status == topic_admin.REASSIGNMENT_COMPLETE:
                print(f"Reassignment of partition {t}-{p} is complete.", file=out)
            elif status == topic_admin.REASSIGNMENT_IN_PROGRESS:
                print(f"Reassignment of partition {t}-{p} is still in progress.", file=out)
            else:
                print(f"Reassignment of partition {t}-{p} failed: its replicas are not "
                      f"{proposal[(t, p)]} (rejected or cancelled; see the controller's log).",
                      file=out)
    else:
        cancelled = admin.reassign_cancel(list(proposal))
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {_names(cancelled)}",
                  file=out)
        else:
            print("None of the specified partition reassignments are active.", file=out)


def run_elect_leaders(args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
    tps: list[tuple[str, int]] | None
    if args.all_topic_partitions:
        if args.partition is not None:
            raise ValueError("--partition goes with --topic, not --all-topic-partitions")
        tps = None
    elif args.topic is not None:
        if args.partition is None:
            raise ValueError("--topic needs --partition")
        tps = [(args.topic, args.partition)]
    else:
        try:
            data = json.loads(_read_json_file(args.path_to_json_file) or b"{}")
            tps = [(str(e["topic"]), int(e["partition"])) for e in data["partitions"]]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{args.path_to_json_file}: expected "
                             '{"partitions":[{"topic":T,"partition":P}]} '
                             f"({e})") from None
    unclean = args.election_type == "unclean"
    kind = "UNCLEAN" if unclean else "PREFERRED"
    results = admin.elect_preferred_leaders(tps, unclean=unclean)
    elected = [tp for tp, r in results.items() if r == topic_admin.ELECTED]
    not_needed = [tp for tp, r in results.items() if r == topic_admin.ELECTION_NOT_NEEDED]
    failed = {tp: r for tp, r in results.items() if tp not in elected and tp not in not_needed}
    if elected:
        print(f"Successfully completed leader election ({kind}) for partitions "
              f"{_names(elected)}", file=out)
    if not_needed:
        print(f"Valid replica already elected for partitions {_names(not_needed)}", file=out)
    for (t, p), why in sorted(failed.items()):
        print(f"Error completing leader election ({kind}) for partition: {t}-{p}: {why}",
              file=out)
    if failed:
        raise AdminError(None, f"{len(failed)} partition(s) could not be elected")


def run_delete_records(args: argparse.Namespace, out=sys.stdout) -> None:
    """Kafka's kafka-delete-records: its file format and output lines."""
    try:
        data = json.loads(_read_json_file(args.offset_json_file) or b"{}")
        offsets = {}
        for e in data["partitions"]:
            tp = (str(e["topic"]), int(e["partition"]))
            if tp in offsets:
                raise ValueError(f"{tp[0]}-{tp[1]} is named twice")
            offsets[tp] = int(e["offset"])
        if not offsets:
            raise ValueError("no partitions are named")
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{args.offset_json_file}: expected "
                         '{"partitions":[{"topic":T,"partition":P,"offset":O}]} '
                         f"({e})") from None
    admin = AdminClient(bootstrap_servers=args.bootstrap_server, security=_security(args))
    results = admin.delete_records(offsets)
    print("Executing records delete operation", file=out)
    print("Records delete operation completed:", file=out)
    failed = 0
    for (t, p), (code, low) in sorted(results.items()):
        if code:
            failed += 1
            print(f"partition: {t}-{p}\terror: {error_name(code)}", file=out)
        else:
            print(f"partition: {t}-{p}\tlow_watermark: {low}", file=out)
    if failed:
        raise AdminError(None, f"{failed} partition(s) could not be deleted from")


def run_produce(args: argparse.Namespace, stdin: Any = None, err: Any = None) -> None:
    """``sluice produce``: standard input's lines to a topic (sluice_tools.console_producer);
    a bad key or value of the producer's config is bad usage (exit 2) before anything is read."""
    from consumer_client.producer_config import ProducerConfig
    from sluice_tools import console_producer

    config: dict[str, object] = {**_command_properties(args), **dict(args.producer_property),
                                 "bootstrap.servers": args.bootstrap_server}
    if args.acks is not None:
        config["acks"] = args.acks
    ProducerConfig.from_mapping(config)
    code = console_producer.run(topic=args.topic, config=config,
                                key_separator=args.key_separator,
                                stdin=stdin if stdin is not None else sys.stdin.buffer,
                                err=err if err is not None else sys.stderr)
    if code:
        raise _Stopped(code)  # what went wrong is already on standard error


def run_quorum(args: argparse.Namespace, out=sys.stdout) -> None:
    from sluice_tools import quorum_admin

    target = None
    if args.action == "reassign":
        if args.cancel and args.wait:
            raise ValueError("--wait goes with --voters, not --cancel")
        if not args.cancel:
            target = quorum_admin.parse_voters(args.voters)
    if args.timeout <= 0:
        raise ValueError(f"--timeout must be positive, got {args.timeout}")
    credential = None
    if args.secret_file:
        from broker_core.security.cluster_secret import ClusterCredential, ClusterSecretError

        try:
            credential = ClusterCredential.from_file(args.secret_file).login
        except ClusterSecretError as e:
            raise ValueError(str(e)) from None
    props = _command_properties(args)
    try:
        security = quorum_admin.quorum_security(props) if props else None
    except ConfigError as e:
        raise ConfigError(f"{args.command_config}: {e}", e.key) from None
    try:
        with quorum_admin.QuorumAdminClient(args.bootstrap_server, timeout_s=args.timeout,
                                            credential=credential,
                                            security=security) as client:
            if args.action == "describe":
                d = client.describe()
                if args.json:
                    print(json.dumps(quorum_admin.describe_as_dict(d), indent=2), file=out)
                else:
                    print(quorum_admin.format_describe(d), file=out)
                return
            resp = client.reassign(target)
            if target is None:
                print(f"Cancelled the quorum reassignment (leader {resp.leader_id}, "
                      f"epoch {resp.leader_epoch}): the voters stay as they are now.", file=out)
                return
            voters = ",".join(map(str, target))
            print(f"Accepted: the quorum moves to voters {voters} one member at a time "
                  f"(leader {resp.leader_id}, epoch {resp.leader_epoch}).", file=out)
            if args.wait:
                d = client.wait_for(target)
                print(f"Done: the voters are {voters} (leader {d.leader_id}, "
                      f"epoch {d.leader_epoch}).", file=out)
            else:
                print("Follow it with: sluice quorum describe", file=out)
    except quorum_admin.QuorumAdminError as e:
        raise AdminError(None if e.code is None else int(e.code), str(e)) from None


def run_zookeeper(args: argparse.Namespace, out=sys.stdout) -> None:
    admin = AdminClient(zookeeper=args.zookeeper, zookeeper_auth_file=args.auth_file,
                        zookeeper_auth_mechanism=args.auth_mechanism)
    changes = admin.secure_zookeeper(unsecure=args.unsecure, dry_run=args.dry_run)
    verb = "would change" if args.dry_run else "changed"
    for change in changes:
        print(f"{verb} {change}", file=out)
    print(f"{len(changes)} node(s) {verb}" + ("" if changes else " (all as wanted already)"),
          file=out)


def run_secret(args: argparse.Namespace, out=sys.stdout) -> None:
    """``sluice secret create FILE``: a new cluster secret, never over an existing file."""
    from broker_core.security import cluster_secret

    try:
        cluster_secret.generate(args.file)
    except FileExistsError:
        raise AdminError(None, f"{args.file} exists; a cluster secret is never overwritten "
                         "(every broker of the cluster must keep using the same one)") from None
    print(f"Wrote a new cluster secret to {args.file} (mode 0600). Give every broker of the "
          f"cluster a private copy and set cluster.secret.file to it.", file=out)


def run_certs(args: argparse.Namespace, out=sys.stdout) -> None:
    """``sluice certs create-dev``: a development CA and broker certificate."""
    from sluice_tools.dev_certs import create_dev_certs

    try:
        paths = create_dev_certs(args.out, args.host)
    except FileExistsError as e:
        raise AdminError(None, str(e)) from None
    print(f"Wrote a development CA ({paths.cafile}) and a certificate for "
          f"{', '.join(args.host)} ({paths.certfile}, key {paths.keyfile}). For development "
          f"only: ssl.certfile={paths.certfile} and ssl.keyfile={paths.keyfile} on the broker, "
          f"ssl.ca.location={paths.cafile} on clients.", file=out)


def run_metrics_password(args: argparse.Namespace, out=sys.stdout) -> None:
    """Print ``user:<hash>``; a generated password goes to stderr, once (it is not stored)."""
    import secrets

    from broker_core.security.basic_auth import DEFAULT_ITERATIONS, user_line

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise ValueError("no password on stdin")
    else:
        password = secrets.token_urlsafe(24)
    line = user_line(args.user, password, iterations=args.iterations or DEFAULT_ITERATIONS)
    if not args.password_stdin:  # shown only once the line is made (no password for nothing)
        print(f"password for {args.user}: {password}", file=sys.stderr)
    print(line, file=out)
def read_password(args: argparse.Namespace) -> str:
    """The new password: the first line of ``--password-file``, or typed twice at a prompt.
    Never an argument (it would show in ``ps`` and the shell's history)."""
    if args.password_file:
        text = Path(args.password_file).read_text(encoding="utf-8")
        password = text.splitlines()[0] if text else ""
    else:
        password = getpass.getpass(f"Password for {args.user}: ")
        if getpass.getpass("Again: ") != password:
            raise ValueError("the two passwords differ")
    if not password:
        raise ValueError("the password is empty")
    return password


def run_users(args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
    if args.action == "list":
        users = admin.describe_users(args.user)
        print(f"{'USER':<30} {'MECHANISM':<15} ITERATIONS", file=out)
        for u in users:
            for mechanism, iterations in u.credentials:
                print(f"{u.user:<30} {mechanism:<15} {iterations}", file=out)
        return
    if args.action == "remove":
        for m in admin.remove_user(args.user, args.mechanism):
            print(f'Removed the {m} credential of user "{args.user}".', file=out)
        return
    validate_user_name(args.user)  # before the password is asked for
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        raise ValueError(f"--iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    password = read_password(args)
    mechanisms = list(dict.fromkeys(args.mechanism or ["SCRAM-SHA-512"]))
    upsertions = []
    for m in mechanisms:
        salt = os.urandom(32)
        upsertions.append(user_admin.Upsertion(
            args.user, MECHANISM_CODES[m], args.iterations, salt,
            salted_password(m, password, salt, args.iterations)))
    admin.alter_users([], upsertions)
    for m in mechanisms:
        print(f'Set the {m} credential of user "{args.user}" ({args.iterations} iterations).',
              file=out)


def _config_resource(args: argparse.Namespace) -> tuple[int, str, str]:
    """(resource type, resource name, how to say it) of ``sluice configs``' flags."""
    if args.topic is not None:
        return int(ConfigResourceType.TOPIC), args.topic, f'topic "{args.topic}"'
    if args.broker is not None:
        return int(ConfigResourceType.BROKER), str(args.broker), f"broker {args.broker}"
    return int(ConfigResourceType.BROKER), "", "the cluster-wide broker defaults"


def run_configs(args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
    rtype, name, what = _config_resource(args)
    if args.action == "describe":
        print(f"Configs of {what}:", file=out)
        for c in admin.describe_configs(rtype, name, args.key, documentation=args.docs):
            value = "(sensitive)" if c.sensitive else ("" if c.value is None else c.value)
            flags = " read-only" if c.read_only else ""
            print(f"  {c.name}={value}\t{c.source}{flags}", file=out)
            if args.synonyms:
                for s_name, s_value, s_source in c.synonyms:
                    print(f"    {s_source}: {s_name}={'' if s_value is None else s_value}",
                          file=out)
            if args.docs and c.documentation:
                print(f"    {c.documentation}", file=out)
        return
    ops = ([(k, OpType.SET, v) for k, v in args.set]
           + [(k, OpType.DELETE, None) for k in args.delete]
           + [(k, OpType.APPEND, v) for k, v in args.append]
           + [(k, OpType.SUBTRACT, v) for k, v in args.subtract])
    if not ops:
        raise ValueError("give at least one --set, --delete, --append or --subtract")
    admin.alter_configs(rtype, name, ops, validate_only=args.validate_only)
    verb = "would be" if args.validate_only else "were"
    print(f"The configs of {what} {verb} changed ({len(ops)} change"
          f"{'' if len(ops) == 1 else 's'}).", file=out)


def run_consume(args: argparse.Namespace, out=sys.stdout) -> None:
    """``sluice consume``: a console consumer group until it stops."""
    from consumer_client.consumer_config import ConsumerConfig
    from sluice_tools import console_consumer

    properties = {**_command_properties(args), **dict(args.consumer_property)}
    # Checked before anything starts: a bad key or value is bad usage (exit 2).
    ConsumerConfig.from_mapping({"bootstrap.servers": args.bootstrap_server,
                                 "group.id": args.group, "topics": {args.topic: 1},
                                 **properties})
    code = console_consumer.run(
        bootstrap=args.bootstrap_server, topic=args.topic, group=args.group,
        members=args.members, from_beginning=args.from_beginning,
        max_messages=args.max_messages, quiet=args.quiet,
        session_timeout_ms=args.session_timeout_ms, out=out, properties=properties)
    if code == 1:
        raise AdminError(None, "the consumer group stopped with an error")
    if code:
        raise _Stopped(code)  # stopped by a signal, after leaving cleanly


def run_topics(args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
    """``sluice topics ...``: create, list, describe, delete, add partitions."""
    if args.action == "create":
        admin.create_topic(args.topic, args.partitions, args.replication_factor,
                           dict(args.config))
        print(f'Created topic "{args.topic}".', file=out)
    elif args.action == "list":
        for name in admin.list_topics():
            print(name, file=out)
    elif args.action == "describe":
        for t in admin.describe_topics(args.topic):
            rf = len(t.partitions[0].replicas) if t.partitions else 0
            configs = ",".join(f"{k}={v}" for k, v in sorted(t.config.items()))
            flag = "\tMarkedForDeletion: true" if t.marked_for_deletion else ""
            print(f"Topic: {t.name}\tPartitionCount: {len(t.partitions)}\t"
                  f"ReplicationFactor: {rf}\tConfigs: {configs}{flag}", file=out)
            for p in t.partitions:
                print(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: "
                      f"{p.leader if p.leader >= 0 else 'none'}\tEpoch: {p.leader_epoch}\t"
                      f"Replicas: {','.join(map(str, p.replicas))}\t"
                      f"Isr: {','.join(map(str, p.isr))}", file=out)
    elif args.action == "delete":
        admin.delete_topic(args.topic)
        print(f'Topic "{args.topic}" is marked for deletion.', file=out)
    elif args.action == "add-partitions":
        admin.add_partitions(args.topic, args.partitions)
        print(f'Topic "{args.topic}" now has {args.partitions} partitions.', file=out)


def run_cluster(args: argparse.Namespace, admin: AdminClient, out=sys.stdout) -> None:
    """``sluice cluster describe``: the controller, its epoch and the brokers."""
    c = admin.describe_cluster()
    print(f"Controller: {c.controller_id if c.controller_id is not None else 'none'}",
          file=out)
    epoch = c.controller_epoch if c.controller_epoch is not None else \
        "unknown (use --zookeeper)"
    print(f"ControllerEpoch: {epoch}", file=out)
    print(f"Brokers: {len(c.brokers)}", file=out)
    for b in c.brokers:
        rack = f"\tRack: {b.rack}" if b.rack else ""
        print(f"\tBroker: {b.id}\tAddress: {b.host}:{b.port}{rack}", file=out)


#: The commands that need no admin client: name -> handler(args, out).
_COMMANDS: dict[str, Callable[[argparse.Namespace, Any], None]] = {
    "zookeeper": run_zookeeper,
    "metrics-password": run_metrics_password,
    "secret": run_secret,
    "certs": run_certs,
    "quorum": run_quorum,
    "groups": run_groups,
    "delete-records": run_delete_records,
    "loadtest": run_loadtest,
    "produce": lambda args, out: run_produce(args),  # reads stdin, reports on stderr
    "consume": run_consume,
}

#: The commands run through the admin client their arguments name (:func:`_client`):
#: name -> handler(args, admin, out).
_ADMIN_COMMANDS: dict[str, Callable[[argparse.Namespace, AdminClient, Any], None]] = {
    "acls": run_acls,
    "reassign": run_reassign,
    "elect-leaders": run_elect_leaders,
    "users": run_users,
    "configs": run_configs,
    "topics": run_topics,
    "cluster": run_cluster,
}


def run(args: argparse.Namespace, out=sys.stdout) -> None:
    """Run the command ``args.area`` names (the parser admits only those of the tables above)."""
    handler = _COMMANDS.get(args.area)
    if handler is not None:
        handler(args, out)
    else:
        _ADMIN_COMMANDS[args.area](args, _client(args), out)


def _command_parser(parser: argparse.ArgumentParser,
                    argv: Sequence[str]) -> argparse.ArgumentParser:
    """The innermost (sub)command parser that ``argv``'s command words select."""
    for word in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and word in subs[0].choices:
            parser = subs[0].choices[word]
    return parser


def _close_flag_hint(parser: argparse.ArgumentParser, argv: Sequence[str]) -> str | None:
    """The selected command's usage and ``"unknown option --x; did you mean --y?"`` for the
    first ``--x`` in ``argv`` that the selected command has no option for (nor one it
    abbreviates) but one spelled closely, so that ``--bootstrap-servers`` is not reported as a
    missing ``--bootstrap-server`` (argparse checks required options before it reports
    unknown ones)."""
    command = _command_parser(parser, argv)
    known = [o for a in command._actions for o in a.option_strings if o.startswith("--")]
    for word in argv:
        flag = word.split("=", 1)[0]
        if not flag.startswith("--") or flag == "--":
            continue
        if any(k.startswith(flag) for k in known):
            continue
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
        if close:
            return (f"{command.format_usage()}{command.prog}: unknown option {flag}; "
                    f"did you mean {close[0]}?")
    return None


class _Stopped(Exception):
    """A command that a signal ended cleanly: exit with ``code`` (128 + the signal)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def main(argv: Sequence[str] | None = None) -> int:
    # kazoo logs every failed connection attempt through the logging module; a one-shot command
    # reports the outcome itself, as one line.
    logging.getLogger("kazoo").addHandler(logging.NullHandler())
    logging.getLogger("kazoo").propagate = False
    parser = build_parser()
    hint = _close_flag_hint(parser, sys.argv[1:] if argv is None else argv)
    if hint is not None:
        print(hint, file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        run(args, sys.stdout)  # looked up now, so a redirected stdout is honoured
    except _Stopped as e:
        return e.code
    except KeyboardInterrupt:
        # Ctrl-C in a command that does not handle it itself: a line, not a traceback.
        print("sluice: interrupted", file=sys.stderr)
        return 130
    except (AdminError, SaslAuthenticationError) as e:
        print(f"sluice: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"sluice: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"sluice: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
