"""Python policies that request MLP edits (tests/test_mlp_edits.cpp names them in configs)."""


class GrowShrinkMlp:
    """Adds `units` units to block 0's MLP at step `grow_at`, removes units 0 and 1 of block 1's
    at step `shrink_at`; emits what it saw and was told."""

    def __init__(self, grow_at=10, shrink_at=20, units=4):
        self.grow_at, self.shrink_at, self.units = grow_at, shrink_at, units

    def check(self, view):
        view.emit("mlp_seen", widths=[b.mlp_width for b in view.blocks])
        if view.step == self.grow_at:
            return [{"op": "add_mlp_units", "block": 0, "units": self.units, "reason": "wider"}]
        if view.step == self.shrink_at:
            return [{"op": "remove_mlp_units", "block": 1, "units": [0, 1], "reason": "narrower"}]
        return []

    def edited(self, edit, view):
        first = edit.get("first_unit", -1)
        view.emit("mlp_told", block=edit["block"], op=edit["op"], first_unit=first)


class BadMlp:
    """Asks for an MLP edit malformed as `kind` says at its first check."""

    def __init__(self, kind="zero"):
        self.kind = kind

    def check(self, view):
        if self.kind == "zero":
            return [{"op": "add_mlp_units", "block": 0, "units": 0}]
        if self.kind == "beyond":
            return [{"op": "remove_mlp_units", "block": 0, "units": [view.blocks[0].mlp_width]}]
        return [{"op": "remove_mlp_units", "block": 0, "units": list(range(view.blocks[0].mlp_width))}]
