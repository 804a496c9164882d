"""Broker and topic configuration, with Apache Kafka's key names, types, defaults and rules.

One table (`BROKER_DEFS`) describes every broker key; a second (`TOPIC_DEFS`) every topic key.
A topic key falls back to the broker keys whose `topic_key` names it, in table order (the
first key that has a value wins, as `log.retention.ms` > `log.retention.minutes` >
`log.retention.hours` in Kafka). Values are parsed and validated the way Kafka's `ConfigDef`
does it: surrounding whitespace trimmed, booleans case-insensitive, integers range-checked
by width, lists split on commas. Defaults follow Kafka 4.0 unless a doc says otherwise.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, Generic, TypeVar, cast, overload

log = logging.getLogger("oncelog.config")

LONG_MAX = 2**63 - 1
_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000


class ConfigType(IntEnum):
    """Value types, numbered as DescribeConfigs reports them (`configType`)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a value comes from, numbered as DescribeConfigs reports it."""

    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigError(ValueError):
    """A configuration value (or name) was refused; the broker answers INVALID_CONFIG."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        super().__init__(f"Invalid value {value!r} for configuration {key}: {reason}")
        self.key = key
        self.value = value
        self.reason = reason


@dataclass(frozen=True)
class Range:
    """Inclusive numeric bounds; either side may be open."""

    low: float | None = None
    high: float | None = None

    def check(self, value: Any) -> str | None:
        # `not (a <= b)` rather than `a > b` so that NaN is refused too.
        if (self.low is not None and not self.low <= value) or (
            self.high is not None and not value <= self.high
        ):
            return f"must be {self}"
        return None

    def __str__(self) -> str:
        if self.high is None:
            return f"at least {self.low}"
        if self.low is None:
            return f"at most {self.high}"
        return f"between {self.low} and {self.high}"


@dataclass(frozen=True)
class OneOf:
    """Allowed strings (case-sensitive, as Kafka); for a LIST, every element must be allowed."""

    choices: tuple[str, ...]

    def check(self, value: Any) -> str | None:
        for item in value if isinstance(value, list) else [value]:
            if item not in self.choices:
                return f"{item!r} is not one of {', '.join(self.choices)}"
        return None

    def __str__(self) -> str:
        return "one of " + ", ".join(self.choices)


Validator = Range | OneOf


@dataclass(frozen=True)
class ConfigDef:
    """One configuration key: its type, default (None: unset), rule and meaning.

    `topic_key` names the topic-level key this broker key supplies the default for, and
    `to_topic_unit` converts this key's unit into the topic key's (hours to ms, ...).
    """

    key: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    topic_key: str | None = None
    to_topic_unit: int = 1


