"""The subject of an X.509 certificate as Java's ``X500Principal.getName()`` writes it.

Kafka names an SSL client by its certificate's subject in RFC 2253 form (``CN=alice,
OU=eng,O=Acme,C=US``) before ``ssl.principal.mapping.rules`` apply, so ACLs written for a
Kafka cluster must see the same string here. This module reads the subject straight from
the certificate's DER bytes (the standard library's ``ssl`` gives them; no third-party
parser needed) and formats it as Java does:

- relative distinguished names from the last to the first, joined by ``,``; the values of
  a multi-valued one joined by ``+`` in their encoded order;
- the attribute types CN, C, L, ST, O, OU, STREET, DC and UID by keyword, any other by its
  dotted OID with the value as ``#`` and the hex of its DER encoding (so an e-mail address
  attribute reads ``1.2.840.113549.1.9.1=#16...``), as are values that are not strings;
- in string values, each of ``, = + < > # ; " \\`` escaped with a backslash, NUL as
  ``\\00``, leading and trailing spaces escaped; anything else kept as it is.
"""

from __future__ import annotations

__all__ = ["CertificateFormatError", "subject_from_der"]

_SEQUENCE = 0x30
_SET = 0x31
_OID = 0x06
_INTEGER = 0x02
_EXPLICIT_VERSION = 0xA0

_RFC2253_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.9": "STREET",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
# DER string types Java formats as text, with the encoding of their bytes.
_STRING_TYPES = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x16: "ascii",  # IA5String
    0x14: "latin-1",  # TeletexString (T61)
    0x1B: "latin-1",  # GeneralString
    0x1E: "utf-16-be",  # BMPString
}
_ESCAPED = ',=+<>#;"\\'


class CertificateFormatError(ValueError):
    """The bytes are not a DER certificate this reader understands."""


def _element(data: bytes, position: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``position``."""
    if position + 2 > len(data):
        raise CertificateFormatError("truncated DER element")
    tag, first = data[position], data[position + 1]
    if tag & 0x1F == 0x1F:
        raise CertificateFormatError("multi-byte DER tags are not expected in a certificate")
    start = position + 2
    if first < 0x80:
        length = first
    else:
        count = first & 0x7F
        if count == 0 or count > 4 or start + count > len(data):
            raise CertificateFormatError("bad DER length")
        length = int.from_bytes(data[start : start + count], "big")
        start += count
    if start + length > len(data):
        raise CertificateFormatError("DER element runs past the end of the data")
    return tag, start, start + length


def _children(data: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(tag, value start, value end, element start) of each element in ``data[start:end]``."""
    found = []
    position = start
    while position < end:
        tag, value_start, value_end = _element(data, position)
        found.append((tag, value_start, value_end, position))
        position = value_end
    if position != end:
        raise CertificateFormatError("DER elements overrun their container")
    return found


def _oid(value: bytes) -> str:
    if not value:
        raise CertificateFormatError("empty OID")
    first, rest = divmod(value[0], 40) if value[0] < 80 else (2, value[0] - 80)
    arcs = [first, rest]
    number = 0
    for byte in value[1:]:
        number = (number << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(number)
            number = 0
    return ".".join(map(str, arcs))


def _escape(text: str) -> str:
    out = "".join("\\00" if c == "\0" else ("\\" + c if c in _ESCAPED else c) for c in text)
    lead = len(out) - len(out.lstrip(" \r"))  # leading and trailing blanks are escaped too
    trail = len(out.rstrip(" \r"))
    return "".join("\\" + c if i < lead or i >= trail else c for i, c in enumerate(out))


def _attribute(der: bytes, start: int, end: int) -> str:
    parts = _children(der, start, end)
    if len(parts) != 2 or parts[0][0] != _OID:
        raise CertificateFormatError("an attribute is not (OID, value)")
    _, oid_start, oid_end, _ = parts[0]
    value_tag, value_start, value_end, element_start = parts[1]
    oid = _oid(der[oid_start:oid_end])
    keyword = _RFC2253_KEYWORDS.get(oid)
    encoding = _STRING_TYPES.get(value_tag)
    if keyword is None or encoding is None:
        return f"{keyword or oid}=#{der[element_start:value_end].hex()}"
    try:
        text = der[value_start:value_end].decode(encoding)
    except UnicodeDecodeError:
        return f"{keyword}=#{der[element_start:value_end].hex()}"
    return f"{keyword}={_escape(text)}"


def subject_from_der(der: bytes) -> str:
    """The subject of a DER-encoded certificate, in Java's RFC 2253 form."""
    tag, start, _ = _element(der, 0)
    if tag != _SEQUENCE:
        raise CertificateFormatError("a certificate is a SEQUENCE")
    tag, tbs_start, tbs_end = _element(der, start)
    if tag != _SEQUENCE:
        raise CertificateFormatError("the to-be-signed part is a SEQUENCE")
    fields = _children(der, tbs_start, tbs_end)
    if fields and fields[0][0] == _EXPLICIT_VERSION:
        fields = fields[1:]
    # serialNumber, signature, issuer, validity, subject
    if len(fields) < 5 or fields[0][0] != _INTEGER or fields[4][0] != _SEQUENCE:
        raise CertificateFormatError("no subject where a certificate has one")
    _, subject_start, subject_end, _ = fields[4]
    names = []
    for rdn_tag, rdn_start, rdn_end, _ in _children(der, subject_start, subject_end):
        if rdn_tag != _SET:
            raise CertificateFormatError("a relative distinguished name is a SET")
        attributes = [
            _attribute(der, a_start, a_end)
            for a_tag, a_start, a_end, _ in _children(der, rdn_start, rdn_end)
            if a_tag == _SEQUENCE
        ]
        names.append("+".join(attributes))
    return ",".join(reversed(names))
