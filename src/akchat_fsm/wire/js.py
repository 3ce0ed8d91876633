"""JavaScript-exact rules, public: what a JS value or string operation would say, in Python.

The reference validates with zod on JavaScript values, so every rule of the wire format that
measures a string, matches a pattern or reads a number must behave as JavaScript does, not as
Python does (docs/reference.md §8):

=========================  ==============================================================
name                       the JavaScript behaviour it mirrors
=========================  ==============================================================
``MAX_SAFE_INTEGER``       ``Number.MAX_SAFE_INTEGER`` (2**53 - 1)
``as_safe_int``            ``Number.isSafeInteger`` (``1.0`` is an integer, ``True`` is not)
``utf16_len``              ``String.prototype.length`` (UTF-16 code units)
``js_form``                string equality on UTF-16 code units (surrogate pairs joined)
``has_surrogate``          whether a string holds a code point UTF-8 cannot encode
``escape_surrogates``      ``JSON.stringify``'s ``\\udXXX`` escape of a lone surrogate (ES2019)
``js_number_to_string``    ``String(x)`` / ``JSON.stringify(x)`` for a finite number
``IDENTIFIER_PATTERN``     the reference's SafeIdentifier regular expression
``is_identifier``          ``SafeIdentifier.test(x)`` with JS ``RegExp`` semantics
``DATETIME_PATTERN``       zod 4.4.3 ``z.string().datetime({ offset: true })``
``is_zod_datetime``        that zod check, as ``safeParse(x).success``
=========================  ==============================================================

Pure functions and constants, no pydantic: hosts, adapters and tests may use them to check a
value the way the TypeScript packages will. ``__all__`` is pinned by a test (ADR-0117).
"""

from __future__ import annotations

import math
import re

__all__ = [
    "DATETIME_PATTERN",
    "IDENTIFIER_PATTERN",
    "MAX_SAFE_INTEGER",
    "as_safe_int",
    "escape_surrogates",
    "has_surrogate",
    "is_identifier",
    "is_zod_datetime",
    "js_form",
    "js_number_to_string",
    "utf16_len",
]

MAX_SAFE_INTEGER = 2**53 - 1

# Anchored, ASCII-only source shared by Python (`fullmatch`) and pydantic-core (Rust `regex`,
# where `$` is end-of-text only and explicit `[0-9]` avoids Unicode `\d`).
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN[1:-1], re.ASCII)

# zod 4.4.3 `z.string().datetime({ offset: true })`, spelled out: the leap-day alternative
# encodes the proleptic Gregorian rule (divisible by 4, centuries only when divisible by 400,
# so 0000-02-29 passes); seconds and fraction are optional (the 4.4.3 minutes-only quirk);
# the zone is `Z` or `+HH:MM` / `-HH:MM` with hours 00-23. Upper-case `T` and `Z` only.
_LEAP_DAY = r"(?:[0-9]{2}(?:[2468][048]|[13579][26]|0[48])|(?:[02468][048]|[13579][26])00)-02-29"
_DATE = (
    r"(?:" + _LEAP_DAY + r"|[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8])))"
)
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]+)?)?"
_ZONE = r"(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
DATETIME_PATTERN = "^" + _DATE + "T" + _TIME + _ZONE + "$"
_DATETIME = re.compile(DATETIME_PATTERN[1:-1], re.ASCII)


def utf16_len(text: str) -> int:
    """Length as JavaScript's ``String.prototype.length`` counts it: UTF-16 code units.

    An astral character (an emoji) counts 2; a lone surrogate counts 1.
    """
    # Astral characters take two code units; lone surrogates (legal in JS strings) take one,
    # which "surrogatepass" encodes as one unit too. Both branches run in C: a per-character
    # Python loop took seconds on a 50 MB string.
    if text.isascii():
        return len(text)
    return len(str.encode(text, "utf-16-le", "surrogatepass")) // 2


_SURROGATE = re.compile("[\ud800-\udfff]")


def js_form(text: str) -> str:
    """The one Python form of a JavaScript string: surrogate pairs joined, lone ones kept.

    JavaScript strings are UTF-16 code units, so ``"\\ud83d\\ude00"`` *is* ``"😀"`` there;
    Python keeps two code points apart unless joined. ``json.loads`` already joins escaped pairs;
    this does the same for a Python-built string, so equal JS strings are equal here.
    """
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (so it is not encodable as UTF-8).

    JavaScript strings may hold lone surrogates; Python strings may too, but no UTF-8 store
    accepts them, so a writer must know before it encodes.
    """
    return not text.isascii() and _SURROGATE.search(text) is not None


def escape_surrogates(json_text: str) -> str:
    """``JSON.stringify``'s escaping of lone surrogates applied to Python's JSON output.

    Since ES2019 ``JSON.stringify`` writes a lone surrogate as a lowercase ``\\udXXX`` escape
    (well-formed JSON text); ``json.dumps(ensure_ascii=False)`` would write the raw code point,
    which no UTF-8 store accepts. Text without one is returned as is.
    """
    if json_text.isascii():
        return json_text
    try:
        json_text.encode("utf-8")  # C-fast; a regex search is ~5x slower on 40 KB
        return json_text
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)


def is_identifier(value: object) -> bool:
    """The reference's SafeIdentifier: ``^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$``.

    As a JavaScript ``RegExp`` matches it: ASCII classes only, and ``$`` does not accept a
    trailing newline. Anything but a ``str`` is not an identifier.
    """
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


def is_zod_datetime(value: object) -> bool:
    """``updatedAt`` acceptance exactly as zod 4.4.3 ``datetime({ offset: true })``.

    Seconds optional, any fraction, ``Z`` or ``±HH:MM``, real leap days; see
    docs/reference.md §1.3 for what passes and what does not.
    """
    return isinstance(value, str) and _DATETIME.fullmatch(value) is not None


def js_number_to_string(value: float | int) -> str:
    """``String(x)`` / ``JSON.stringify(x)`` for a finite JS number.

    Python's ``repr`` and JavaScript both print the shortest digits that round-trip, so only the
    layout differs: JS writes plain digits for decimal exponents in ``[-7, 21)``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_SAFE_INTEGER:
        return str(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    if number == 0:
        return "0"
    if number < 0:
        return "-" + js_number_to_string(-number)
    mantissa, _, exp_text = repr(number).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    # n: the decimal point sits after the n-th digit (value = 0.d1d2... x 10**n).
    point = len(whole) + (int(exp_text) if exp_text else 0)
    point -= len(whole + frac) - len((whole + frac).lstrip("0"))
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= point <= 21:
        return digits + "0" * (point - k)
    if 0 < point <= 21:
        return digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return "0." + "0" * (-point) + digits
    exponent = point - 1
    sign = "+" if exponent >= 0 else "-"
    head = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{head}e{sign}{abs(exponent)}"


def as_safe_int(value: object) -> int | None:
    """The integer a JS number denotes if it is a safe integer, else ``None``.

    ``Number.isSafeInteger``: ``1.0`` is ``1``; NaN, infinities, fractions, anything beyond
    ``MAX_SAFE_INTEGER`` and booleans (never numbers in JavaScript) are ``None``.
    """
    # Subclasses are read through the base type's own methods (`int.__int__`, ...), so an
    # overridden comparison or `is_integer` can neither raise nor lie.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = int.__int__(value)
        return number if -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER else None
    if isinstance(value, float):
        real = float.__float__(value)
        if math.isfinite(real) and real.is_integer() and abs(real) <= MAX_SAFE_INTEGER:
            return int(real)
    return None
