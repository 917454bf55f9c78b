#!/usr/bin/env python3
"""Writes a test PKI into DIR: a CA (ca.pem), a server certificate for 127.0.0.1 and
localhost (server.pem, server-key.pem) and a client certificate (client.pem,
client-key.pem), for etcd's TLS in tests.

    make_certs.py DIR
"""

import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def key():
    return ec.generate_private_key(ec.SECP256R1())


def write(path, key_or_cert):
    if isinstance(key_or_cert, x509.Certificate):
        data = key_or_cert.public_bytes(serialization.Encoding.PEM)
    else:
        data = key_or_cert.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    path.write_bytes(data)


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kfs-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write(out / "ca.pem", ca)
    # etcd's JSON gateway dials etcd itself with the server certificate, so that one
    # serves as a client certificate too; and with authentication on, the gateway
    # refuses a client certificate that has a CommonName (it could not pass it on as
    # the user), so the client's has none.
    leaves = (
        ("server", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], "kfs-test-server"),
        ("client", [ExtendedKeyUsageOID.CLIENT_AUTH], None),
    )
    for name, usages, common_name in leaves:
        leaf_key = key()
        subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(ca_name)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        )
        write(out / f"{name}.pem", builder.sign(ca_key, hashes.SHA256()))
        write(out / f"{name}-key.pem", leaf_key)


if __name__ == "__main__":
    main()
