"""Test certificates for online run_ut, made with the ``openssl`` command: a CA, the receiver's and the
sender's certificates signed by it, and a sender certificate from another CA (which must be refused)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _key_and_request(name: str, cn: str, cwd: Path) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)


def _ca(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}", cwd=cwd)


def _sign(name: str, ca: str, cwd: Path) -> None:
    (cwd / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext", cwd=cwd)


def make_tls(root: Path) -> dict[str, Path]:
    """Folders ``receiver`` (server.*, ca.crt), ``sender`` (client.*, ca.crt), ``rogue`` (client.* of
    another CA, ca.crt of ours) and ``no_ca`` (client.* of ours, no ca.crt)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    work = root / "pki"
    work.mkdir(parents=True)
    _ca("ca", work)
    _ca("rogue_ca", work)
    for name, ca in (("server", "ca"), ("client", "ca"), ("rogue", "rogue_ca")):
        _key_and_request(name, "127.0.0.1", work)
        _sign(name, ca, work)
    folders = {}
    layout = {"receiver": {"server.key": "server.key", "server.crt": "server.crt", "ca.crt": "ca.crt"},
              "sender": {"client.key": "client.key", "client.crt": "client.crt", "ca.crt": "ca.crt"},
              "rogue": {"client.key": "rogue.key", "client.crt": "rogue.crt", "ca.crt": "ca.crt"},
              "no_ca": {"client.key": "client.key", "client.crt": "client.crt"}}
    for folder, files in layout.items():
        path = root / folder
        path.mkdir()
        for target, source in files.items():
            shutil.copy(work / source, path / target)
        folders[folder] = path
    return folders
