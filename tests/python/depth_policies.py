"""Python policies that request block edits (tests/test_depth_edits.cpp names them in configs)."""


class DeepenThenTrim:
    """Inserts a block at index `at` at step `grow_at`, removes block `drop` at step `trim_at`;
    emits what it saw and was told."""

    def __init__(self, grow_at=10, trim_at=20, at=1, drop=0):
        self.grow_at, self.trim_at, self.at, self.drop = grow_at, trim_at, at, drop

    def check(self, view):
        view.emit("depth_seen", blocks=len(view.blocks), heads=[len(b.heads) for b in view.blocks])
        if view.step == self.grow_at:
            return [{"op": "insert_block", "block": self.at, "reason": "deeper"}]
        if view.step == self.trim_at:
            return [{"op": "remove_block", "block": self.drop, "reason": "shallower"}]
        return []

    def edited(self, edit, view):
        view.emit("depth_told", block=edit["block"], op=edit["op"], blocks=len(view.blocks))


class BadDepth:
    """Asks for a block edit malformed as `kind` says at its first check."""

    def __init__(self, kind="beyond"):
        self.kind = kind

    def check(self, view):
        n = len(view.blocks)
        if self.kind == "beyond":
            return [{"op": "insert_block", "block": n + 1}]
        if self.kind == "units":
            return [{"op": "insert_block", "block": 0, "units": 4}]
        if self.kind == "new_heads":
            return [{"op": "insert_block", "block": 0}, {"op": "add_head", "block": 0}]
        return [{"op": "remove_block", "block": 0} for _ in range(n)]
