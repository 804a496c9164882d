"""Who a request comes from: Kafka's ``KafkaPrincipal``, a type and a name.

Every connection has one. PLAINTEXT connections, and SSL ones whose client sent no
certificate, are ``User:ANONYMOUS``; SASL sets ``User:<authorization id>``; SSL with a client
certificate sets ``User:<name mapped from the certificate's subject>``. ACLs and
``super.users`` name principals in the same ``Type:Name`` form.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ANONYMOUS", "USER_TYPE", "WILDCARD_PRINCIPAL", "KafkaPrincipal"]

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """A principal as ACLs name it: ``User:alice``."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:Name`` as Kafka's ``SecurityUtils.parseKafkaPrincipal`` reads it: split at
        the first colon, both sides non-empty. Raise ValueError otherwise."""
        kind, colon, name = text.partition(":")
        if not colon or not kind or not name:
            raise ValueError(
                f"expected a string in format principalType:principalName but got {text!r}"
            )
        return cls(kind, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
# In an ACL, this principal stands for every principal (Kafka's ``User:*``).
WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")
