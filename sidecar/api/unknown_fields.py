"""Refuse messages that carry fields this sidecar does not know (a newer client's):
the key's tree, and every request message that carries a key (Lookup, LookupBatch,
Store, LookupStream, StoreStream) with its other submessages.

Protobuf keeps unknown fields aside instead of failing, so a key field added by a
newer client would silently drop out of the key on an older sidecar, and two
requests that differ only there would share a digest. Here they are refused.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import cache

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from sidecar.errors import InvalidArgument


@cache
def _message_fields(descriptor: Descriptor) -> tuple[tuple[str, bool], ...]:
    """(name, repeated) of a message type's message-typed fields; map fields are skipped
    (their entries are scalars here)."""
    out = []
    for f in descriptor.fields:
        if f.message_type is None or f.message_type.GetOptions().map_entry:
            continue
        out.append((f.name, f.is_repeated))
    return tuple(out)


def refuse_unknown_fields(msg: Message, path: str, skip: Collection[str] = ()) -> None:
    """INVALID_ARGUMENT naming the first unknown field number found in `msg`'s tree.

    `path`: where `msg` is in the request ("" for the request itself, which the error
    then names by its type); `skip`: fields of `msg` checked elsewhere (the key, whose
    tree is checked where it is decoded and memoised; the traits).
    """
    unknown = UnknownFieldSet(msg)
    if len(unknown):
        number = min(unknown[i].field_number for i in range(len(unknown)))
        raise InvalidArgument(
            path or msg.DESCRIPTOR.name,
            f"carries field number {number}, which this sidecar does not know (a newer "
            "client's?); refused, since ignoring it could give two different requests one key",
        )
    prefix = f"{path}." if path else ""
    for name, repeated in _message_fields(msg.DESCRIPTOR):
        if name in skip:
            continue
        if repeated:
            for i, item in enumerate(getattr(msg, name)):
                refuse_unknown_fields(item, f"{prefix}{name}[{i}]")
        elif msg.HasField(name):
            refuse_unknown_fields(getattr(msg, name), f"{prefix}{name}")
