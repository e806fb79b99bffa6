"""Request handlers, one module per API. Importing this package registers every handler with
``kafka_rpc.api.registry.default_registry``."""

from kafka_rpc.handlers import acls as acls  # CreateAcls, DeleteAcls, DescribeAcls
from kafka_rpc.handlers import alter_configs as alter_configs  # (Incremental)AlterConfigs
from kafka_rpc.handlers import api_versions, controller, diskless, find_coordinator, metadata, raft
from kafka_rpc.handlers import chunks as chunks  # CreateChunks, AlterChunkAssignments (KIP-1114)
from kafka_rpc.handlers import cluster as cluster  # UnregisterBroker, DescribeCluster
from kafka_rpc.handlers import configs as configs  # DescribeConfigs
from kafka_rpc.handlers import envelope as envelope  # Envelope (forwarded admin requests)
from kafka_rpc.handlers import features as features  # UpdateFeatures
from kafka_rpc.handlers import log_dirs as log_dirs  # DescribeLogDirs
from kafka_rpc.handlers import reassignments as reassignments  # ElectLeaders, reassignments
from kafka_rpc.handlers import sasl as sasl  # SaslHandshake, SaslAuthenticate
from kafka_rpc.handlers import scram_credentials as scram_credentials  # AlterUserScramCreds
from kafka_rpc.handlers import topic_partitions as topic_partitions  # DescribeTopicPartitions
from kafka_rpc.handlers import topics as topics  # CreateTopics, DeleteTopics

__all__ = ["api_versions", "controller", "diskless", "find_coordinator", "metadata", "raft"]
