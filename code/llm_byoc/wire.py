"""JSON codec for typed messages between our own processes (no pickle).

A ``MessageCodec`` knows a fixed set of frozen dataclasses and enums and
rebuilds only those, so a peer can never make us construct (and so run)
anything else. Plain JSON values (numbers, strings, lists, dicts) pass through.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Iterable


class MessageCodec:
    def __init__(self, messages: Iterable[type], enums: Iterable[type[enum.Enum]] = (), error: type[Exception] = ValueError):
        self._messages = {cls.__name__: cls for cls in messages}
        self._enums = {cls.__name__: cls for cls in enums}
        self._error = error

    def encode(self, message: Any) -> bytes:
        if type(message).__name__ not in self._messages:
            raise self._error(f"{type(message).__name__} is not a message of this protocol")
        return json.dumps(self._to_plain(message), separators=(",", ":")).encode()

    def decode(self, data: bytes) -> Any:
        try:
            plain = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise self._error(f"not JSON: {exc}") from None
        if not isinstance(plain, dict) or "__t" not in plain:
            raise self._error("a message must be a JSON object with a type")
        return self._from_plain(plain)

    def _to_plain(self, value: Any) -> Any:
        if isinstance(value, enum.Enum):
            return {"__e": type(value).__name__, "v": value.value}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out = {"__t": type(value).__name__}
            for f in dataclasses.fields(value):
                out[f.name] = self._to_plain(getattr(value, f.name))
            return out
        if isinstance(value, (list, tuple)):
            return [self._to_plain(v) for v in value]
        if isinstance(value, dict):
            return {str(k): self._to_plain(v) for k, v in value.items()}
        return value

    def _from_plain(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self._from_plain(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "__e" in value:
            enum_cls = self._enums.get(value["__e"])
            if enum_cls is None:
                raise self._error(f"unknown enum {value['__e']!r}")
            try:
                return enum_cls(value.get("v"))
            except ValueError as exc:
                raise self._error(str(exc)) from None
        if "__t" not in value:
            return {k: self._from_plain(v) for k, v in value.items()}
        name = value["__t"]
        cls = self._messages.get(name)
        if cls is None:
            raise self._error(f"unknown message type {name!r}")
        kwargs = {k: self._from_plain(v) for k, v in value.items() if k != "__t"}
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise self._error(f"bad fields for {name}: {exc}") from None
