"""HTTPS for the class: a local certificate authority and a server certificate for this
machine's names and LAN addresses (``cryptography``), plus the join URLs and their QR codes.

WebGPU exists only in a secure context: ``http://localhost`` is one, ``http://192.168.1.5`` is
not. So classroom serving is HTTPS by default. The CA (``tls/ca.pem``, created once, its key
readable by the owner only) signs a server certificate (``tls/server.pem``) that is re-made
when the machine's addresses change; students either trust the CA once (the teacher page
shows how) or click through the browser's warning. The CA is name-constrained to the DNS names
``localhost``, ``*.local`` and this host's name, so even a leaked CA key cannot vouch for a
named web site (IP addresses stay unconstrained: a school LAN may use any range).
"""

from __future__ import annotations

import datetime
import hashlib
import io
import ipaddress
import os
import socket
from pathlib import Path

CA_DAYS = 3650
SERVER_DAYS = 397  # browsers' limit for server certificates


def lan_addresses() -> list[str]:
    """This machine's IPv4 addresses that other machines can reach (no loopback, no
    link-local), private ranges first; IPv6 is left out (URLs with them are hard to type)."""
    import psutil
    found = []
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family != socket.AF_INET:
                continue
            ip = ipaddress.ip_address(a.address)
            if ip.is_loopback or ip.is_link_local or ip.is_unspecified:
                continue
            found.append(ip)
    found = sorted(set(found), key=lambda ip: (not ip.is_private, ip))
    return [str(ip) for ip in found]


def host_names() -> list[str]:
    """``localhost``, this host's name and its ``.local`` (mDNS) form."""
    name = socket.gethostname().split(".")[0].lower()
    names = ["localhost"]
    if name and name != "localhost":
        names += [name, f"{name}.local"]
    return names


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key():
    from cryptography.hazmat.primitives.asymmetric import ec
    return ec.generate_private_key(ec.SECP256R1())


def _name(common: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "webgpu-trainer classroom"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _make_ca(tls_dir: Path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    key = _key()
    now = datetime.datetime.now(datetime.timezone.utc)
    dns = sorted({n.removesuffix(".local") for n in host_names()} | {"local"})
    permitted = [x509.DNSName(n) for n in dns]
    subject = _name(f"webgpu-trainer classroom CA ({socket.gethostname()})")
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .add_extension(x509.NameConstraints(permitted, None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256()))
    _write_private(tls_dir / "ca-key.pem", key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tls_dir / "ca.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def ensure_certificate(tls_dir: Path, addresses: list[str]) -> dict:
    """The CA and a server certificate for ``addresses`` plus ``host_names()`` and loopback,
    made when missing, expiring within 30 days or not covering the addresses. Returns
    ``{"cert", "key", "ca", "ca_sha256"}`` (paths; the CA's SHA-256 fingerprint)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    tls_dir = Path(tls_dir)
    tls_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(tls_dir, 0o700)
    if not (tls_dir / "ca.pem").is_file() or not (tls_dir / "ca-key.pem").is_file():
        _make_ca(tls_dir)
    ca = x509.load_pem_x509_certificate((tls_dir / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((tls_dir / "ca-key.pem").read_bytes(), None)
    ips = sorted({ipaddress.ip_address(a) for a in [*addresses, "127.0.0.1", "::1"]}, key=str)
    names = host_names()
    want = {*(f"dns:{n}" for n in names), *(f"ip:{ip}" for ip in ips)}
    cert_path, key_path = tls_dir / "server.pem", tls_dir / "server-key.pem"
    now = datetime.datetime.now(datetime.timezone.utc)
    if cert_path.is_file() and key_path.is_file():
        old = x509.load_pem_x509_certificate(cert_path.read_bytes())
        san = old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        have = {*(f"dns:{n}" for n in san.get_values_for_type(x509.DNSName)),
                *(f"ip:{ip}" for ip in san.get_values_for_type(x509.IPAddress))}
        fresh = old.not_valid_after_utc - now > datetime.timedelta(days=30)
        if fresh and want <= have and old.issuer == ca.subject:
            return _paths(tls_dir, ca)
    key = _key()
    cert = (x509.CertificateBuilder().subject_name(_name(names[-1]))
            .issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=SERVER_DAYS))
            .add_extension(x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in names] + [x509.IPAddress(ip) for ip in ips]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                         False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_private(key_path, key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM)
                          + (tls_dir / "ca.pem").read_bytes())  # the chain
    return _paths(tls_dir, ca)


def _paths(tls_dir: Path, ca) -> dict:
    from cryptography.hazmat.primitives import serialization
    der = ca.public_bytes(serialization.Encoding.DER)
    fp = hashlib.sha256(der).hexdigest().upper()
    return {"cert": tls_dir / "server.pem", "key": tls_dir / "server-key.pem",
            "ca": tls_dir / "ca.pem",
            "ca_sha256": ":".join(fp[i:i + 2] for i in range(0, len(fp), 2))}


# ------------------------------------------------------------------ join URLs and QR codes

def base_urls(host: str, port: int, tls: bool) -> list[str]:
    """The URLs students can use: one per LAN address when bound to every interface, else
    the bound address (loopback: only this machine)."""
    scheme = "https" if tls else "http"
    if host in ("0.0.0.0", "::", ""):
        hosts = lan_addresses() or ["127.0.0.1"]
    else:
        hosts = [host]
    return [f"{scheme}://{h if ':' not in h else f'[{h}]'}:{port}" for h in hosts]


def qr_terminal(text: str) -> str:
    """``text`` as a QR code of half-block characters (two modules per character row)."""
    import segno
    buf = io.StringIO()
    segno.make(text, error="m").terminal(out=buf, compact=True, border=2)
    return buf.getvalue()


def qr_svg(text: str) -> str:
    """``text`` as an SVG QR code (no XML declaration: fits inside HTML or a data URI)."""
    import segno
    buf = io.BytesIO()
    segno.make(text, error="m").save(buf, kind="svg", xmldecl=False, scale=6, border=2,
                                     dark="#111", light="#fff")
    return buf.getvalue().decode()
