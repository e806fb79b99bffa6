"""AlterUserScramCredentials (key 51) and AlterClientQuotas (key 49).

AlterClientQuotas: v0-1 on both listeners (``kafka-configs --alter --entity-type users
--add-config producer_byte_rate=...``), routed the same way
(:func:`~kafka_rpc.controller.client_quotas.alter_client_quotas`).


API: v0 on both listeners (``kafka-configs --alter --entity-type users --add-config
'SCRAM-SHA-256=[password=...]'``; a Kafka broker forwards it inside an Envelope).
Behavior: routed as CreateTopics (:func:`~kafka_rpc.broker.channel.answer_or_forward`); at the
active controller a write event
(:func:`~kafka_rpc.controller.scram.alter_user_scram_credentials`) answered once its records
commit. Errors per user: NOT_CONTROLLER (41), REQUEST_TIMED_OUT (7), and the command's codes.
"""

from __future__ import annotations

from kafka_rpc.api.registry import handles
from kafka_rpc.broker.forwarding import answer_or_forward
from kafka_rpc.controller.client_quotas import alter_client_quotas_error_response
from kafka_rpc.controller.scram import alter_user_scram_credentials_error_response

__all__ = ["alter_client_quotas", "alter_user_scram_credentials"]


def _error(request, version, code):
    return alter_user_scram_credentials_error_response(request, code, None)


@handles("AlterUserScramCredentialsRequest", error_response=_error)
async def alter_user_scram_credentials(ctx, request):
    return await answer_or_forward(
        ctx.services, ctx.listener.role, request, ctx.api_version, "alter_user_scram_credentials",
        lambda code: alter_user_scram_credentials_error_response(request, code, None),
    )  # fmt: skip


def _quota_error(request, version, code):
    return alter_client_quotas_error_response(request, code, None)


@handles("AlterClientQuotasRequest", error_response=_quota_error)
async def alter_client_quotas(ctx, request):
    return await answer_or_forward(
        ctx.services, ctx.listener.role, request, ctx.api_version, "alter_client_quotas",
        lambda code: alter_client_quotas_error_response(request, code, None),
    )  # fmt: skip
