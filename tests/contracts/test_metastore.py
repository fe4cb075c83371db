"""Spark's Hive client reaches a TLS metastore through a Java trust store made from the
settings' CA file, once per CA (the JDK's keytool, for real)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from thrift.transport.TTransport import TTransportException

from keystone.contracts import metastore
from keystone.contracts.settings import Settings
from keystone.stack.kafka_security import make_certificates


def test_without_a_ca_spark_reaches_the_metastore_in_plaintext() -> None:
    settings = Settings(metastore_uri="thrift://hms:9083")
    assert metastore.spark_conf(settings) == {
        "spark.hadoop.hive.metastore.uris": "thrift://hms:9083"
    }
    assert metastore.host_port(settings) == ("hms", 9083)


def test_with_a_ca_spark_trusts_it_through_a_trust_store_made_once_per_ca(tmp_path: Path) -> None:
    made_ca = Settings(state_dir=tmp_path / "ca", kafka_security="sasl_ssl")
    make_certificates(made_ca)  # any CA will do
    ca = made_ca.kafka_tls_dir / "ca.pem"
    settings = Settings(
        state_dir=tmp_path, metastore_uri="thrift://hms:9083", metastore_ssl_ca_file=str(ca)
    )
    conf = metastore.spark_conf(settings)
    store = Path(conf["spark.hadoop.hive.metastore.truststore.path"])
    assert conf["spark.hadoop.hive.metastore.use.SSL"] == "true"
    listed = subprocess.run(
        ["keytool", "-list", "-keystore", str(store), "-storetype", "PKCS12", "-storepass",
         conf["spark.hadoop.hive.metastore.truststore.password"]],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert "trustedCertEntry" in listed
    made = store.stat().st_mtime_ns
    assert metastore.trust_store(settings) == store and store.stat().st_mtime_ns == made
    make_certificates(made_ca.model_copy(update={"bind_host": "127.0.0.2"}))  # a new CA
    assert metastore.trust_store(settings) != store


def test_a_metastore_not_yet_listening_is_an_error_raised_not_a_line_printed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stack's health check asks while the metastore starts: Thrift's own ERROR lines
    would land between `keystone stack up`'s."""
    with socket.socket() as taken:  # a port nothing listens on
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
    client = metastore.thrift_client(Settings(metastore_uri=f"thrift://127.0.0.1:{port}"))
    with pytest.raises(TTransportException):
        client.open()
    assert [r.getMessage() for r in caplog.records if r.name.startswith("thrift")] == []
