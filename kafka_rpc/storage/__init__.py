"""The node's files on disk, as Apache Kafka keeps them: ``meta.properties`` and the directory
lock (:mod:`~kafka_rpc.storage.meta_properties`, Kafka's ``MetaProperties``,
``MetaPropertiesEnsemble`` and ``LogManager``'s ``.lock``), ``partition.metadata``
(:mod:`~kafka_rpc.storage.partition_metadata`, Kafka's ``PartitionMetadataFile``), the bootstrap
checkpoint (:mod:`~kafka_rpc.storage.bootstrap`, Kafka's ``BootstrapDirectory``), durable
small-file writes (:mod:`~kafka_rpc.storage.durable`, ``Utils.atomicMoveWithFallback``) and the
formatter behind ``kafka-rpc storage format`` and a first ``serve``
(:mod:`~kafka_rpc.storage.formatter`, Kafka's ``StorageTool`` / ``Formatter``). Failures raise
:class:`~kafka_rpc.storage.errors.StorageError`. Settings come from :mod:`kafka_rpc.config`,
which never imports this package.
"""
