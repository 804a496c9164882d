"""Authentication and authorization cores: principals, SASL (PLAIN, SCRAM), the
certificate subject and its mapping rules, and Kafka's ACL model. Pure: the broker wires
them to sockets and files."""

from oncelog.security.principal import ANONYMOUS, KafkaPrincipal

__all__ = ["ANONYMOUS", "KafkaPrincipal"]
