"""Command-line tools with Kafka's syntax and output (``kafka-dump-log.sh``,
``kafka-topics.sh``); ``kafka_rpc.cli`` registers them as subcommands."""
