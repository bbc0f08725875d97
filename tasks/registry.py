"""Named term tables (observations, rewards, terminations) and the decorator that fills one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

Term = TypeVar("Term", bound=Callable)


def registrar(table: dict[str, Term], kind: str) -> Callable[[str], Callable[[Term], Term]]:
    """``@registrar(table, kind)(name)`` puts a function into ``table`` under ``name``; a
    name already taken is an error (two terms must not silently replace each other)."""
    def term(name: str) -> Callable[[Term], Term]:
        def register(fn: Term) -> Term:
            if name in table:
                raise ValueError(f"{kind} term {name!r} is already registered")
            table[name] = fn
            return fn

        return register

    return term
