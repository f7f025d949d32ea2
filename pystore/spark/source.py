"""The ``pystore`` PySpark data source: batch read, streaming read and batch write of a message store
(docs/api.md "Spark — pystore.spark"). Spark's Python workers must be able to import ``pystore`` (an
installed package, or ``PYTHONPATH``).

The readers plan in a Python worker, which has no Spark session to ask for ``spark.default.parallelism``;
``register(spark)`` therefore registers :func:`with_parallelism`'s subclass, which carries the session's
parallelism as a class attribute (cloudpickle ships a class made at run time by value, attribute included).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NoReturn

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from pystore.spark.options import OptionError, check_options, parse_bool
from pystore.spark.schema import spark_schema

__all__ = ["PystoreDataSource", "with_parallelism"]


class PystoreDataSource(DataSource):
    """``spark.read/readStream.format("pystore").load(root)`` and
    ``df.write.format("pystore").mode("append").save(root)``."""

    #: Spark's default parallelism where the source was registered, the number of partitions a read aims
    #: at without ``minPartitions``; None: unknown (registered without :func:`with_parallelism`), the
    #: planner's cores then
    parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return "pystore"

    def schema(self) -> StructType:
        # load() of a read or a stream: an option neither takes is refused here, where the DataFrame is
        # defined (which of the two it is shows only in reader()/streamReader())
        _check_read_options(self.options)
        return spark_schema(parse_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        from pystore.spark.batch import PystoreBatchReader

        return PystoreBatchReader(self.options, schema, self.parallelism)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pystore.spark.stream import PystoreStreamReader

        try:
            return PystoreStreamReader(self.options, schema, self.parallelism)
        except (OptionError, ValueError, FileNotFoundError) as exc:
            # PySpark's stream runner masks an error raised while it builds the reader (its cleanup refers
            # to the reader it never got: "UnboundLocalError: reader"); a reader that raises the error from
            # its first call shows the error itself when the query starts.
            return _RefusedStreamReader(exc)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pystore.spark.sink import PystoreStreamWriter

        return PystoreStreamWriter(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pystore.spark.writer import PystoreWriter, WriteError

        check_options(self.options, "write")
        if overwrite:
            raise WriteError('a message store only appends: use .mode("append")')
        return PystoreWriter(self.options, schema)


def with_parallelism(parallelism: int | None) -> type[PystoreDataSource]:
    """The data source class whose reads aim at ``parallelism`` partitions (Spark's
    ``defaultParallelism``) when no ``minPartitions`` is given; :class:`PystoreDataSource` itself for None."""
    if parallelism is None:
        return PystoreDataSource
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        raise ValueError("parallelism must be an integer >= 1, got %r" % (parallelism,))
    return type(
        "PystoreDataSource",
        (PystoreDataSource,),
        {"parallelism": parallelism, "__module__": __name__, "__doc__": PystoreDataSource.__doc__},
    )


def _check_read_options(options: Mapping[str, Any]) -> None:
    """Refuse, at load(), an option that neither a batch read nor a stream takes."""
    check_options(options, "read")


class _RefusedStreamReader(DataSourceStreamReader):
    """A stream reader whose options were refused: every call raises that error."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def _raise(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict:
        self._raise()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        self._raise()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._raise()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        self._raise()
