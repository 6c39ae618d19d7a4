"""Test certificates made with the openssl command: a CA, a server certificate it signs
for the name localhost only (not 127.0.0.1: a test connects by that address to see it refused), and
a second CA that signed nothing (the "wrong CA"). `issue` signs more: a Redis Cluster's node
certificate (its nodes are announced by ip) and client certificates."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Certs:
    """Paths of the PEM files."""

    ca: Path
    cert: Path
    key: Path
    other_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _self_signed_ca(name: str, cwd: Path) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        "2",
        "-subj",
        f"/CN=horae test {name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=cwd,
    )


def make_certs(directory: Path) -> Certs:
    """Generate the files under `directory` (fails the test, never skips, without openssl)."""
    if shutil.which("openssl") is None:
        pytest.fail(
            "the TLS tests need the openssl command (Debian "
            "package openssl) to make their certificates"
        )
    directory.mkdir(parents=True, exist_ok=True)
    _self_signed_ca("ca", directory)
    _self_signed_ca("other-ca", directory)
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
        cwd=directory,
    )
    (directory / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
        cwd=directory,
    )
    return Certs(
        directory / "ca.crt",
        directory / "server.crt",
        directory / "server.key",
        directory / "other-ca.crt",
    )


def issue(certs: Certs, name: str, *, san: str, usage: str) -> tuple[Path, Path]:
    """A certificate `name.crt` (and its key `name.key`) signed by the CA, beside the CA's files.

    Args:
        certs: the CA that signs.
        name: the file names' stem and the certificate's CN.
        san: its subjectAltName, e.g. "DNS:localhost,IP:127.0.0.1".
        usage: its extendedKeyUsage, e.g. "serverAuth,clientAuth".
    """
    directory = certs.ca.parent
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN={name}",
        cwd=directory,
    )
    (directory / f"{name}.cnf").write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        f"{name}.crt",
        "-days",
        "2",
        "-extfile",
        f"{name}.cnf",
        cwd=directory,
    )
    return directory / f"{name}.crt", directory / f"{name}.key"
