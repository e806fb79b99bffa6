"""Secure listeners (docs/security.md): TLS contexts from Kafka's ``ssl.*`` keys
(:mod:`.tls`), SASL PLAIN and SCRAM (:mod:`.sasl`), principals (:mod:`.principal`), Kafka's
StandardAuthorizer semantics and the table of what each API needs (:mod:`.authorizer`), ACLs in
the metadata log (:mod:`.acls`), a listener's bundle of these (:mod:`.listener`) and this node's
client side (:mod:`.client`). The connection that uses them is
``kafka_rpc.server.secure_connection.SecureConnection``."""
