"""The x-infercache-unknown-fields header (gateway/unknown_fields.py): any body key,
however odd or long, gives a header value a response can carry."""

from __future__ import annotations

from urllib.parse import unquote

from sidecar.gateway.unknown_fields import MAX_HEADER_BYTES, unknown_fields_headers


def test_names_are_percent_encoded_and_round_trip() -> None:
    """CR/LF, commas, percent, spaces and non-ASCII are encoded; paths read as themselves."""
    names = ("a,b", "messages[0].name", "x\r\nset-cookie: a=b", "100%", "é")
    [(header, value)] = unknown_fields_headers(names)
    assert header == b"x-infercache-unknown-fields"
    assert value == b"a%2Cb,messages[0].name,x%0D%0Aset-cookie%3A%20a%3Db,100%25,%C3%A9"
    assert [unquote(v) for v in value.decode().split(",")] == list(names)


def test_a_lone_surrogate_never_raises() -> None:
    """The body parser refuses them; the header would still encode one."""
    assert unknown_fields_headers(("\ud800",)) == [(b"x-infercache-unknown-fields", b"%ED%A0%80")]


def test_the_header_is_capped_and_the_rest_counted() -> None:
    """The first names that fit whole in 1 KiB; the others counted; none fitting: only
    the count."""
    names = [f"{i:09d}" for i in range(200)]  # 9 bytes each, 10 with the comma
    got = dict(unknown_fields_headers(names))
    assert got[b"x-infercache-unknown-fields"] == ",".join(names[:102]).encode()
    assert len(got[b"x-infercache-unknown-fields"]) == 1019 <= MAX_HEADER_BYTES
    assert got[b"x-infercache-unknown-fields-omitted"] == b"98"
    assert unknown_fields_headers(("k" * 5000,)) == [(b"x-infercache-unknown-fields-omitted", b"1")]
    assert unknown_fields_headers(()) == []
