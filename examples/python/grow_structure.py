"""grow_structure: grow a model in all three ways the structure editor knows, heads, MLP width and
depth, each time the training loss stops improving: the first plateau adds a head to every
block, the next widens every block's MLP, the next appends a block, then heads again, each kind
skipped once it reaches its cap.

    growth: {plugin: python, class: grow_structure.GrowStructure, path: [../examples/python],
             options: {patience: 2, units: 32, max_heads: 4, max_width: 128, max_blocks: 3}}

A demonstration of the three edits from one policy (configs/grow_depth_width.yaml), not a rule
measured against fixed models. Every edit keeps the function: a new head's W_O, new units'
output weights and a new block's output maps start at zero. Its attributes are its whole state,
saved in checkpoints, so a resumed run makes the same decisions.
"""

KINDS = ("heads", "mlp", "depth")


class GrowStructure:
    summary_columns = ["heads_added", "units_added", "blocks_added"]

    def __init__(self, patience=2, min_delta=0.01, units=32, max_heads=4, max_width=128, max_blocks=3):
        self.patience, self.min_delta, self.units = patience, min_delta, units
        self.max_heads, self.max_width, self.max_blocks = max_heads, max_width, max_blocks
        self.best = None  # lowest training loss since the last growth
        self.waited = 0   # checks without an improvement of min_delta
        self.turn = 0     # the kind the next plateau grows (an index into KINDS)
        self.heads_added = self.units_added = self.blocks_added = 0

    def edits_of(self, kind, view):
        """The edits growing KIND now (empty when KIND is at its cap everywhere)."""
        if kind == "heads":
            return [{"op": "add_head", "block": b.index, "reason": "plateau: a head"}
                    for b in view.blocks if b.can_edit and b.num_heads < self.max_heads]
        if kind == "mlp":
            return [{"op": "add_mlp_units", "block": b.index, "units": self.units, "reason": "plateau: wider"}
                    for b in view.blocks if b.mlp_width + self.units <= self.max_width]
        if len(view.blocks) < self.max_blocks:
            return [{"op": "insert_block", "block": len(view.blocks), "reason": "plateau: deeper"}]
        return []

    def check(self, view):
        loss = view.metrics.train_loss
        if self.best is None or loss < self.best - self.min_delta:
            self.best, self.waited = loss, 0
        else:
            self.waited += 1
        edits = []
        if self.waited >= self.patience:
            self.best, self.waited = None, 0
            for _ in KINDS:  # the next kind not at its cap
                kind = KINDS[self.turn % len(KINDS)]
                self.turn += 1
                edits = self.edits_of(kind, view)
                if edits:
                    break
        view.emit("check", policy="grow_structure", train_loss=loss, waited=self.waited,
                  plot="train_loss waited")
        return edits

    def edited(self, edit, view):
        op = edit["op"]
        if op == "add_head":
            self.heads_added += 1
        elif op == "add_mlp_units":
            self.units_added += self.units
        elif op == "insert_block":
            self.blocks_added += 1

    def summary(self):
        return {"heads_added": self.heads_added, "units_added": self.units_added,
                "blocks_added": self.blocks_added}
