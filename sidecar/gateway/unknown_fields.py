"""The `x-infercache-unknown-fields` response header: the body fields the gateway does
not know, as a header that can never break the response.

A body key is any JSON string: CR/LF, non-ASCII, commas, megabytes. Each name is
percent-encoded (UTF-8, `urllib.parse.quote`; letters, digits, `_.-~[]` kept, so
`messages[0].name` reads as itself), joined by commas, and the header holds the
first names that fit in MAX_HEADER_BYTES whole; how many were left out is
`x-infercache-unknown-fields-omitted`.
"""

from __future__ import annotations

from urllib.parse import quote

from sidecar.gateway.reply import Headers

UNKNOWN_HEADER = b"x-infercache-unknown-fields"
OMITTED_HEADER = b"x-infercache-unknown-fields-omitted"
MAX_HEADER_BYTES = 1024


def unknown_fields_headers(names: tuple[str, ...] | list[str]) -> Headers:
    """The headers reporting `names` (none when there are none)."""
    listed: list[str] = []
    size = 0
    for name in names:
        # surrogatepass: a lone surrogate (refused by the body parser) still encodes.
        encoded = quote(name, safe="[]", errors="surrogatepass")
        grown = size + len(encoded) + (1 if listed else 0)
        if grown > MAX_HEADER_BYTES:
            break
        listed.append(encoded)
        size = grown
    headers: Headers = []
    if listed:
        headers.append((UNKNOWN_HEADER, ",".join(listed).encode("ascii")))
    if len(listed) < len(names):
        headers.append((OMITTED_HEADER, str(len(names) - len(listed)).encode("ascii")))
    return headers
