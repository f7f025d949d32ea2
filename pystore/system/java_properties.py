"""Java ``.properties`` text (RocketMQ's ``broker.conf``): decoding the bytes, parsing keys and values with
``Properties.load``'s rules (comments, continued lines, ``\\uXXXX`` escapes, ``=``/``:``/blank separators, the last
of a repeated key) and escaping a key or value back. ``StoreConfig.from_properties`` and ``to_properties`` use it;
a malformed escape is a ``ConfigError`` naming the key."""

from __future__ import annotations

import re

from pystore.errors import ConfigError

__all__ = ["decode_properties", "escape_properties", "parse_properties"]

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_UNESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f", "\\": "\\\\"}
_BLANK = " \t\f"


def decode_properties(data: bytes) -> str:
    """UTF-8 (what editors write) when it decodes, else ISO-8859-1 (what Java's ``Properties.load`` reads)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def parse_properties(text: str) -> dict[str, str]:
    """Keys to unescaped, trimmed values; a repeated key keeps its last value, as in Java."""
    props: dict[str, str] = {}
    pending: str | None = None
    for natural in re.split(r"\r\n|\r|\n", text):
        line = natural.lstrip(_BLANK)
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending = ""
        backslashes = len(line) - len(line.rstrip("\\"))
        if backslashes % 2:  # continued on the next line, whose leading blanks are dropped
            pending += line[:-1]
            continue
        key, value = _split_entry(pending + line)
        pending = None
        key = _unescape(key, key)
        props[key] = _unescape(value, key).strip()
    if pending:
        key, value = _split_entry(pending)
        props[_unescape(key, key)] = _unescape(value, key).strip()
    return props


def _split_entry(line: str) -> tuple[str, str]:
    end = 0
    while end < len(line) and line[end] not in "=:" + _BLANK:
        end += 2 if line[end] == "\\" else 1
    end = min(end, len(line))
    start = end
    while start < len(line) and line[start] in _BLANK:
        start += 1
    if start < len(line) and line[start] in "=:":
        start += 1
    while start < len(line) and line[start] in _BLANK:
        start += 1
    return line[:end], line[start:]


def _unescape(text: str, key: str) -> str:
    if "\\" not in text:
        return text
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char != "\\" or i == len(text):
            out.append(char if char != "\\" else "")
            continue
        char = text[i]
        i += 1
        if char == "u":
            digits = text[i : i + 4]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigError(key, text, "malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(char, char))
    result = "".join(out)
    if re.search("[\ud800-\udfff]", result):  # Java writes astral characters as surrogate pairs
        result = result.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return result


def escape_properties(text: str, key: bool = False) -> str:
    out = []
    for i, char in enumerate(text):
        if char in _UNESCAPES:
            out.append(_UNESCAPES[char])
        elif char == " ":
            out.append("\\ " if key or i == 0 else " ")
        elif char in "=:#!":
            out.append("\\" + char)
        elif " " < char <= "~":
            out.append(char)
        else:
            units = char.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[j]:02X}{units[j + 1]:02X}" for j in range(0, len(units), 2))
    return "".join(out)
