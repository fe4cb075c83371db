"""The Hive database every stream's tables are in, made through the metastore's Thrift API."""

from __future__ import annotations

import contextlib

from hmsclient.genthrift.hive_metastore.ttypes import (
    AlreadyExistsException,
    Database,
    NoSuchObjectException,
)
from thrift.Thrift import TException

from keystone.contracts import metastore
from keystone.contracts.errors import SinkError
from keystone.contracts.names import HIVE_DATABASE
from keystone.contracts.settings import Settings
from keystone.router.sinks.provision import Provisioner


class HiveProvisioner(Provisioner):
    def make(self) -> list[str]:
        return ensure_database(self.route.settings)

    def unmake(self) -> list[str]:
        """The shadow's table and its files (a table the router made: the metastore's own)."""
        route = self.route
        table = route.output.sink.table(route.stream.name, route.output.name)
        assert table is not None, "a Hive output's provisioner"
        try:
            with (
                metastore.thrift_client(route.settings) as client,
                contextlib.suppress(NoSuchObjectException),  # gone already
            ):
                client.drop_table(HIVE_DATABASE, table, True)
        except (TException, OSError) as e:
            uri = route.settings.metastore_uri
            raise SinkError(f"the Hive metastore at {uri} failed: {e}") from e
        return [f"table {HIVE_DATABASE}.{table}"]


def ensure_database(settings: Settings) -> list[str]:
    """Creates the Hive database of every stream's tables through the metastore's Thrift API
    (no Spark needed), where Spark itself would put it."""
    try:
        with metastore.thrift_client(settings) as client:
            try:
                client.get_database(HIVE_DATABASE)
                return []
            except NoSuchObjectException:
                location = f"{settings.warehouse_dir.rstrip('/')}/{HIVE_DATABASE}.db"
                try:
                    client.create_database(Database(name=HIVE_DATABASE, locationUri=location))
                except AlreadyExistsException:
                    return []  # made meanwhile by another writer
                return [f"Hive database {HIVE_DATABASE}"]
    except (TException, OSError) as e:
        raise SinkError(f"the Hive metastore at {settings.metastore_uri} failed: {e}") from e
