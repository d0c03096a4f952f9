"""Which planner judges a request's hits: the one of its API (chat, completions and
embeddings in hit.py; Messages in messages.py; Responses in responses_answers.py)."""

from __future__ import annotations

from sidecar.entries import Entry
from sidecar.gateway.hit import HitPlanner, ReplayLimits, Serve, plan_hit
from sidecar.gateway.hit_bodies import HitBodies
from sidecar.gateway.messages import plan_message_hit
from sidecar.gateway.responses_answers import plan_response_hit
from sidecar.results.pacing import Pacing
from sidecar.wire.anthropic.keys import MESSAGES
from sidecar.wire.openai.keys import KeyedRequest
from sidecar.wire.openai.responses import RESPONSES


def planner_for(
    endpoint: str,
    kr: KeyedRequest,
    pace: Pacing,
    limits: ReplayLimits,
    bodies: HitBodies | None = None,
) -> HitPlanner:
    """The LookupQuery.accept of one request to `endpoint` (whole-body hits of chat,
    completions and embeddings rendered from `bodies`' templates)."""

    def plan(entry: Entry) -> Serve | None:
        if endpoint == MESSAGES:
            return plan_message_hit(kr, entry, pace, limits)
        if endpoint == RESPONSES:
            return plan_response_hit(kr, entry, pace, limits)
        return plan_hit(endpoint, kr, entry, pace, limits, bodies)

    return HitPlanner(plan)
