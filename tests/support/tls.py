"""A throw-away CA, server and client certificates made with openssl (docs/security.md)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _signed(d: Path, name: str, ca: str, ca_key: str, ext: str) -> None:
    _run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(ext)
    _run("x509", "-req", "-in", f"{name}.csr", "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=d)


def make_pki(d: Path, ca_name: str = "netco-test-ca") -> Pki:
    """CA ``ca.pem``; ``switch.pem`` for 127.0.0.1/localhost; ``controller.pem`` (client)."""
    d.mkdir(parents=True, exist_ok=True)
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", f"/CN={ca_name}", cwd=d)
    _signed(d, "switch", "ca.pem", "ca.key",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    _signed(d, "controller", "ca.pem", "ca.key", "extendedKeyUsage=clientAuth\n")
    return Pki(d / "ca.pem", d / "switch.pem", d / "switch.key", d / "controller.pem",
               d / "controller.key")
