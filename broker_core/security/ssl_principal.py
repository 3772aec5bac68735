"""The principal of a TLS client with a certificate, as Kafka's default principal builder names
it: ``User:`` + the certificate subject's distinguished name in RFC 2253 form, which is what
Java's ``X500Principal.getName()`` returns (``CN=alice,OU=eng,O=Example,C=GB``).

The rules kept from Java: the RDNs in reverse order of the certificate's sequence (most
specific first), ``,`` between RDNs without spaces, ``+`` inside a multi-valued RDN, the
keywords CN, C, L, ST, O, OU, STREET, DC and UID, and any other attribute as its dotted OID
with ``#`` and the hex of the value's DER encoding (e.g. an e-mail address).
"""

from __future__ import annotations

from cryptography import x509
from cryptography.x509.oid import NameOID

from broker_core.security.principal import Principal

#: The attribute keywords RFC 2253 (and Java) write by name; others go as OIDs.
_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
#: ASN.1 UTF8String: the type assumed when the library does not say which one a value has.
_UTF8_STRING = 12


def _escape(value: str) -> str:
    """RFC 2253 section 2.4: backslash before ``,+"\\<>;``, a leading ``#`` or space and a
    trailing space."""
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_length(n: int) -> bytes:
    if n < 0x80:
        return bytes([n])
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(body)]) + body


def _attribute(attr: x509.NameAttribute) -> str:
    keyword = _KEYWORDS.get(attr.oid)
    value = attr.value if isinstance(attr.value, str) else attr.value.decode("latin-1")
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    asn1_type = getattr(getattr(attr, "_type", None), "value", _UTF8_STRING)
    raw = value.encode("utf-8")
    der = bytes([asn1_type]) + _der_length(len(raw)) + raw
    return f"{attr.oid.dotted_string}=#{der.hex()}"


def distinguished_name(name: x509.Name) -> str:
    """``name`` in RFC 2253 form, as ``X500Principal.getName()`` gives it."""
    return ",".join("+".join(_attribute(a) for a in rdn) for rdn in reversed(name.rdns))


def principal_from_certificate(cert: x509.Certificate) -> Principal:
    """Kafka's principal for a TLS client presenting ``cert``: ``User:<subject DN>``."""
    return Principal("User", distinguished_name(cert.subject))
