"""A 3-node quorum whose controller listener is mutual TLS: Raft (Vote, Fetch,
BeginQuorumEpoch), the brokers' registration and heartbeats all go over TLS with client
certificates, and the authorizer lets only the nodes' certificate subject do CLUSTER_ACTION.
One bounded multi-process run (three ``kafka-rpc serve``), every process SIGKILLed in a
``finally`` (tests/integration/test_raft_cluster.py's Cluster)."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from kafka_rpc.client import KafkaRpcClient
from kafka_rpc.protocol import codec
from kafka_rpc.security.client import ClientSecurity
from tests.integration.test_raft_cluster import STEP_TIMEOUT, Cluster
from tests.security.certs import make_ca
from tests.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BUDGET = 40.0


def _ctx(truststore, keystore) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(truststore))
    ctx.load_cert_chain(str(keystore))
    return ctx


class TlsCluster(Cluster):
    """The Cluster with its test clients on TLS with the nodes' own certificate."""

    security: ClientSecurity

    async def client(self, i: int) -> KafkaRpcClient:
        c = self._clients.get(i)
        if c is None:
            c = await KafkaRpcClient.connect(
                self.nodes[i].address, connect_timeout=3.0, request_timeout=5.0,
                security=self.security,
            )  # fmt: skip
            self._clients[i] = c
        return c


async def test_three_nodes_over_mutual_tls(tmp_path):
    ca = make_ca(tmp_path / "pki")
    node_ks = ca.issue(tmp_path / "pki", "localhost", ou="kafka", o="acme")
    stranger_ks = ca.issue(tmp_path / "pki", "stranger")
    props = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
        "ssl.keystore.location": str(node_ks),
        "ssl.truststore.location": str(ca.path),
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:CN=localhost,OU=kafka,O=acme",
        "allow.everyone.if.no.acl.found": "false",
    }
    cluster = TlsCluster(tmp_path, **props)
    cluster.security = ClientSecurity(_ctx(ca.path, node_ks))
    try:
        async with asyncio.timeout(BUDGET):
            await cluster.start()
            lead = await until(cluster.agreed_leader, "one leader over TLS", timeout=STEP_TIMEOUT)
            hw0 = lead.high_watermark

            async def registered():
                c = await cluster.client(lead.leader_id)
                resp = await c.request(codec.message_class("DescribeClusterRequest")(
                    endpoint_type=2, include_fenced_brokers=True))  # fmt: skip
                return resp.error_code == 0 and len(resp.brokers) == 3 or None

            # the quorum commits (NoOpRecords) and the three controllers answer DescribeCluster
            await until(registered, "DescribeCluster over TLS", timeout=STEP_TIMEOUT)

            async def brokers_unfenced():
                p = await cluster.agreed_leader()
                if p is None or p.high_watermark <= hw0:
                    return None
                # every node's broker role registered through the TLS controller channel
                text = "".join(n.stderr_text() for n in cluster.nodes.values())
                return text.count("unfenced (broker epoch") >= 3 or None

            await until(brokers_unfenced, "three brokers registered and unfenced over TLS",
                        timeout=STEP_TIMEOUT)  # fmt: skip
            # a certificate of the same CA but another subject: authenticated, not authorized
            stranger = ClientSecurity(_ctx(ca.path, stranger_ks))
            m = codec.module("DescribeQuorumRequest")
            async with KafkaRpcClient(cluster.nodes[1].address, security=stranger,
                                      connect_timeout=3.0) as c:  # fmt: skip
                resp = await c.request(m.DescribeQuorumRequest(topics=()))
                assert resp.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED
            # no certificate at all: the TLS handshake fails, the node logs it once
            plain_tls = ClientSecurity(ssl.create_default_context(cafile=str(ca.path)))
            c = KafkaRpcClient(cluster.nodes[1].address, security=plain_tls, connect_timeout=1.0)
            with pytest.raises(OSError):
                await c.request(m.DescribeQuorumRequest(topics=()))
            await c.close()
        cluster.assert_no_tracebacks()
    finally:
        await cluster.close()
