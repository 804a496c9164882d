"""Certificate subjects as Java writes them, and Kafka's principal mapping rules."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from oncelog.security.ssl_principal import NoMatchingRule, SslPrincipalMapper
from oncelog.security.x500 import CertificateFormatError, subject_from_der

KEY = ec.generate_private_key(ec.SECP256R1())


def certificate_der(*rdns: x509.RelativeDistinguishedName) -> bytes:
    name = x509.Name(list(rdns))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")]))
        .public_key(KEY.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(KEY, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def rdn(oid: x509.ObjectIdentifier, value: str) -> x509.RelativeDistinguishedName:
    return x509.RelativeDistinguishedName([x509.NameAttribute(oid, value)])


def test_subject_reads_last_name_first_as_java_does() -> None:
    der = certificate_der(
        rdn(NameOID.COUNTRY_NAME, "US"),
        rdn(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
        rdn(NameOID.LOCALITY_NAME, "Palo Alto"),
        rdn(NameOID.ORGANIZATION_NAME, "Acme"),
        rdn(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        rdn(NameOID.COMMON_NAME, "alice"),
    )
    assert subject_from_der(der) == "CN=alice,OU=eng,O=Acme,L=Palo Alto,ST=CA,C=US"


def test_domain_components_and_user_ids_have_keywords() -> None:
    der = certificate_der(
        rdn(NameOID.DOMAIN_COMPONENT, "com"),
        rdn(NameOID.DOMAIN_COMPONENT, "acme"),
        rdn(NameOID.USER_ID, "u42"),
        rdn(NameOID.STREET_ADDRESS, "1 Main St"),
    )
    assert subject_from_der(der) == "STREET=1 Main St,UID=u42,DC=acme,DC=com"


def test_other_attributes_are_an_oid_and_the_hex_of_their_der() -> None:
    der = certificate_der(rdn(NameOID.EMAIL_ADDRESS, "a@b"), rdn(NameOID.COMMON_NAME, "x"))
    # IA5String (0x16) of 3 bytes: Java's X500Principal.getName() writes exactly this.
    assert subject_from_der(der) == "CN=x,1.2.840.113549.1.9.1=#1603614062"


def test_special_characters_are_escaped() -> None:
    der = certificate_der(rdn(NameOID.COMMON_NAME, ' Smith, J+"x"#<y>;=\\ '))
    assert subject_from_der(der) == 'CN=\\ Smith\\, J\\+\\"x\\"\\#\\<y\\>\\;\\=\\\\\\ '


def test_multi_valued_names_join_with_plus() -> None:
    both = x509.RelativeDistinguishedName(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        ]
    )
    text = subject_from_der(certificate_der(rdn(NameOID.COUNTRY_NAME, "US"), both))
    assert text.endswith(",C=US") and set(text[: -len(",C=US")].split("+")) == {
        "CN=alice",
        "OU=eng",
    }


def test_non_ascii_values_stay_as_they_are() -> None:
    assert subject_from_der(certificate_der(rdn(NameOID.COMMON_NAME, "Zoë"))) == "CN=Zoë"


@pytest.mark.parametrize(
    "junk", [b"", b"\x30", b"\x30\x05\x02\x01\x00", b"\x04\x00", b"\x30\x84\xff\xff\xff\xff"]
)
def test_junk_is_refused(junk: bytes) -> None:
    with pytest.raises(CertificateFormatError):
        subject_from_der(junk)


DN = "CN=etl,OU=ServiceUsers,O=Acme,C=US"


def test_default_is_the_whole_name() -> None:
    assert SslPrincipalMapper().name_for(DN) == DN
    assert SslPrincipalMapper("DEFAULT").name_for(DN) == DN


def test_first_matching_rule_wins() -> None:
    rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT"
    mapper = SslPrincipalMapper(rules)
    assert mapper.name_for(DN) == "etl"
    assert mapper.name_for("CN=Bob,OU=Eng,O=Acme") == "bob@eng"
    assert mapper.name_for("O=Nobody") == "O=Nobody"


def test_upper_case_and_back_references_past_the_groups() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=([a-z]+),.*$/$1-$2-$10/U")
    assert mapper.name_for("CN=ada,O=x") == "ADA-$2-ADA0"


def test_escaped_characters_in_replacement() -> None:
    mapper = SslPrincipalMapper(r"RULE:^CN=(.*)$/\$$1\\/")
    assert mapper.name_for("CN=x") == "$x\\"


def test_no_matching_rule_refuses() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to O=x"):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name_for("O=x")


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "RULE:x/y/Q", "NONSENSE"])
def test_invalid_rules_are_refused(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)
