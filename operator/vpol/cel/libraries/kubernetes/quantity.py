"""Kubernetes quantity library: ``quantity()``, ``isQuantity()`` and Quantity methods.

Parsing reproduces ``resource.ParseQuantity`` from k8s.io/apimachinery
(sign, digits, optional fraction, suffix ``n u m '' k M G T P E``,
``Ki Mi Gi Ti Pi Ei`` or ``e``/``E`` exponent; the same error messages;
values finer than 1n rounded up away from zero; binary-suffixed values
capped at 2^63-1). Arithmetic is exact, on an integer coefficient and a
power-of-ten exponent (no floating point, no precision loss), like the
``inf.Dec`` Kubernetes falls back to.

A Quantity is a message holding its value in canonical form (coefficient
without trailing zeros, and exponent), so CEL ``==`` is Kubernetes'
``Quantity.Equal``: ``quantity('1Gi') == quantity('1024Mi')``.

``sign`` is a global function (``sign(q)``) as declared by Kubernetes, not
a method, even though the Kubernetes docs list it among the methods.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from vpol.cel import types
from vpol.cel.declare import INT, STRING, Fn, T
from vpol.cel.libraries.kubernetes.overloads import KubernetesLibraryError, message

LIBRARY = "kubernetes.quantity"

QUANTITY_TYPE, QuantityMessage = types.opaque_type(
    "kubernetes.Quantity", {"coefficient": "string", "exponent": "int64"}
)
_QUANTITY = message(QUANTITY_TYPE, QuantityMessage)

_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG = f"quantities must match the regular expression '{_SPLIT_RE}'"
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

_INT64_MAX = 2**63 - 1
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
#: Exact results needing more digits than this are refused (a bound on
#: memory and time for expressions like quantity('1e999999999').add(1)).
MAX_DIGITS = 4096


class Decimal:
    """An exact decimal ``coefficient * 10**exponent`` in canonical form."""

    __slots__ = ("coefficient", "exponent")

    def __init__(self, coefficient: int, exponent: int) -> None:
        if coefficient == 0:
            exponent = 0
        else:
            while coefficient % 10 == 0:
                coefficient //= 10
                exponent += 1
        self.coefficient = coefficient
        self.exponent = exponent

    def sign(self) -> int:
        return (self.coefficient > 0) - (self.coefficient < 0)

    def _magnitude(self) -> int:
        """Position of the most significant digit (comparable across exponents)."""
        return len(str(abs(self.coefficient))) + self.exponent

    def compare(self, other: Decimal) -> int:
        a, b = self.sign(), other.sign()
        if a != b:
            return (a > b) - (a < b)
        if a == 0:
            return 0
        ma, mb = self._magnitude(), other._magnitude()
        if ma != mb:
            return a if ma > mb else -a
        low = min(self.exponent, other.exponent)
        x = self.coefficient * 10 ** (self.exponent - low)
        y = other.coefficient * 10 ** (other.exponent - low)
        return (x > y) - (x < y)

    def add(self, other: Decimal) -> Decimal:
        if other.coefficient == 0:
            return self
        if self.coefficient == 0:
            return other
        low = min(self.exponent, other.exponent)
        width = max(self._magnitude(), other._magnitude()) - low
        if width > MAX_DIGITS:
            raise KubernetesLibraryError(f"quantity arithmetic needs more than {MAX_DIGITS} digits")
        return Decimal(
            self.coefficient * 10 ** (self.exponent - low) + other.coefficient * 10 ** (other.exponent - low), low
        )

    def negate(self) -> Decimal:
        return Decimal(-self.coefficient, self.exponent)

    def as_int64(self) -> int | None:
        """The value as an int64, if it is an integer in range."""
        if self.exponent < 0:
            return None
        if self.exponent > 19:
            return None
        value = self.coefficient * 10**self.exponent
        return value if -(2**63) <= value <= _INT64_MAX else None

    def as_float(self) -> float:
        """``AsApproximateFloat64``'s arithmetic (coefficient times Go's ``math.Pow10``)."""
        try:
            base = float(self.coefficient)
        except OverflowError:
            base = math.inf if self.coefficient > 0 else -math.inf
        if self.exponent == 0:
            return base
        return base * _go_pow10(self.exponent)


_POW10 = [float(f"1e{i}") for i in range(32)]
_POW10_POS32 = [float(f"1e{32 * i}") for i in range(10)]
_POW10_NEG32 = [float(f"1e-{32 * i}") for i in range(11)]


def _go_pow10(n: int) -> float:
    """Go's ``math.Pow10`` (same tables, so the same rounding)."""
    if 0 <= n <= 308:
        return _POW10_POS32[n // 32] * _POW10[n % 32]
    if -323 <= n <= 0:
        return _POW10_NEG32[-n // 32] / _POW10[-n % 32]
    return math.inf if n > 0 else 0.0


def _split(text: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: sign, numeric text, integer digits, fraction digits, suffix."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos].isascii() and text[pos].isdigit():
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, text[start:], "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isascii() and text[pos].isdigit():
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isascii() and text[pos].isdigit():
        pos += 1
    if pos < end:
        raise KubernetesLibraryError(ERR_FORMAT_WRONG)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int] | None:
    """The (base, exponent) of a suffix, or None."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix]
    if suffix in _BINARY:
        return 2, _BINARY[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[:1] in "+-" else digits
        if not body or not (body.isascii() and body.isdigit()):
            return None
        parsed = int(digits)
        if not -(2**63) <= parsed <= _INT64_MAX:
            return None
        return 10, ((parsed + 2**31) % 2**32) - 2**31  # Go's int32(parsed)
    return None


def _inf_dec_accepts(value: str) -> bool:
    """Whether ``inf.Dec.SetString`` parses ``value`` (sign, digits, optional fraction)."""
    body = value[1:] if value[:1] in "+-" else value
    whole, _, fraction = body.partition(".")
    return bool(whole or fraction) and (whole + fraction).isdigit()


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> Decimal:
    """The value of a quantity string, or KubernetesLibraryError with Kubernetes' message.

    Cached: policies parse the same literals and fields over and over, and
    a Decimal is never modified.
    """
    if not text:
        raise KubernetesLibraryError(ERR_FORMAT_WRONG)
    if text == "0":
        return Decimal(0, 0)
    positive, value, num, denom, suffix = _split(text)
    interpreted = _interpret(suffix)
    if interpreted is None:
        raise KubernetesLibraryError(ERR_SUFFIX)
    base, exponent = interpreted
    if len(num) + len(denom) > MAX_DIGITS:
        raise KubernetesLibraryError(f"quantity has more than {MAX_DIGITS} digits")
    digits = int(num + denom)
    if not positive:
        digits = -digits
    # ParseQuantity takes an exact int64 fast path when it can; otherwise it
    # parses the numeric text with inf.Dec, which rejects text without digits.
    if base == 10:
        fast = 18 - (len(num) + len(denom)) >= 0 and exponent - len(denom) >= -9 and abs(digits) <= _INT64_MAX
    else:
        fast = (
            exponent >= 0
            and not denom
            and 15 - len(num) - int(exponent * 3 / 10) - 1 >= 0
            and abs(digits) << exponent <= _INT64_MAX
        )
    if not fast and not _inf_dec_accepts(value):
        raise KubernetesLibraryError(ERR_NUMERIC)
    if base == 10:
        amount = Decimal(digits, exponent - len(denom))
    else:
        amount = Decimal(digits * 2**exponent, -len(denom))
    amount = _round_up_nano(amount)
    if base == 2 and abs(amount.coefficient) > 0 and amount.compare(Decimal(_INT64_MAX, 0)) > 0:
        amount = Decimal(_INT64_MAX, 0)
    elif base == 2 and amount.compare(Decimal(-_INT64_MAX, 0)) < 0:
        amount = Decimal(-_INT64_MAX, 0)
    return amount


def _round_up_nano(amount: Decimal) -> Decimal:
    """Round away from zero to 9 decimal places (ParseQuantity's ``inf.RoundUp``)."""
    if amount.exponent >= -9 or amount.coefficient == 0:
        return amount
    shift = -9 - amount.exponent
    if shift > len(str(abs(amount.coefficient))):
        return Decimal(amount.sign(), -9)
    magnitude = abs(amount.coefficient)
    kept, rest = divmod(magnitude, 10**shift)
    if rest:
        kept += 1
    return Decimal(kept * amount.sign(), -9)


def to_message(amount: Decimal) -> Any:
    return QuantityMessage(coefficient=str(amount.coefficient), exponent=amount.exponent)


def from_message(msg: Any) -> Decimal:
    amount = Decimal.__new__(Decimal)  # already canonical: skip normalization
    amount.coefficient = int(msg.coefficient or "0")
    amount.exponent = msg.exponent
    return amount


def quantity(text: str) -> Any:
    return to_message(parse(text))


def is_quantity(text: str) -> bool:
    try:
        parse(text)
    except KubernetesLibraryError:
        return False
    return True


def sign(q: Any) -> int:
    return from_message(q).sign()


def compare_to(a: Any, b: Any) -> int:
    return from_message(a).compare(from_message(b))


def is_less_than(a: Any, b: Any) -> bool:
    return compare_to(a, b) == -1


def is_greater_than(a: Any, b: Any) -> bool:
    return compare_to(a, b) == 1


def is_integer(q: Any) -> bool:
    return from_message(q).as_int64() is not None


def as_integer(q: Any) -> int:
    value = from_message(q).as_int64()
    if value is None:
        raise KubernetesLibraryError("cannot convert value to integer")
    return value


def as_approximate_float(q: Any) -> float:
    return from_message(q).as_float()


def add(a: Any, b: Any) -> Any:
    other = Decimal(b, 0) if isinstance(b, int) else from_message(b)
    return to_message(from_message(a).add(other))


def sub(a: Any, b: Any) -> Any:
    other = Decimal(b, 0) if isinstance(b, int) else from_message(b)
    return to_message(from_message(a).add(other.negate()))


def functions() -> list[Fn]:
    q = _QUANTITY
    return [
        Fn(LIBRARY, "quantity", "string_to_quantity", (STRING,), QUANTITY_TYPE, quantity),
        Fn(LIBRARY, "isQuantity", "is_quantity_string", (STRING,), T.BOOL, is_quantity),
        Fn(LIBRARY, "sign", "quantity_sign", (q,), T.INT, sign),
        Fn(LIBRARY, "isGreaterThan", "quantity_is_greater_than", (q, q), T.BOOL, is_greater_than, member=True,
           carrier=True),
        Fn(LIBRARY, "isLessThan", "quantity_is_less_than", (q, q), T.BOOL, is_less_than, member=True, carrier=True),
        Fn(LIBRARY, "compareTo", "quantity_compare_to", (q, q), T.INT, compare_to, member=True, carrier=True),
        Fn(LIBRARY, "asApproximateFloat", "quantity_get_float", (q,), T.DOUBLE, as_approximate_float, member=True),
        Fn(LIBRARY, "asInteger", "quantity_get_int", (q,), T.INT, as_integer, member=True),
        Fn(LIBRARY, "isInteger", "quantity_is_integer", (q,), T.BOOL, is_integer, member=True),
        Fn(LIBRARY, "add", "quantity_add", (q, q), QUANTITY_TYPE, add, member=True),
        Fn(LIBRARY, "add", "quantity_add_int", (q, INT), QUANTITY_TYPE, add, member=True),
        Fn(LIBRARY, "sub", "quantity_sub", (q, q), QUANTITY_TYPE, sub, member=True),
        Fn(LIBRARY, "sub", "quantity_sub_int", (q, INT), QUANTITY_TYPE, sub, member=True),
    ]
