"""``ssl.principal.mapping.rules``: from a certificate's subject to a principal name.

Kafka's ``SslPrincipalMapper`` (read for the rules; the code is our own): a comma-separated
list of ``DEFAULT`` (the whole distinguished name) and ``RULE:pattern/replacement/`` with an
optional ``L`` or ``U`` (lower- or upper-case the result). The first rule whose pattern
matches the *whole* name gives the principal:

    RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT

maps ``CN=etl,OU=ServiceUsers,O=Acme`` to ``etl`` and any other subject to itself. When no
rule matches, authentication fails. Patterns are Python regular expressions, which agree
with Java's for the constructs such rules use (groups, classes, lazy and greedy
quantifiers, anchors); replacements use Java's ``$1`` references and ``\\`` escapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NoMatchingRule", "SslPrincipalMapper"]

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(Exception):
    """No rule applies to the distinguished name: the client is not authenticated."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(_python_replacement(self.replacement, self.pattern.groups), name)
        return {"L": result.lower(), "U": result.upper()}.get(self.case, result)


def _python_replacement(java: str, groups: int) -> str:
    """A Java replacement string as an ``re.sub`` template. ``$n`` takes as many digits as
    still name an existing group (Java's rule); a ``$n`` naming no group stays literal,
    as Kafka's mapper arranges."""
    out: list[str] = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(java) and java[i + 1].isdigit():
            j = i + 1
            number = int(java[j])
            if number > groups:
                out.append("$")
                i += 1
                continue
            j += 1
            while j < len(java) and java[j].isdigit() and number * 10 + int(java[j]) <= groups:
                number = number * 10 + int(java[j])
                j += 1
            out.append(f"\\g<{number}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """Parse the rules once; raise ValueError for a rule that does not parse."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self._rules: list[_Rule] = []
        for text in (m.group(1) for m in _SPLITTER.finditer(rules.strip())):
            match = _PARSER.match(text)
            if match is None or match.end() != len(text):
                rest = text[match.end() :] if match else text
                raise ValueError(f"Invalid rule: `{text}`, unmatched substring: `{rest}`")
            if match.group(1):
                self._rules.append(_Rule(None, "", ""))
            elif match.group(2) is not None:
                try:
                    pattern = re.compile(match.group(2))
                except re.error as exc:
                    raise ValueError(f"Invalid rule: `{text}`: {exc}") from None
                self._rules.append(_Rule(pattern, match.group(4), match.group(6)))
            # an empty rule is ignored, as in Kafka

    def name_for(self, distinguished_name: str) -> str:
        for rule in self._rules:
            name = rule.apply(distinguished_name)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {distinguished_name}")
