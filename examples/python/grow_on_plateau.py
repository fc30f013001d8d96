"""grow_on_plateau: add a head to every block when the training loss stops improving.

    growth: {plugin: python, class: grow_on_plateau.GrowOnPlateau, path: [../examples/python],
             options: {patience: 2, min_delta: 0.01, max_heads: 8}}

The loss each check sees is the mean over the steps since the previous check (view.metrics).
Its attributes are its whole state: the bridge saves them in checkpoints, so a resumed run
makes the same decisions. Its check events' `plot` names what `growformer report` draws;
`summary_columns` names the summary keys the sweep table shows.
"""


class GrowOnPlateau:
    summary_columns = ["grown"]

    def __init__(self, patience=3, min_delta=0.01, max_heads=8):
        self.patience, self.min_delta, self.max_heads = patience, min_delta, max_heads
        self.best = None  # lowest training loss seen since the last growth
        self.waited = 0   # checks without an improvement of min_delta
        self.grown = 0    # heads added

    def check(self, view):
        loss = view.metrics.train_loss
        edits = []
        if self.best is None or loss < self.best - self.min_delta:
            self.best, self.waited = loss, 0
        else:
            self.waited += 1
        if self.waited >= self.patience:
            self.best, self.waited = None, 0
            edits = [{"op": "add_head", "block": b.index, "reason": f"plateau at loss {loss:.4f}"}
                     for b in view.blocks if b.can_edit and b.num_heads < self.max_heads]
            self.grown += len(edits)
        view.emit("check", policy="grow_on_plateau", train_loss=loss, waited=self.waited,
                  plot="train_loss waited")
        return edits

    def summary(self):
        return {"grown": self.grown}
