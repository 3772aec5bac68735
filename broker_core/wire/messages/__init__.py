"""One module per Kafka API: its request and response schemas (``REQUEST``, ``RESPONSE``) and
``error_body(version, request, error_code)``, the response body that reports ``error_code`` for
a request that could not be handled (``None`` when the API has no way to say it, e.g. Produce
with ``acks=0`` or a per-partition API whose request body is unknown).

Field layouts follow Kafka's message specs, written out in this project's DSL
(:mod:`broker_core.wire.schema`) with Kafka's field names in snake_case. Each schema lists Kafka's
fields for every version up to the highest one Sluice serves, so code written against older
versions (e.g. ListOffsets' v0-only ``old_style_offsets``) keeps encoding; fields of newer versions
are left out until Sluice advertises them.
"""