@dataclass(frozen=True)
class ConfigSynonym:
    """One source of a broker setting, as DescribeConfigs lists its synonyms."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType
    doc: str
    synonyms: tuple[ConfigSynonym, ...]


T = ConfigType
_TIMESTAMP_TYPES = OneOf(("CreateTime", "LogAppendTime"))
_CLEANUP_POLICIES = OneOf(("compact", "delete"))
_COMPRESSION_TYPES = OneOf(("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"))

_FLUSH_MESSAGES_DOC = (
    "oncelog deviation: default 1 (Kafka: 9223372036854775807). Durability comes from fsync, "
    "not from replicas. With 1, an acks=-1 (all) produce is answered only after an fsync that "
    "covers its batch; appends waiting at the same time share one fsync (group commit). "
    "acks=0 and acks=1 are answered after the append without waiting. With "
    "9223372036854775807 no produce waits for a flush, as in Kafka: data reaches disk every "
    "log.flush.interval.ms if that is set, else every log.flush.scheduler.interval.ms, and at "
    "segment roll and clean shutdown. Any other value N keeps Kafka's meaning: the partition is "
    "flushed once N messages are unflushed, and no produce waits for it."
)


_CLIENT_AUTH = OneOf(("required", "requested", "none"))
_PEM_ONLY = "oncelog reads PEM only: set PEM (JKS and PKCS12 stores are not supported)."

# Security: listeners, TLS, SASL, authorization (Kafka's keys). The ssl.*, sasl.* and
# connections.max.reauth.ms keys may also be given per listener as
# listener.name.<listener>.<key> and, for the SASL ones, per mechanism as
# listener.name.<listener>.<mechanism>.<key> (BrokerConfig.listener_value).
SECURITY_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "listener.security.protocol.map",
        T.LIST,
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        "NAME:PROTOCOL pairs giving each listener name its security protocol.",
    ),
    ConfigDef(
        "inter.broker.listener.name",
        T.STRING,
        None,
        "The listener other brokers connect to (replication, transaction markers): its "
        "advertised address goes into the broker's registration in ZooKeeper, and this "
        "broker connects to the others' with that listener's security keys. Exclusive with "
        "security.inter.broker.protocol.",
    ),
    ConfigDef(
        "security.inter.broker.protocol",
        T.STRING,
        "PLAINTEXT",
        "The security protocol of the inter-broker listener, when "
        "inter.broker.listener.name is unset: the listener of that name is used.",
        OneOf(("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    ),
    ConfigDef(
        "sasl.enabled.mechanisms",
        T.LIST,
        ["GSSAPI"],
        "SASL mechanisms a SASL listener offers. oncelog supports PLAIN, SCRAM-SHA-256 and "
        "SCRAM-SHA-512 (not GSSAPI or OAUTHBEARER), so a SASL listener needs this key.",
    ),
    ConfigDef(
        "sasl.mechanism.inter.broker.protocol",
        T.STRING,
        "GSSAPI",
        "The SASL mechanism a broker uses to connect to others over a SASL inter-broker "
        "listener; it must be enabled there. The broker's credentials are the username and "
        "password of that mechanism's JAAS entry on the inter-broker listener.",
    ),
    ConfigDef(
        "sasl.jaas.config",
        T.PASSWORD,
        None,
        "A JAAS login module with options, e.g. org.apache.kafka.common.security.plain."
        'PlainLoginModule required username="admin" password="s" user_alice="a-s"; '
        "Usually given per listener and mechanism: listener.name.sasl_ssl.plain."
        "sasl.jaas.config. For PLAIN, user_<name> options are the accepted users; "
        "username and password are the broker's own credentials for inter-broker "
        "connections. oncelog reads the unprefixed key as a fallback for every listener and "
        "mechanism (Kafka reads a JAAS file there).",
    ),
    ConfigDef(
        "sasl.server.max.receive.size",
        T.INT,
        524_288,
        "Largest frame accepted from a client before it has authenticated; a larger one "
        "closes the connection.",
        Range(1),
    ),
    ConfigDef(
        "connections.max.reauth.ms",
        T.LONG,
        0,
        "When positive, a SASL session lasts this long: the client must re-authenticate "
        "on its connection (KIP-368) before sending anything else, or it is closed.",
        Range(0),
    ),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        T.INT,
        100,
        "How long a connection whose authentication failed stays open (answered, read no "
        "more) before it is closed, which slows down password guessing.",
        Range(0),
    ),
    ConfigDef(
        "ssl.keystore.type",
        T.STRING,
        "JKS",
        "Format of the key store. " + _PEM_ONLY,
    ),
    ConfigDef(
        "ssl.keystore.location",
        T.STRING,
        None,
        "PEM file with the private key and the certificate chain of the broker.",
    ),
    ConfigDef("ssl.keystore.password", T.PASSWORD, None, "Accepted; PEM stores need none."),
    ConfigDef(
        "ssl.key.password",
        T.PASSWORD,
        None,
        "Password of an encrypted private key.",
    ),
    ConfigDef(
        "ssl.keystore.key",
        T.PASSWORD,
        None,
        "The private key in PEM, inline (instead of ssl.keystore.location).",
    ),
    ConfigDef(
        "ssl.keystore.certificate.chain",
        T.PASSWORD,
        None,
        "The certificate chain in PEM, inline (with ssl.keystore.key).",
    ),
    ConfigDef(
        "ssl.truststore.type",
        T.STRING,
        "JKS",
        "Format of the trust store. " + _PEM_ONLY,
    ),
    ConfigDef(
        "ssl.truststore.location",
        T.STRING,
        None,
        "PEM file with the certificates of the authorities whose client (and, between "
        "brokers, server) certificates are trusted.",
    ),
    ConfigDef("ssl.truststore.password", T.PASSWORD, None, "Accepted; PEM stores need none."),
    ConfigDef(
        "ssl.truststore.certificates",
        T.PASSWORD,
        None,
        "Trusted certificates in PEM, inline (instead of ssl.truststore.location).",
    ),
    ConfigDef(
        "ssl.client.auth",
        T.STRING,
        "none",
        "Whether TLS clients must (required), may (requested) or do not (none) present a "
        "certificate signed by a trusted authority. On SSL listeners the principal is the "
        "certificate's subject, mapped by ssl.principal.mapping.rules (User:ANONYMOUS "
        "without one).",
        _CLIENT_AUTH,
    ),
    ConfigDef(
        "ssl.enabled.protocols",
        T.LIST,
        ["TLSv1.2", "TLSv1.3"],
        "TLS versions accepted.",
        OneOf(("TLSv1.2", "TLSv1.3")),
    ),
    ConfigDef(
        "ssl.protocol",
        T.STRING,
        "TLSv1.3",
        "Accepted for compatibility; ssl.enabled.protocols decides the versions.",
    ),
    ConfigDef(
        "ssl.cipher.suites",
        T.LIST,
        None,
        "OpenSSL cipher names for TLS 1.2 (TLS 1.3 suites are OpenSSL's defaults); unset: "
        "OpenSSL's defaults.",
    ),
    ConfigDef(
        "ssl.endpoint.identification.algorithm",
        T.STRING,
        "https",
        "https: a broker connecting to another checks that the certificate names the host; "
        "empty: it does not.",
    ),
    ConfigDef(
        "ssl.principal.mapping.rules",
        T.STRING,
        "DEFAULT",
        "Rules from a client certificate's subject to a principal name: DEFAULT and "
        "RULE:pattern/replacement/[LU], comma-separated, first match wins.",
    ),
    ConfigDef(
        "authorizer.class.name",
        T.STRING,
        "",
        "Empty: no authorization (the ACL APIs answer SECURITY_DISABLED). "
        "kafka.security.authorizer.AclAuthorizer or org.apache.kafka.metadata.authorizer."
        "StandardAuthorizer: ACLs are enforced, stored in the data "
        "directory (a single node only: a cluster broker refuses an authorizer for now).",
        OneOf(
            (
                "",
                "kafka.security.authorizer.AclAuthorizer",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            )
        ),
    ),
    ConfigDef(
        "super.users",
        T.STRING,
        None,
        "Principals allowed everything, separated by semicolons: User:admin;User:CN=broker.",
    ),
    ConfigDef(
        "allow.everyone.if.no.acl.found",
        T.BOOLEAN,
        False,
        "Whether a resource that no ACL names is open to everyone.",
    ),
)

BROKER_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "node.id",
        T.INT,
        0,
        "The id of this broker in Metadata answers. A single node defaults to 0 (Kafka "
        "requires it to be set); in cluster mode broker.id or node.id must be set.",
        Range(0),
    ),
    ConfigDef(
        "broker.id",
        T.INT,
        None,
        "Kafka's ZooKeeper-mode name of node.id: this broker's id in the cluster. When both "
        "are set they must agree.",
        Range(0),
    ),
    ConfigDef(
        "zookeeper.connect",
        T.STRING,
        None,
        "HOST:PORT[,HOST:PORT...][/chroot] of the ZooKeeper ensemble. Set, the broker joins "
        "that cluster (replication, controller election); unset, it runs as a single node.",
    ),
    ConfigDef(
        "zookeeper.session.timeout.ms",
        T.INT,
        18_000,
        "ZooKeeper session timeout: a broker silent for this long loses its registration, "
        "its leaderships and its place in every ISR.",
        Range(1),
    ),
    ConfigDef(
        "zookeeper.connection.timeout.ms",
        T.INT,
        None,
        "How long the broker waits to connect to ZooKeeper at start; unset: the session timeout.",
        Range(1),
    ),
    ConfigDef(
        "replica.lag.time.max.ms",
        T.LONG,
        30_000,
        "A follower that has not caught up with the leader's log end for this long leaves the ISR.",
        Range(1),
    ),
    ConfigDef(
        "replica.fetch.wait.max.ms",
        T.INT,
        500,
        "Longest time a follower's fetch waits at the leader for new data.",
        Range(0),
    ),
    ConfigDef(
        "replica.fetch.min.bytes",
        T.INT,
        1,
        "Bytes a follower's fetch waits for at the leader before it is answered.",
        Range(1),
    ),
    ConfigDef(
        "replica.fetch.max.bytes",
        T.INT,
        1_048_576,
        "Bytes a follower asks for per partition in one fetch (at least one batch is sent).",
        Range(0),
    ),
    ConfigDef(
        "replica.fetch.response.max.bytes",
        T.INT,
        10_485_760,
        "Bytes a follower asks for in one whole fetch response.",
        Range(0),
    ),
    ConfigDef(
        "replica.fetch.backoff.ms",
        T.INT,
        1000,
        "How long a follower waits before fetching again from a leader that failed it.",
        Range(0),
    ),
    ConfigDef(
        "replica.high.watermark.checkpoint.interval.ms",
        T.LONG,
        5000,
        "How often each partition's high watermark is saved to replication-offset-checkpoint.",
        Range(1),
    ),
    ConfigDef(
        "listeners",
        T.LIST,
        ["PLAINTEXT://:9092"],
        "NAME://host:port entries to listen on, e.g. "
        "PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093 (an empty host: every interface; "
        "port 0: a free port). oncelog: when unset, one PLAINTEXT listener at the command "
        "line's --host/--port (127.0.0.1:9092), which cannot be combined with this key.",
    ),
    ConfigDef(
        "advertised.listeners",
        T.LIST,
        None,
        "Addresses given to clients in Metadata, per listener name (a client gets those of "
        "the listener it connected to); by default the listeners. An empty host means the "
        "listener's.",
    ),
    *SECURITY_DEFS,
    ConfigDef(
        "log.dir", T.STRING, "/tmp/kafka-logs", "Data directory, used when log.dirs is unset."
    ),
    ConfigDef("log.dirs", T.LIST, None, "Data directories (oncelog uses the first one)."),
    ConfigDef(
        "auto.create.topics.enable",
        T.BOOLEAN,
        True,
        "Create a topic when a client asks for metadata of, or produces to, an unknown one.",
    ),
    ConfigDef(
        "num.partitions", T.INT, 1, "Partition count of automatically created topics.", Range(1)
    ),
    ConfigDef(
        "default.replication.factor",
        T.INT,
        1,
        "Replication factor of automatically created topics and of CreateTopics with -1.",
        Range(1),
    ),
    ConfigDef(
        "offsets.topic.replication.factor",
        T.SHORT,
        3,
        "Replication factor of __consumer_offsets (cluster mode).",
        Range(1),
    ),
    ConfigDef(
        "transaction.state.log.replication.factor",
        T.SHORT,
        3,
        "Replication factor of __transaction_state (cluster mode).",
        Range(1),
    ),
    ConfigDef(
        "transaction.state.log.min.isr",
        T.INT,
        2,
        "min.insync.replicas of __transaction_state (cluster mode).",
        Range(1),
    ),
    ConfigDef(
        "delete.topic.enable",
        T.BOOLEAN,
        True,
        "Whether DeleteTopics deletes; when false it is refused.",
    ),
    ConfigDef(
        "socket.request.max.bytes",
        T.INT,
        104_857_600,
        "Largest request accepted on a connection; a bigger frame closes it.",
        Range(1),
    ),
    ConfigDef(
        "queued.max.request.bytes",
        T.LONG,
        268_435_456,
        "oncelog deviation: default 268435456 (Kafka: -1, unbounded). Bytes of requests being "
        "read or handled, over all connections; while a request does not fit, its connection "
        "reads nothing more. A request larger than the pool is read when nothing else is "
        "queued. 0 or less: unbounded.",
    ),
    ConfigDef(
        "socket.request.read.timeout.ms",
        T.LONG,
        30_000,
        "oncelog only (Kafka has no such bound): once a request's size has arrived, the rest "
        "of it must arrive within this time or the connection is closed, so a client "
        "trickling in a large frame cannot hold memory for long. Clients give up on a "
        "request after their request.timeout.ms (30000 by default) anyway.",
        Range(1),
    ),
    ConfigDef(
        "max.connections",
        T.INT,
        2_147_483_647,
        "Connections the broker keeps open at once; one more is closed as soon as it is "
        "accepted (Kafka stops accepting instead). The file-descriptor limit may lower it.",
        Range(0),
    ),
    ConfigDef(
        "max.connections.per.ip",
        T.INT,
        2_147_483_647,
        "Connections one client address may keep open; one more is closed at once.",
        Range(0),
    ),
    ConfigDef(
        "max.connections.per.ip.overrides",
        T.STRING,
        "",
        "Per-address exceptions to max.connections.per.ip: host:count,host:count (a host "
        "name counts for each of its addresses, resolved at start).",
    ),
    ConfigDef(
        "connections.max.idle.ms",
        T.LONG,
        600_000,
        "A connection with no request in progress and no answer pending for this long is "
        "closed; so is one whose client has not read an answer for this long.",
        Range(1),
    ),
    ConfigDef(
        "message.max.bytes",
        T.INT,
        1_048_588,
        "Largest record batch accepted, after compression.",
        Range(0),
        topic_key="max.message.bytes",
    ),
    ConfigDef(
        "fetch.max.bytes",
        T.INT,
        57_671_680,
        "Upper bound on the bytes returned by one Fetch.",
        Range(1024),
    ),
    ConfigDef(
        "compression.type",
        T.STRING,
        "producer",
        "Compression of stored batches; 'producer' keeps what the producer sent, any other "
        "value recompresses batches sent with another codec.",
        _COMPRESSION_TYPES,
        topic_key="compression.type",
    ),
    ConfigDef(
        "oncelog.record.validation.enable",
        T.BOOLEAN,
        True,
        "oncelog only, for benchmarks: false stores produced batches after checking their "
        "header and CRC, without reading their records (no decompression, no record checks, "
        "no recompression). Never set it in production: malformed records would reach "
        "consumers.",
    ),
    ConfigDef(
        "oncelog.fsync.realtime.priority",
        T.INT,
        1,
        "oncelog only: the SCHED_FIFO priority of the threads that fsync for acks=all, "
        "coordinator writes and markers, where the process may set it (CAP_SYS_NICE or "
        "RLIMIT_RTPRIO); their I/O class is not raised with it. A woken thread takes a CPU at once "
        "instead of waiting behind the event loop and other processes. 0: the normal policy.",
        Range(0, 99),
    ),
    ConfigDef(
        "log.segment.bytes",
        T.INT,
        1_073_741_824,
        "Size at which a partition rolls to a new segment file.",
        Range(1_048_576),
        topic_key="segment.bytes",
    ),
    ConfigDef(
        "log.roll.ms",
        T.LONG,
        None,
        "Age at which a segment is rolled; overrides log.roll.hours.",
        Range(1),
        topic_key="segment.ms",
    ),
    ConfigDef(
        "log.roll.hours",
        T.INT,
        168,
        "Age in hours at which a segment is rolled, used when log.roll.ms is unset.",
        Range(1),
        topic_key="segment.ms",
        to_topic_unit=_HOUR_MS,
    ),
    ConfigDef(
        "log.retention.ms",
        T.LONG,
        None,
        "How long data is kept; overrides "
        "log.retention.minutes and log.retention.hours. Negative: no time limit.",
        topic_key="retention.ms",
    ),
    ConfigDef(
        "log.retention.minutes",
        T.INT,
        None,
        "Retention in minutes, used when log.retention.ms is unset.",
        topic_key="retention.ms",
        to_topic_unit=_MINUTE_MS,
    ),
    ConfigDef(
        "log.retention.hours",
        T.INT,
        168,
        "Retention in hours, used when neither log.retention.ms nor log.retention.minutes is set.",
        topic_key="retention.ms",
        to_topic_unit=_HOUR_MS,
    ),
    ConfigDef(
        "log.retention.bytes",
        T.LONG,
        -1,
        "Size a partition may reach before old segments are deleted. Negative: no size limit.",
        topic_key="retention.bytes",
    ),
    ConfigDef(
        "log.retention.check.interval.ms",
        T.LONG,
        300_000,
        "How often retention is enforced.",
        Range(1),
    ),
    ConfigDef(
        "log.cleanup.policy",
        T.LIST,
        ["delete"],
        "What happens to data past retention: delete and/or compact.",
        _CLEANUP_POLICIES,
        topic_key="cleanup.policy",
    ),
    ConfigDef(
        "log.cleaner.enable",
        T.BOOLEAN,
        True,
        "Run the log cleaner, which compacts topics whose cleanup.policy includes compact.",
    ),
    ConfigDef(
        "log.cleaner.threads",
        T.INT,
        1,
        "Threads cleaning logs; oncelog cleans one log at a time, in one worker thread.",
        Range(1, 1),
    ),
    ConfigDef(
        "log.cleaner.dedupe.buffer.size",
        T.LONG,
        134_217_728,
        "Memory for the key map of one cleaning pass (each key costs its length plus about "
        "100 bytes); a dirty part with more keys is cleaned over several passes.",
        Range(1024 * 1024),
    ),
    ConfigDef(
        "log.cleaner.io.max.bytes.per.second",
        T.DOUBLE,
        sys.float_info.max,
        "The most bytes a second the cleaner reads and writes together, so that compaction "
        "leaves the disk to produce and fetch (Kafka's default: no limit).",
        Range(1),
    ),
    ConfigDef(
        "log.cleaner.backoff.ms",
        T.LONG,
        15_000,
        "How long the cleaner waits when no log needs cleaning.",
        Range(0),
    ),
    ConfigDef(
        "log.cleaner.delete.retention.ms",
        T.LONG,
        86_400_000,
        "How long tombstones stay in a compacted topic.",
        Range(0),
        topic_key="delete.retention.ms",
    ),
    ConfigDef(
        "log.cleaner.min.compaction.lag.ms",
        T.LONG,
        0,
        "Minimum age before a record may be compacted.",
        Range(0),
        topic_key="min.compaction.lag.ms",
    ),
    ConfigDef(
        "log.cleaner.max.compaction.lag.ms",
        T.LONG,
        LONG_MAX,
        "Maximum age before a record must be eligible for compaction.",
        Range(1),
        topic_key="max.compaction.lag.ms",
    ),
    ConfigDef(
        "log.cleaner.min.cleanable.ratio",
        T.DOUBLE,
        0.5,
        "Dirty fraction of a log that triggers compaction.",
        Range(0, 1),
        topic_key="min.cleanable.dirty.ratio",
    ),
    ConfigDef(
        "log.segment.delete.delay.ms",
        T.LONG,
        60_000,
        "Delay before a deleted segment's files are removed.",
        Range(0),
        topic_key="file.delete.delay.ms",
    ),
    ConfigDef(
        "log.index.size.max.bytes",
        T.INT,
        10_485_760,
        "Largest offset index file.",
        Range(4),
        topic_key="segment.index.bytes",
    ),
    ConfigDef(
        "log.index.interval.bytes",
        T.INT,
        4096,
        "Bytes of log between two offset index entries.",
        Range(0),
        topic_key="index.interval.bytes",
    ),
    ConfigDef(
        "log.preallocate", T.BOOLEAN, False, "Preallocate segment files.", topic_key="preallocate"
    ),
    ConfigDef(
        "log.flush.interval.messages",
        T.LONG,
        1,
        _FLUSH_MESSAGES_DOC,
        Range(1),
        topic_key="flush.messages",
    ),
    ConfigDef(
        "log.flush.interval.ms",
        T.LONG,
        None,
        "Longest time appended data may stay "
        "unflushed; when unset, log.flush.scheduler.interval.ms is used.",
        Range(0),
        topic_key="flush.ms",
    ),
    ConfigDef(
        "log.flush.scheduler.interval.ms",
        T.LONG,
        LONG_MAX,
        "How often the flusher looks for partitions to fsync; the default never runs it.",
        Range(0),
        topic_key="flush.ms",
    ),
    ConfigDef(
        "log.message.timestamp.type",
        T.STRING,
        "CreateTime",
        "Record timestamps: the producer's (CreateTime) or the broker's at append (LogAppendTime).",
        _TIMESTAMP_TYPES,
        topic_key="message.timestamp.type",
    ),
    ConfigDef(
        "log.message.timestamp.before.max.ms",
        T.LONG,
        LONG_MAX,
        "With CreateTime, how far in the past a batch timestamp may be.",
        Range(0),
        topic_key="message.timestamp.before.max.ms",
    ),
    ConfigDef(
        "log.message.timestamp.after.max.ms",
        T.LONG,
        3_600_000,
        "With CreateTime, how far in the future a batch timestamp may be.",
        Range(0),
        topic_key="message.timestamp.after.max.ms",
    ),
    ConfigDef(
        "min.insync.replicas",
        T.INT,
        1,
        "In-sync replicas (the leader included) that must hold an acks=-1 write; with fewer "
        "in the ISR such a produce gets NOT_ENOUGH_REPLICAS. A single node has one replica.",
        Range(1),
        topic_key="min.insync.replicas",
    ),
    ConfigDef(
        "unclean.leader.election.enable",
        T.BOOLEAN,
        False,
        "Cluster mode: elect a leader outside the ISR when no ISR member is alive (data "
        "acknowledged with acks=all may be lost). A single node has no followers to elect.",
        topic_key="unclean.leader.election.enable",
    ),
    ConfigDef(
        "offsets.topic.num.partitions",
        T.INT,
        50,
        "Partitions of __consumer_offsets; fixed once the topic exists.",
        Range(1),
    ),
    ConfigDef(
        "offsets.topic.segment.bytes",
        T.INT,
        104_857_600,
        "segment.bytes of __consumer_offsets when the broker creates it; small segments "
        "roll and get compacted sooner, so start-up replays less.",
        Range(1),
    ),
    ConfigDef(
        "offsets.retention.minutes",
        T.INT,
        10_080,
        "How long committed offsets of an empty group are kept.",
        Range(1),
    ),
    ConfigDef(
        "offsets.retention.check.interval.ms",
        T.LONG,
        600_000,
        "How often expired offsets are removed.",
        Range(1),
    ),
    ConfigDef(
        "group.min.session.timeout.ms",
        T.INT,
        6000,
        "Smallest session timeout a consumer may ask for.",
    ),
    ConfigDef(
        "group.max.session.timeout.ms",
        T.INT,
        1_800_000,
        "Largest session timeout a consumer may ask for.",
    ),
    ConfigDef(
        "group.initial.rebalance.delay.ms",
        T.INT,
        3000,
        "How long the first rebalance of an empty group waits for more members.",
    ),
    ConfigDef(
        "transaction.state.log.num.partitions",
        T.INT,
        50,
        "Partitions of __transaction_state; fixed once the topic exists.",
        Range(1),
    ),
    ConfigDef(
        "transaction.state.log.segment.bytes",
        T.INT,
        104_857_600,
        "segment.bytes of __transaction_state when the broker creates it.",
        Range(1),
    ),
    ConfigDef(
        "transaction.max.timeout.ms",
        T.INT,
        900_000,
        "Largest transaction.timeout.ms "
        "a producer may ask for; InitProducerId beyond it is refused.",
        Range(1),
    ),
    ConfigDef(
        "transactional.id.expiration.ms",
        T.INT,
        604_800_000,
        "Idle time after which a transactional id with no ongoing transaction is forgotten.",
        Range(1),
    ),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        T.INT,
        10_000,
        "How often transactions past their timeout are aborted.",
        Range(1),
    ),
    ConfigDef(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        T.INT,
        3_600_000,
        "How often expired transactional ids are removed.",
        Range(1),
    ),
    ConfigDef(
        "producer.id.expiration.ms",
        T.INT,
        86_400_000,
        "Idle time after which a producer id's state is dropped from a partition.",
        Range(1),
    ),
    ConfigDef(
        "producer.id.expiration.check.interval.ms",
        T.INT,
        600_000,
        "How often expired producer ids are removed.",
        Range(1),
    ),
)

# Topic keys; the value comes from the broker chain unless the topic overrides it. Types and
# bounds are the topic's own, which can differ from the broker key's (segment.bytes >= 14).
TOPIC_DEFS: tuple[ConfigDef, ...] = (
    ConfigDef("cleanup.policy", T.LIST, None, "delete and/or compact.", _CLEANUP_POLICIES),
    ConfigDef(
        "compression.type", T.STRING, None, "Compression of stored batches.", _COMPRESSION_TYPES
    ),
    ConfigDef("delete.retention.ms", T.LONG, None, "Tombstone retention when compacted.", Range(0)),
    ConfigDef(
        "file.delete.delay.ms",
        T.LONG,
        None,
        "Delay before deleted segment files are removed.",
        Range(0),
    ),
    ConfigDef(
        "flush.messages",
        T.LONG,
        None,
        "Per-topic log.flush.interval.messages: 1 makes "
        "acks=-1 wait for fsync (oncelog default); see the broker key.",
        Range(1),
    ),
    ConfigDef("flush.ms", T.LONG, None, "Longest time data may stay unflushed.", Range(0)),
    ConfigDef("index.interval.bytes", T.INT, None, "Bytes between offset index entries.", Range(0)),
    ConfigDef("max.compaction.lag.ms", T.LONG, None, "Maximum age before compaction.", Range(1)),
    ConfigDef("max.message.bytes", T.INT, None, "Largest record batch accepted.", Range(0)),
    ConfigDef(
        "message.timestamp.after.max.ms",
        T.LONG,
        None,
        "Allowed future skew of CreateTime timestamps.",
        Range(0),
    ),
    ConfigDef(
        "message.timestamp.before.max.ms",
        T.LONG,
        None,
        "Allowed past skew of CreateTime timestamps.",
        Range(0),
    ),
    ConfigDef(
        "message.timestamp.type", T.STRING, None, "CreateTime or LogAppendTime.", _TIMESTAMP_TYPES
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        T.DOUBLE,
        None,
        "Dirty fraction that triggers compaction.",
        Range(0, 1),
    ),
    ConfigDef("min.compaction.lag.ms", T.LONG, None, "Minimum age before compaction.", Range(0)),
    ConfigDef(
        "min.insync.replicas", T.INT, None, "Replicas that must hold an acks=-1 write.", Range(1)
    ),
    ConfigDef("preallocate", T.BOOLEAN, None, "Preallocate segment files."),
    ConfigDef("retention.bytes", T.LONG, None, "Size limit per partition; negative: none."),
    ConfigDef("retention.ms", T.LONG, None, "Time limit on data; -1: none.", Range(-1)),
    ConfigDef("segment.bytes", T.INT, None, "Segment size at which the log rolls.", Range(14)),
    ConfigDef("segment.index.bytes", T.INT, None, "Largest offset index file.", Range(4)),
    ConfigDef("segment.ms", T.LONG, None, "Segment age at which the log rolls.", Range(1)),
    ConfigDef(
        "unclean.leader.election.enable",
        T.BOOLEAN,
        None,
        "Elect a leader outside the ISR when no ISR member is alive (cluster mode).",
    ),
)

_BROKER = {d.key: d for d in BROKER_DEFS}
_TOPIC = {d.key: d for d in TOPIC_DEFS}
# topic key -> broker keys it falls back to, highest precedence first
_CHAINS: dict[str, tuple[ConfigDef, ...]] = {
    t: tuple(d for d in BROKER_DEFS if d.topic_key == t) for t in _TOPIC
}
assert all(_CHAINS.values()), "every topic key needs a broker default"


_LISTENER_PREFIX = "listener.name."
# Keys a listener may set for itself, and those it may set per SASL mechanism (Kafka's
# listener-prefixed and mechanism-prefixed broker configs).
_LISTENER_KEYS = frozenset(
    k for k in (d.key for d in SECURITY_DEFS) if k.startswith(("ssl.", "sasl."))
) | {"connections.max.reauth.ms"}
_MECHANISM_KEYS = frozenset({"sasl.jaas.config", "connections.max.reauth.ms"})


def _base_key(key: str) -> str:
    """The key a listener-prefixed key overrides."""
    rest = key[len(_LISTENER_PREFIX) :].partition(".")[2]
    return rest if rest in _LISTENER_KEYS else rest.partition(".")[2]


def _per_listener_key(key: str) -> str | None:
    """``key`` normalised (listener and mechanism lower-cased) if it is a
    listener-prefixed override of a key that allows one; else None."""
    if not key.startswith(_LISTENER_PREFIX):
        return None
    listener, _, rest = key[len(_LISTENER_PREFIX) :].partition(".")
    if not listener:
        return None
    if rest in _LISTENER_KEYS:
        return f"{_LISTENER_PREFIX}{listener.lower()}.{rest}"
    mechanism, _, base = rest.partition(".")
    if mechanism and base in _MECHANISM_KEYS:
        return f"{_LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.{base}"
    return None


def topic_def(key: str) -> ConfigDef | None:
    return _TOPIC.get(key)


def broker_def(key: str) -> ConfigDef | None:
    return _BROKER.get(key)


_INT_BITS = {T.SHORT: 16, T.INT: 32, T.LONG: 64}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_DECIMAL = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(NaN|Infinity)")


def parse_value(d: ConfigDef, raw: object) -> Any:
    """Parse and validate one value as Kafka's ConfigDef would; raise ConfigError."""
    text = str(raw).strip()
    value: Any
    if d.type is T.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise ConfigError(d.key, raw, "expected true or false")
        value = text.lower() == "true"
    elif d.type in _INT_BITS:
        bits = _INT_BITS[d.type]
        if not _INTEGER.fullmatch(text) or not -(2 ** (bits - 1)) <= int(text) < 2 ** (bits - 1):
            raise ConfigError(d.key, raw, f"expected a {bits}-bit integer")
        value = int(text)
    elif d.type is T.DOUBLE:
        if not _DECIMAL.fullmatch(text):
            raise ConfigError(d.key, raw, "expected a number")
        value = float(text)
    elif d.type is T.LIST:
        value = re.split(r"\s*,\s*", text) if text else []
    else:
        value = text
    reason = d.validator.check(value) if d.validator else None
    if reason:
        raise ConfigError(d.key, raw, reason)
    return value


