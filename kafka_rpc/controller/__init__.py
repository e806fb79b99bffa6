"""The KRaft controller core (sans-io): the metadata image, and Kafka's ``QuorumController`` with
its ``*ControlManager``s, each a module owning its commands, its records' replay and its part of
the snapshot (docs/architecture.md): ``features`` (FeatureControlManager), ``cluster``
(ClusterControlManager, BrokerHeartbeatManager's state machine), ``replication``
(ReplicationControlManager; ``placement``), ``configuration`` (ConfigurationControlManager),
``producer_ids`` (ProducerIdControlManager), ``acls`` (AclControlManager), ``scram``
(ScramControlManager), and our own ``chunks`` (KIP-1114) and ``coordinator_mapping``
(KIP-1164). ``base`` is what they share, ``replay`` and ``snapshot`` dispatch over them,
``quorum_controller`` runs the event loop. Nothing here knows sockets or the Raft module."""
