"""No `forward` of a transformers object (or any module) is replaced: the
check a test applies to a model as training builds it."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

# Where a transformers class may legitimately come from: transformers, or a
# checkpoint's own modeling code (trust_remote_code loads it under this name).
TRANSFORMERS_HOMES = ("transformers", "transformers_modules")


def replaced_forwards(model) -> list[str]:
    """Modules of `model` whose forward is not the one their class defines:
    an instance attribute `forward` (types.MethodType on a live object); a
    class attribute assigned from another package's function, bare or
    wrapped with functools.wraps (a class patched after import); or an
    object whose class was swapped for a subclass of a transformers class
    defined outside transformers. Each as "name (class): how"."""
    found = []
    for name, module in model.named_modules():
        label = f"{name or '<root>'} ({type(module).__name__})"
        if "forward" in vars(module):
            found.append(f"{label}: forward set on the object")
            continue
        swapped = _transformers_class_subclassed_elsewhere(type(module))
        if swapped:
            found.append(f"{label}: {swapped}")
        owner = next((c for c in type(module).__mro__ if "forward" in vars(c)), None)
        if owner is not None:
            foreign = _foreign_forward(vars(owner)["forward"], owner)
            if foreign:
                found.append(f"{label}: {owner.__name__}.forward is {foreign}")
    return found


def _foreign_forward(function, owner: type) -> str | None:
    """The function, or a wrapper around it, that does not come from the
    package that defines `owner` (or from torch); None when every layer
    does. Wrappers are looked at one by one: functools.wraps copies the
    wrapped function's name and module onto the patch, but not where its
    code lives; and transformers wraps its own forwards with its own
    decorators and torch's (`torch.no_grad()` on the rotary embeddings)."""
    inner = inspect.unwrap(function)
    if getattr(inner, "__module__", owner.__module__) != owner.__module__:
        return f"{inner.__module__}.{inner.__qualname__}"
    homes = [home for home in (_package_dir(owner.__module__), _package_dir("torch")) if home is not None]
    layer = function
    while layer is not None and homes:
        code = getattr(layer, "__code__", None)
        if code is not None and not any(Path(code.co_filename).resolve().is_relative_to(h) for h in homes):
            return f"wrapped by {code.co_name} of {code.co_filename}"
        layer = getattr(layer, "__wrapped__", None)
    return None


def _package_dir(module_name: str) -> Path | None:
    """The folder of the top-level package `module_name` belongs to (a lone
    module's own folder); None when it has no file (built in, __main__)."""
    top = sys.modules.get(module_name.split(".")[0])
    path = getattr(top, "__file__", None)
    return Path(path).resolve().parent if path else None


def _transformers_class_subclassed_elsewhere(cls: type) -> str | None:
    """Why `cls` looks like a class swap: it is not transformers' own but
    subclasses one of transformers' modules, one that defines a forward
    (how a forward is replaced by `module.__class__ = Patched`; peft's
    wrapper only shares transformers' hub mixin)."""
    if cls.__module__.split(".")[0] in TRANSFORMERS_HOMES:
        return None
    base = next((b for b in cls.__mro__[1:] if b.__module__.split(".")[0] == "transformers" and "forward" in vars(b)),
                None)
    if base is None:
        return None
    return f"class {cls.__module__}.{cls.__qualname__} subclasses transformers' {base.__name__}"
