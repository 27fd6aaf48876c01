"""Where a rule's condition treats a missing signal as harmless: a `has(x)` under an odd number of negations."""

from __future__ import annotations

import re
from typing import NamedTuple

STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
HAS = re.compile(r"has\s*\(\s*([A-Za-z_]\w*)\s*\.\s*([A-Za-z_]\w*)\s*\)")
IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")


class NegatedHas(NamedTuple):
    """One `has(var.name)` whose absence makes the condition more likely to hold, and where it is."""

    var: str
    name: str
    offset: int
    text: str


def negated_has(expression: str) -> list[NegatedHas]:
    """Every has(var.name) under an odd number of `!` (`!has(x)`, `!(has(x) && ...)`), string literals ignored.

    Such a condition holds when the signal is missing, as when its source fails: absent evidence read as low.
    """
    text = STRING_LITERAL.sub(lambda m: " " * len(m.group(0)), expression)
    out: list[NegatedHas] = []
    negations: list[bool] = []  # per open parenthesis, whether its content is negated (an odd count so far)
    bang = False
    i = 0
    while i < len(text):
        c = text[i]
        parity = negations[-1] if negations else False
        if c == "!" and text[i + 1:i + 2] != "=":
            bang = not bang
        elif c == "(":
            negations.append(parity ^ bang)
            bang = False
        elif c == ")":
            if negations:
                negations.pop()
            bang = False
        elif (m := HAS.match(text, i)) and not (i and (text[i - 1].isalnum() or text[i - 1] in "_.")):
            if parity ^ bang:
                out.append(NegatedHas(m.group(1), m.group(2), i, expression[i:m.end()]))
            bang = False
            i = m.end()
            continue
        elif (m := IDENTIFIER.match(text, i)) is not None:
            # `!f(...)` negates what the call's parentheses hold: the bang carries over to them.
            after = text[m.end():].lstrip()
            bang = bang and after.startswith("(")
            i = m.end()
            continue
        elif not c.isspace():
            bang = False
        i += 1
    return out
