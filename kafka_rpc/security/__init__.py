"""Secure listeners (issue 15, DESIGN section 10): TLS contexts from Kafka's ``ssl.*`` keys
(:mod:`.tls`), SASL PLAIN and SCRAM (:mod:`.sasl`), principals (:mod:`.principal`) and Kafka's
StandardAuthorizer semantics (:mod:`.authorizer`)."""
