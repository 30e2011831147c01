"""Keys as paths: a ``NestedKey`` (``"obs"`` or ``("agents", "obs")``) as a flat tuple and back.

Env bookkeeping (done groups, ``step_mdp`` plans, batched layouts) walks keys level by level,
so it works on flat tuples of strings and turns them back into keys only to read or write
a TensorDict entry.
"""

from __future__ import annotations

from torchrl._types import NestedKey

__all__ = ["key_tuple", "path_to_key"]


def key_tuple(key: NestedKey) -> tuple[str, ...]:
    """The flat tuple of strings of ``key`` (nested tuples are flattened).

    Examples:
        >>> from torchrl.envs._key_paths import key_tuple
        >>> key_tuple("obs"), key_tuple(("agents", ("obs", "x")))
        (('obs',), ('agents', 'obs', 'x'))
    """
    if isinstance(key, str):
        return (key,)
    out: list[str] = []
    for part in key:
        out.extend(key_tuple(part))
    return tuple(out)


def path_to_key(path: tuple[str, ...]) -> NestedKey:
    """The key of a flat path: its one string, or the tuple itself for a nested key.

    Examples:
        >>> from torchrl.envs._key_paths import path_to_key
        >>> path_to_key(("obs",)), path_to_key(("agents", "obs"))
        ('obs', ('agents', 'obs'))
    """
    return path[0] if len(path) == 1 else path
