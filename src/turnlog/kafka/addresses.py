"""Bootstrap addresses, ``host:port[,host:port...]``: what one is, refused by name when it is not.

Here, in the Kafka room, because both the settings (checking ``TURNLOG_BOOTSTRAP_SERVERS``) and
the outage account (looking at each server of an address never reached) read them, and the
Kafka room must not import the settings: the settings hold the Kafka room's own values.
"""

from __future__ import annotations

import ipaddress
import re

# A host name or an IPv4 address (an IPv6 address goes in brackets and is checked as one).
_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def bootstrap_servers(value: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs of a ``host:port[,host:port...]`` list, or ``ValueError``
    saying which entry is wrong and how.

    aiokafka takes almost anything here and fails only later, as a broker it cannot reach:
    ``http://host:9092`` is looked up as a host named ``http://host``, and a port that is
    missing becomes 9092 (the Java clients refuse it, so one ``client.properties`` would mean
    two things). Refused here, the message names the setting and the entry at once, instead of
    a wait for a broker that no address could reach.
    """
    pairs: list[tuple[str, int]] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            raise ValueError("has an empty entry (host:port[,host:port...])")
        scheme = _SCHEME.match(entry)
        if scheme:
            raise ValueError(
                f"{entry!r} has a scheme: bootstrap servers are host:port, "
                f"without {scheme.group(1)}://"
            )
        if entry.startswith("["):
            host, bracket, rest = entry[1:].partition("]")
            if not bracket:
                raise ValueError(f"{entry!r}: an IPv6 address needs its closing ']'")
            if rest and not rest.startswith(":"):
                raise ValueError(f"{entry!r}: ']' must be followed by :port")
            port, sep, shown = rest[1:], rest[:1], f"[{host}]"
            try:
                ipaddress.IPv6Address(host.split("%", 1)[0])
            except ValueError:
                raise ValueError(f"{entry!r}: {host!r} is not an IPv6 address") from None
        else:
            host, sep, port = entry.rpartition(":")
            if not sep:
                host, port = entry, ""
            if ":" in host:
                raise ValueError(f"{entry!r}: an IPv6 address is written in brackets, [::1]:9092")
            if not host:
                raise ValueError(f"{entry!r} has no host (host:port)")
            if not _HOST.fullmatch(host):
                raise ValueError(f"{entry!r}: {host!r} is not a host name or address")
            shown = host
        if not sep or not port:
            raise ValueError(f"{entry!r} has no port (host:port, e.g. {shown}:9092)")
        if not port.isdigit() or not port.isascii():
            raise ValueError(f"{entry!r}: the port {port!r} is not a number")
        if not 1 <= int(port) <= 65535:
            raise ValueError(f"{entry!r}: the port {int(port)} is not in 1-65535")
        pairs.append((host, int(port)))
    return pairs
