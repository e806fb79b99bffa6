"""Fault-injection test beds, used by the tests (``tests/netns``, ``tests/integration``,
``tests/bench``) and the benchmarks (``bench/nemesis.py``, ``kafka-rpc bench --cluster``), never by
a running server: local multi-node clusters (``bench_cluster``), Linux network namespaces with
real network faults (``netns``, ``netns_cluster``), the workload that records a history of Batch
Coordinator operations (``coordinator_workload``), its checker (``history``) and the driver of
fault runs (``nemesis``). The operator commands are in ``kafka_rpc.tools``."""
