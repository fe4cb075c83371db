"""The suite's metastore serves over TLS only (`KEYSTONE_METASTORE_SECURITY=tls`, issue 44), so
every Hive output of the suite reaches it through Spark's Hive client over TLS: here, what it
refuses."""

from __future__ import annotations

import pytest
from thrift.Thrift import TException

from keystone.contracts import metastore
from tests.support.stack import Stack


def test_the_metastore_answers_over_tls_checked_against_its_ca(stack: Stack) -> None:
    settings = stack.settings
    assert settings.metastore_ssl_ca_file == str(settings.metastore_tls_dir / "ca.pem")
    with metastore.thrift_client(settings) as client:
        assert "default" in client.get_all_databases()


def test_a_plaintext_client_gets_nothing(stack: Stack) -> None:
    plaintext = stack.settings.model_copy(update={"metastore_ssl_ca_file": ""})
    with pytest.raises((TException, OSError)), metastore.thrift_client(plaintext, 5) as client:
        client.get_all_databases()


def test_a_client_that_trusts_another_ca_refuses_the_metastore(stack: Stack) -> None:
    other_ca = str(stack.settings.kafka_tls_dir / "ca.pem")  # a CA of the stack, not its
    trusting = stack.settings.model_copy(update={"metastore_ssl_ca_file": other_ca})
    client = metastore.thrift_client(trusting, 5)
    with pytest.raises((TException, OSError)) as refused, client:
        client.get_all_databases()
    cause = getattr(refused.value, "inner", None) or refused.value  # Thrift wraps the SSL error
    assert "CERTIFICATE_VERIFY_FAILED" in str(cause)


def test_its_key_stays_its_owners(stack: Stack) -> None:
    folder = stack.settings.metastore_tls_dir
    for path in (folder, folder / "metastore.p12", folder / "keystore-password"):
        assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    assert not list(folder.glob("*.key")), "no CA key is left to sign with"
