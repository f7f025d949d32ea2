"""The ``pystore`` PySpark data source: batch read, streaming read and batch write of a message store
(docs/api.md "Spark — pystore.spark"). The class is pickled by reference, so Spark's Python workers must be
able to import ``pystore`` (an installed package, or ``PYTHONPATH``)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from pystore.spark.schema import spark_schema

__all__ = ["PystoreDataSource"]


class PystoreDataSource(DataSource):
    """``spark.read/readStream.format("pystore").load(root)`` and
    ``df.write.format("pystore").mode("append").save(root)``."""

    @classmethod
    def name(cls) -> str:
        return "pystore"

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        from pystore.spark.batch import PystoreBatchReader

        return PystoreBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pystore.spark.stream import PystoreStreamReader

        return PystoreStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pystore.spark.writer import PystoreWriter, WriteError

        if overwrite:
            raise WriteError('a message store only appends: use .mode("append")')
        return PystoreWriter(self.options, schema)