def format_value(d: ConfigDef, value: Any) -> str | None:
    """Render a typed value as Kafka shows it (true, a,b, 0.5); None stays None."""
    if value is None:
        return None
    if d.type is T.BOOLEAN:
        return "true" if value else "false"
    if d.type is T.LIST:
        return ",".join(value)
    return str(value)


def parse_properties(text: str) -> dict[str, str]:
    """Read a Java properties file: `#`/`!` comments, `=`, `:` or blank separators,
    backslash line continuation and escapes. Later keys win, as in Java."""
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line):
            line = line[:-1] + next(lines, "").lstrip(" \t\f")
        key, value = _split_key_value(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _ends_with_continuation(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line) and line[i] not in "=: \t\f":
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    return re.sub(
        r"\\(u[0-9a-fA-F]{4}|.)",
        lambda m: chr(int(m[1][1:], 16)) if len(m[1]) == 5 else _ESCAPES.get(m[1], m[1]),
        s,
    )


V = TypeVar("V")


class _Key(Generic[V]):
    """A typed read-only attribute of BrokerConfig backed by one key."""

    def __init__(self, key: str) -> None:
        assert key in _BROKER, key
        self.key = key

    @overload
    def __get__(self, cfg: None, owner: type) -> _Key[V]: ...
    @overload
    def __get__(self, cfg: BrokerConfig, owner: type) -> V: ...
    def __get__(self, cfg: BrokerConfig | None, owner: type) -> V | _Key[V]:
        return self if cfg is None else cast(V, cfg.get(self.key))


class BrokerConfig:
    """Broker configuration in Kafka's layers, highest first: dynamic per-broker, dynamic
    cluster default (both set by AlterConfigs and IncrementalAlterConfigs, for the keys in
    ``DYNAMIC_BROKER_KEYS``), static (the properties file, then overrides), defaults."""

    def __init__(self, values: Mapping[str, object] | None = None) -> None:
        self._values: dict[str, Any] = {}
        self._unknown: dict[str, str] = {}
        self._dynamic: dict[bool, dict[str, Any]] = {True: {}, False: {}}  # per broker?
        # listener.name.<listener>[.<mechanism>].<key>, listener and mechanism lower-cased
        self._per_listener: dict[str, Any] = {}
        for key, raw in (values or {}).items():
            d = _BROKER.get(key)
            per_listener = _per_listener_key(key)
            if per_listener is not None:
                self._per_listener[per_listener] = parse_value(_BROKER[_base_key(key)], raw)
            elif d is None:
                log.warning("unknown configuration %s=%r is ignored", key, raw)
                self._unknown[key] = str(raw)
            else:
                self._values[key] = parse_value(d, raw)

    @classmethod
    def load(
        cls, properties_file: Path | None = None, overrides: Mapping[str, object] | None = None
    ) -> BrokerConfig:
        values: dict[str, object] = {}
        if properties_file is not None:
            values.update(parse_properties(Path(properties_file).read_text(encoding="utf-8")))
        values.update(overrides or {})
        return cls(values)

    def get(self, key: str) -> Any:
        """Typed value of a known key (default if unset); raw string of an unknown one."""
        for per_broker in (True, False):
            if key in self._dynamic[per_broker]:
                return self._dynamic[per_broker][key]
        if key in self._values:
            return self._values[key]
        if key in _BROKER:
            return _BROKER[key].default
        if key in self._unknown:
            return self._unknown[key]
        raise KeyError(key)

    def is_set(self, key: str) -> bool:
        return key in self._values or any(key in layer for layer in self._dynamic.values())

    def listener_value(self, listener: str, key: str, mechanism: str | None = None) -> Any:
        """``key`` as a listener (and a SASL mechanism) sees it: Kafka's
        ``listener.name.<listener>.<mechanism>.<key>``, then
        ``listener.name.<listener>.<key>``, then ``key`` itself."""
        prefix = f"{_LISTENER_PREFIX}{listener.lower()}."
        candidates = [f"{prefix}{mechanism.lower()}.{key}"] if mechanism else []
        for candidate in [*candidates, prefix + key]:
            if candidate in self._per_listener:
                return self._per_listener[candidate]
        return self.get(key)

    def layers(self, key: str) -> list[tuple[ConfigSource, Any]]:
        """Every value set for ``key``, highest precedence first (DescribeConfigs synonyms)."""
        found = [
            (source, self._dynamic[per_broker][key])
            for per_broker, source in _DYNAMIC_SOURCES
            if key in self._dynamic[per_broker]
        ]
        if key in self._values:
            found.append((ConfigSource.STATIC_BROKER_CONFIG, self._values[key]))
        return found

    def source(self, key: str) -> ConfigSource:
        for per_broker, source in _DYNAMIC_SOURCES:
            if key in self._dynamic[per_broker]:
                return source
        if key in self._values or key in self._unknown:
            return ConfigSource.STATIC_BROKER_CONFIG
        if key in _BROKER:
            return ConfigSource.DEFAULT_CONFIG
        raise KeyError(key)

    def dynamic(self, *, per_broker: bool) -> dict[str, str]:
        """The dynamic layer, as Kafka's names and canonical strings (what is persisted)."""
        layer = self._dynamic[per_broker]
        return {k: cast(str, format_value(_BROKER[k], v)) for k, v in layer.items()}

    def set_dynamic(self, values: Mapping[str, str], *, per_broker: bool) -> None:
        """Replace one dynamic layer with ``values`` (checked by :func:`validate_dynamic`)."""
        self._dynamic[per_broker] = {k: parse_value(_BROKER[k], v) for k, v in values.items()}

    def topic_default(self, topic_key: str) -> Any:
        """The value a topic without an override gets: the first broker key in the chain
        with a value, converted to the topic's unit (Kafka's ms > minutes > hours)."""
        d = next(d for d in _CHAINS[topic_key] if self.get(d.key) is not None)
        value = self.get(d.key)
        if d.to_topic_unit != 1:
            value *= d.to_topic_unit
        if topic_key == "retention.ms" and value < 0:
            return -1  # any negative retention means unlimited, reported as -1
        return value

    node_id = _Key[int]("node.id")
    zookeeper_connect = _Key[str | None]("zookeeper.connect")
    zookeeper_session_timeout_ms = _Key[int]("zookeeper.session.timeout.ms")
    replica_lag_time_max_ms = _Key[int]("replica.lag.time.max.ms")
    replica_fetch_wait_max_ms = _Key[int]("replica.fetch.wait.max.ms")
    replica_fetch_min_bytes = _Key[int]("replica.fetch.min.bytes")
    replica_fetch_max_bytes = _Key[int]("replica.fetch.max.bytes")
    replica_fetch_response_max_bytes = _Key[int]("replica.fetch.response.max.bytes")
    replica_fetch_backoff_ms = _Key[int]("replica.fetch.backoff.ms")
    replica_high_watermark_checkpoint_interval_ms = _Key[int](
        "replica.high.watermark.checkpoint.interval.ms"
    )
    offsets_topic_replication_factor = _Key[int]("offsets.topic.replication.factor")
    transaction_state_log_replication_factor = _Key[int]("transaction.state.log.replication.factor")
    transaction_state_log_min_isr = _Key[int]("transaction.state.log.min.isr")
    listeners = _Key[list[str]]("listeners")
    advertised_listeners = _Key[list[str] | None]("advertised.listeners")
    auto_create_topics_enable = _Key[bool]("auto.create.topics.enable")
    num_partitions = _Key[int]("num.partitions")
    default_replication_factor = _Key[int]("default.replication.factor")
    delete_topic_enable = _Key[bool]("delete.topic.enable")
    socket_request_max_bytes = _Key[int]("socket.request.max.bytes")
    queued_max_request_bytes = _Key[int]("queued.max.request.bytes")
    socket_request_read_timeout_ms = _Key[int]("socket.request.read.timeout.ms")
    max_connections = _Key[int]("max.connections")
    max_connections_per_ip = _Key[int]("max.connections.per.ip")
    max_connections_per_ip_overrides = _Key[str]("max.connections.per.ip.overrides")
    connections_max_idle_ms = _Key[int]("connections.max.idle.ms")
    message_max_bytes = _Key[int]("message.max.bytes")
    record_validation_enable = _Key[bool]("oncelog.record.validation.enable")
    fsync_realtime_priority = _Key[int]("oncelog.fsync.realtime.priority")
    fetch_max_bytes = _Key[int]("fetch.max.bytes")
    log_segment_bytes = _Key[int]("log.segment.bytes")
    log_retention_bytes = _Key[int]("log.retention.bytes")
    log_retention_check_interval_ms = _Key[int]("log.retention.check.interval.ms")
    log_index_interval_bytes = _Key[int]("log.index.interval.bytes")
    log_flush_interval_messages = _Key[int]("log.flush.interval.messages")
    log_flush_scheduler_interval_ms = _Key[int]("log.flush.scheduler.interval.ms")
    log_message_timestamp_type = _Key[str]("log.message.timestamp.type")
    log_cleanup_policy = _Key[list[str]]("log.cleanup.policy")
    log_cleaner_enable = _Key[bool]("log.cleaner.enable")
    log_cleaner_dedupe_buffer_size = _Key[int]("log.cleaner.dedupe.buffer.size")
    log_cleaner_backoff_ms = _Key[int]("log.cleaner.backoff.ms")
    log_cleaner_io_max_bytes_per_second = _Key[float]("log.cleaner.io.max.bytes.per.second")
    offsets_topic_segment_bytes = _Key[int]("offsets.topic.segment.bytes")
    transaction_state_log_segment_bytes = _Key[int]("transaction.state.log.segment.bytes")
    min_insync_replicas = _Key[int]("min.insync.replicas")
    offsets_topic_num_partitions = _Key[int]("offsets.topic.num.partitions")
    offsets_retention_minutes = _Key[int]("offsets.retention.minutes")
    offsets_retention_check_interval_ms = _Key[int]("offsets.retention.check.interval.ms")
    group_min_session_timeout_ms = _Key[int]("group.min.session.timeout.ms")
    group_max_session_timeout_ms = _Key[int]("group.max.session.timeout.ms")
    group_initial_rebalance_delay_ms = _Key[int]("group.initial.rebalance.delay.ms")
    transaction_state_log_num_partitions = _Key[int]("transaction.state.log.num.partitions")
    transaction_max_timeout_ms = _Key[int]("transaction.max.timeout.ms")
    transactional_id_expiration_ms = _Key[int]("transactional.id.expiration.ms")
    transaction_abort_timed_out_transaction_cleanup_interval_ms = _Key[int](
        "transaction.abort.timed.out.transaction.cleanup.interval.ms"
    )
    transaction_remove_expired_transaction_cleanup_interval_ms = _Key[int](
        "transaction.remove.expired.transaction.cleanup.interval.ms"
    )
    producer_id_expiration_ms = _Key[int]("producer.id.expiration.ms")
    producer_id_expiration_check_interval_ms = _Key[int]("producer.id.expiration.check.interval.ms")

    @property
    def cluster_mode(self) -> bool:
        """Whether the broker joins a ZooKeeper-coordinated cluster (zookeeper.connect set)."""
        return bool(self.get("zookeeper.connect"))

    @property
    def zookeeper_connection_timeout_ms(self) -> int:
        timeout = self.get("zookeeper.connection.timeout.ms")
        return self.zookeeper_session_timeout_ms if timeout is None else int(timeout)

    @property
    def broker_id(self) -> int:
        """broker.id (Kafka's ZooKeeper-mode key), else node.id; ConfigError if they differ,
        or if a cluster broker has neither (two brokers must never both default to 0)."""
        broker_id, node_id = self.get("broker.id"), self.get("node.id")
        if broker_id is not None and self.is_set("node.id") and broker_id != node_id:
            raise ConfigError(
                "broker.id", broker_id, f"node.id is {node_id}: set one, or both to the same id"
            )
        if broker_id is not None:
            return int(broker_id)
        if self.cluster_mode and not self.is_set("node.id"):
            raise ConfigError("broker.id", None, "a cluster broker needs broker.id (or node.id)")
        return int(node_id)

    @property
    def log_dirs(self) -> list[str]:
        return cast("list[str] | None", self.get("log.dirs")) or [self.get("log.dir")]

    @property
    def log_roll_ms(self) -> int:
        return cast(int, self.topic_default("segment.ms"))

    @property
    def log_retention_ms(self) -> int:
        """Resolved from ms, minutes, hours in that order; -1 means unlimited."""
        return cast(int, self.topic_default("retention.ms"))

    @property
    def log_flush_interval_ms(self) -> int:
        """log.flush.interval.ms, or log.flush.scheduler.interval.ms when unset."""
        return cast(int, self.topic_default("flush.ms"))


_DYNAMIC_SOURCES = (
    (True, ConfigSource.DYNAMIC_BROKER_CONFIG),
    (False, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
)

# Keys AlterConfigs may change on a running broker (Kafka's DynamicBrokerConfig: every
# broker default of a topic key, the log cleaner's keys, producer.id.expiration.ms).
DYNAMIC_BROKER_KEYS = frozenset(
    [d.key for d in BROKER_DEFS if d.topic_key is not None]
    + [
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.backoff.ms",
        "log.cleaner.io.max.bytes.per.second",
        "producer.id.expiration.ms",
    ]
)


def validate_dynamic(values: Mapping[str, str | None]) -> dict[str, str]:
    """Check a dynamic broker layer (names, dynamic-ness, values); canonical strings.

    Kafka answers a key that cannot change at run time with "Cannot update these configs
    dynamically"; unlike Kafka, oncelog also refuses names it does not know (Kafka keeps
    them for plugins, which oncelog has none of), so a typo is an error, not a silent no-op.
    """
    unknown = sorted(k for k in values if k not in _BROKER)
    if unknown:
        raise ConfigError(", ".join(unknown), values[unknown[0]], "unknown broker configuration")
    static_only = sorted(k for k in values if k not in DYNAMIC_BROKER_KEYS)
    if static_only:
        raise ConfigError(
            ", ".join(static_only),
            values[static_only[0]],
            f"Cannot update these configs dynamically: {static_only}",
        )
    canonical = {}
    for key, raw in values.items():
        if raw is None:
            raise ConfigError(key, raw, "a broker configuration cannot be null")
        canonical[key] = cast(str, format_value(_BROKER[key], parse_value(_BROKER[key], raw)))
    return canonical


def _synonyms(cfg: BrokerConfig, chain: tuple[ConfigDef, ...]) -> list[ConfigSynonym]:
    """Set keys first (each at every level it is set, highest first), then defaults, each
    in precedence order, as Kafka lists them."""
    out = [
        ConfigSynonym(d.key, _shown(d, value), source)
        for d in chain
        for source, value in cfg.layers(d.key)
    ]
    out += [
        ConfigSynonym(d.key, _shown(d, d.default), ConfigSource.DEFAULT_CONFIG)
        for d in chain
        if d.default is not None
    ]
    return out


def _shown(d: ConfigDef, value: Any) -> str | None:
    return None if d.type is T.PASSWORD else format_value(d, value)


def describe_broker(cfg: BrokerConfig, *, cluster_default: bool = False) -> list[ConfigEntry]:
    """DescribeConfigs of the broker resource: every key, read-only unless it is dynamic.
    A key's synonyms are itself and the lower-precedence keys it falls back to.

    ``cluster_default`` describes the resource named "" as Kafka does: only the keys set
    in the dynamic cluster default layer."""
    entries = []
    defaults = cfg.dynamic(per_broker=False)
    for d in BROKER_DEFS:
        if cluster_default and d.key not in defaults:
            continue
        chain = _CHAINS[d.topic_key] if d.topic_key else (d,)
        synonyms = _synonyms(cfg, chain[chain.index(d) :])
        value = defaults[d.key] if cluster_default else _shown(d, cfg.get(d.key))
        source = (
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if cluster_default else cfg.source(d.key)
        )
        entries.append(
            ConfigEntry(
                d.key,
                value,
                source,
                d.key not in DYNAMIC_BROKER_KEYS,
                d.type is T.PASSWORD,
                d.type,
                d.doc,
                tuple(synonyms),
            )
        )
    return entries


class TopicConfig:
    """A topic's configuration: its validated overrides over the broker's defaults."""

    def __init__(self, broker: BrokerConfig, overrides: Mapping[str, str | None] | None = None):
        self.broker = broker
        self.overrides = self.validate(overrides or {})

    @staticmethod
    def validate(overrides: Mapping[str, str | None]) -> dict[str, str]:
        """Check names and values of topic overrides (CreateTopics, AlterConfigs); return them
        in canonical form. Raise ConfigError, which the broker answers with INVALID_CONFIG."""
        canonical = {}
        for key, raw in overrides.items():
            d = _TOPIC.get(key)
            if d is None:
                raise ConfigError(key, raw, "unknown topic configuration")
            if raw is None:
                raise ConfigError(key, raw, "a topic configuration cannot be null")
            canonical[key] = cast(str, format_value(d, parse_value(d, raw)))
        return canonical

    def get(self, key: str) -> Any:
        if key in self.overrides:
            return parse_value(_TOPIC[key], self.overrides[key])
        return self.broker.topic_default(key)

    def entries(self) -> list[ConfigEntry]:
        """Every topic key for DescribeConfigs, with its source and synonyms."""
        entries = []
        for d in TOPIC_DEFS:
            synonyms = _synonyms(self.broker, _CHAINS[d.key])
            if d.key in self.overrides:
                synonyms.insert(
                    0, ConfigSynonym(d.key, self.overrides[d.key], ConfigSource.TOPIC_CONFIG)
                )
            source = synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG
            entries.append(
                ConfigEntry(
                    d.key,
                    _shown(d, self.get(d.key)),
                    source,
                    False,
                    d.type is T.PASSWORD,
                    d.type,
                    d.doc,
                    tuple(synonyms),
                )
            )
        return entries

    def to_log_config(self) -> dict[str, Any]:
        """Keyword arguments for oncelog.storage.LogConfig (not imported here: layering)."""
        policy = self.get("cleanup.policy")
        return {
            "segment_bytes": self.get("segment.bytes"),
            "segment_ms": self.get("segment.ms"),
            "retention_ms": self.get("retention.ms"),
            "retention_bytes": self.get("retention.bytes"),
            "index_interval_bytes": self.get("index.interval.bytes"),
            "max_message_bytes": self.get("max.message.bytes"),
            "compact": "compact" in policy,
            "delete": "delete" in policy,
            "delete_retention_ms": self.get("delete.retention.ms"),
            "min_cleanable_dirty_ratio": self.get("min.cleanable.dirty.ratio"),
            "min_compaction_lag_ms": self.get("min.compaction.lag.ms"),
            "max_compaction_lag_ms": self.get("max.compaction.lag.ms"),
        }


def effective(
    broker_cfg: BrokerConfig, overrides: Mapping[str, str | None] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries of a topic with these overrides."""
    return TopicConfig(broker_cfg, overrides).entries()


def to_log_config(
    broker_cfg: BrokerConfig, overrides: Mapping[str, str | None] | None = None
) -> dict[str, Any]:
    """`LogConfig(**to_log_config(cfg, overrides))` builds the storage config of a topic."""
    return TopicConfig(broker_cfg, overrides).to_log_config()
