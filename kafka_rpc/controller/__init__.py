"""The KRaft controller core (sans-io): the metadata image, record replay, the commands that turn
requests into records, and snapshots. Kafka's ``QuorumController`` and its ``*ControlManager``s;
nothing here knows sockets or the Raft module (DESIGN.md section 7)."""
