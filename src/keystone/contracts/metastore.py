"""How every client of the Hive metastore connects: `metastore_uri`, over TLS when
`metastore_ssl_ca_file` names the CA that signed the metastore's certificate (the embedded one's
with `metastore_security` tls).

- `thrift_client`: the Thrift client the project's Python uses (control making the Hive
  database, the tests).
- `spark_conf`: Spark's Hive client (Hive 2.3), which takes TLS as `hive.metastore.use.SSL` and
  a Java trust store: made from the CA file with the JDK's `keytool`, once per CA, beside the
  settings' state. The metastore asks for no client login: Hive 2.3 offers Kerberos (SASL) or
  nothing, which this project does not set up.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from hmsclient.hmsclient import HMSClient
from thrift.protocol import TBinaryProtocol
from thrift.transport import TSocket, TSSLSocket, TTransport

from keystone.contracts.errors import SinkError
from keystone.contracts.settings import Settings

# Thrift logs each refused connection at ERROR, then raises it: the caller decides what to say
# (a health check waiting for the metastore to start says nothing).
logging.getLogger("thrift").setLevel(logging.CRITICAL)

# A trust store holds the CA's certificate, which is public: its password guards nothing secret
# (Java's key stores need one), so it is a constant, not a credential.
TRUST_STORE_PASSWORD = "keystone-trust"


def host_port(settings: Settings) -> tuple[str, int]:
    parts = urlsplit(settings.metastore_uri)
    if parts.hostname is None or parts.port is None:
        raise SinkError(f"not a thrift://host:port address: {settings.metastore_uri!r}")
    return parts.hostname, parts.port


def thrift_client(settings: Settings, timeout: float = 30) -> HMSClient:
    """A client to open (`with thrift_client(settings) as client:`); over TLS, it checks the
    metastore's certificate against the CA and its address."""
    host, port = host_port(settings)
    if settings.metastore_ssl_ca_file:
        context = ssl.create_default_context(cafile=settings.metastore_ssl_ca_file)
        socket: TSocket.TSocket = TSSLSocket.TSSLSocket(
            host,
            port,
            ssl_context=context,
            server_hostname=host,
            # The context has checked the address (IP addresses too, which Thrift's own check
            # does not read).
            validate_callback=lambda _cert, _host: None,
        )
    else:
        socket = TSocket.TSocket(host, port)
    socket.setTimeout(timeout * 1000)
    return HMSClient(iprot=TBinaryProtocol.TBinaryProtocol(TTransport.TBufferedTransport(socket)))


def spark_conf(settings: Settings) -> dict[str, str]:
    """Spark's options for its Hive client to reach the metastore."""
    conf = {"spark.hadoop.hive.metastore.uris": settings.metastore_uri}
    if settings.metastore_ssl_ca_file:
        conf |= {
            "spark.hadoop.hive.metastore.use.SSL": "true",
            "spark.hadoop.hive.metastore.truststore.path": str(trust_store(settings)),
            "spark.hadoop.hive.metastore.truststore.password": TRUST_STORE_PASSWORD,
        }
    return conf


def trust_store(settings: Settings) -> Path:
    """The CA file as a PKCS12 trust store (Java's), made once per CA: named by the CA's
    digest, so a new CA gets a new store and a store is never changed under a reader."""
    try:
        ca = Path(settings.metastore_ssl_ca_file).read_bytes()
    except OSError as e:
        raise SinkError(f"the metastore's CA file is unreadable: {e}") from e
    folder = settings.conf_dir / "metastore-trust"
    store = folder / f"{hashlib.sha256(ca).hexdigest()[:16]}.p12"
    if store.exists():
        return store
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as work:
        made = Path(work) / store.name
        command = [
            "keytool", "-importcert", "-noprompt", "-alias", "ca",
            "-file", settings.metastore_ssl_ca_file, "-keystore", str(made),
            "-storetype", "PKCS12", "-storepass:env", "KEYSTONE_TRUST_STORE_PASSWORD",
        ]  # fmt: skip
        try:
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, "KEYSTONE_TRUST_STORE_PASSWORD": TRUST_STORE_PASSWORD},
            )
        except OSError as e:  # no keytool: a JDK's, which Spark needs anyway
            raise SinkError(f"keytool could not run: {e}") from e
        if result.returncode != 0:
            raise SinkError(
                f"keytool could not make a trust store of {settings.metastore_ssl_ca_file}: "
                f"{(result.stdout + result.stderr).strip()}"
            )
        os.replace(made, store)  # whole, for any reader
    return store
