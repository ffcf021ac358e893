"""No `forward` of a transformers object (or any module) is replaced: the
check a test applies to a model as training builds it."""

from __future__ import annotations

import inspect


def replaced_forwards(model) -> list[str]:
    """Modules of `model` whose forward is not the one their class defines:
    an instance attribute `forward` (types.MethodType on a live object), or
    a class attribute assigned from another module's function (a class
    patched after import). Each as "name (class): how"."""
    found = []
    for name, module in model.named_modules():
        label = f"{name or '<root>'} ({type(module).__name__})"
        if "forward" in vars(module):
            found.append(f"{label}: forward set on the object")
            continue
        owner = next((c for c in type(module).__mro__ if "forward" in vars(c)), None)
        function = inspect.unwrap(vars(owner)["forward"]) if owner else None
        if function is not None and getattr(function, "__module__", owner.__module__) != owner.__module__:
            found.append(f"{label}: {owner.__name__}.forward is {function.__module__}.{function.__qualname__}")
    return found
