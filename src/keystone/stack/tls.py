"""The certificates of the embedded stack's TLS services (Kafka secured, the metastore over
TLS), made with openssl: for each service a CA of its own signs one certificate, for the
stack's addresses, once; its key never leaves the work folder, so nobody can sign another
certificate that the service's clients (or, for Kafka, its controllers) would take. They are
made again only when the addresses change."""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from keystone.contracts.errors import StackError
from keystone.contracts.settings import Settings

# What the service keeps of its key and certificate: files it makes in the work folder (named
# in `issue`'s `keeps`), given the work folder, the key's file and the certificate's.
Keep = Callable[[Path, Path, Path], None]


def subject_names(settings: Settings) -> str:
    """The addresses a certificate is for (clients check them)."""

    def name(host: str) -> str:
        try:
            return f"IP:{ipaddress.ip_address(host)}"
        except ValueError:
            return f"DNS:{host}"

    return ",".join([*sorted({name(settings.bind_host), "IP:127.0.0.1"}), "DNS:localhost"])


def issue(
    folder: Path, settings: Settings, subject: str, usage: str, keeps: tuple[str, ...], keep: Keep
) -> None:
    """Into `folder` (its owner's only): `ca.pem`, and the files `keeps` that `keep` makes of
    a key and the certificate the CA signed for `subject` and the stack's addresses (`usage`:
    its extendedKeyUsage). Unless they were made for these addresses already."""
    names, stamp = subject_names(settings), folder / "subject-names"
    made = [folder / "ca.pem", *(folder / name for name in keeps)]
    if stamp.exists() and stamp.read_text() == names and all(p.exists() for p in made):
        return
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    with tempfile.TemporaryDirectory(dir=folder) as name:
        work = Path(name)
        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
            "-subj", f"/CN={subject}-ca", "-keyout", work / "ca.key", "-out", work / "ca.pem",
        )  # fmt: skip
        (work / "ext.cnf").write_text(f"subjectAltName={names}\nextendedKeyUsage={usage}\n")
        openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={subject}",
            "-keyout", work / "server.key", "-out", work / "server.csr",
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", work / "server.csr", "-CA", work / "ca.pem",
            "-CAkey", work / "ca.key", "-set_serial", str(secrets.randbits(63)),
            "-days", "825", "-extfile", work / "ext.cnf", "-out", work / "server.pem",
        )  # fmt: skip
        keep(work, work / "server.key", work / "server.pem")
        for path in made:  # into place whole; the stamp last, so a crash meanwhile redoes it
            os.replace(work / path.name, path)
    stamp.write_text(names)


def openssl(*args: str | Path, env: Mapping[str, str] | None = None) -> None:
    result = subprocess.run(
        ["openssl", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env=None if env is None else {**os.environ, **env},
    )
    if result.returncode != 0:
        raise StackError(f"openssl {args[0]} failed: {result.stderr.strip()}")
