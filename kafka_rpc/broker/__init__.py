"""The broker role's side of KRaft: the channel to the active controller
(:mod:`kafka_rpc.broker.channel`, Kafka's ``NodeToControllerChannelManager``) and the broker's
registration and heartbeats (:mod:`kafka_rpc.broker.lifecycle`, Kafka's
``BrokerLifecycleManager``)."""
