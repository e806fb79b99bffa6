"""A Raft replica of one partition log as Kafka's KRaft implements it (KIP-595, KIP-630,
KIP-516's topic-id Raft RPCs): a sans-io core (``core``), the log and quorum state on disk
(``file_log``, ``quorum_state``), an in-memory log for the simulator (``memory``) and the asyncio
driver (``driver``). Nothing here knows the controller: the state machine is a
:class:`~kafka_rpc.raft.api.StateMachine`."""
