"""Python policies the tests name in configs (`class: policies.NAME`)."""
import os


class AddAt:
    """Adds one head to block 0 at the check of step `at`; user-format state (a counter)."""

    def __init__(self, at=20, reason="scheduled"):
        self.at, self.reason = at, reason
        self.checks = 0
        self.told = []

    def check(self, view):
        self.checks += 1
        view.emit("python_check", block=0, checks=self.checks, loss=view.metrics.train_loss)
        if view.step == self.at:
            return [{"op": "add_head", "block": 0, "reason": self.reason, "info": {"checks": self.checks}}]
        return []

    def edited(self, edit, view):
        self.told.append([edit["op"], edit["block"], edit["head"], view.step])

    def summary(self):
        return {"checks": self.checks, "edits_seen": len(self.told)}

    def save_state(self):
        return f"{self.checks}"

    def load_state(self, text):
        self.checks = int(text)


class RemoveFirst:
    """Pruning: removes the oldest head of block 0 at step `at`."""

    def __init__(self, at=30):
        self.at = at

    def check(self, view):
        if view.step != self.at:
            return []
        return [{"op": "remove_head", "block": 0, "head": view.blocks[0].heads[0], "reason": "oldest"}]


class Raises:
    def __init__(self, at=10):
        self.at = at

    def check(self, view):
        if view.step == self.at:
            return 1 / 0
        return []


class ReturnsNone:
    def check(self, view):
        pass


class BadEdit:
    def __init__(self, edit="{}"):
        import ast
        self.edit = ast.literal_eval(edit)

    def check(self, view):
        return [self.edit]


class TupleState:
    """Attributes that JSON cannot give back equal: saving must refuse, not drift."""

    def __init__(self):
        self.seen = {0: (1, 2)}

    def check(self, view):
        return []


class RankDivergent:
    """Grows on MPI rank 0 only: a policy whose decisions differ between processes."""

    def check(self, view):
        if view.step == 10 and os.environ.get("OMPI_COMM_WORLD_RANK", "0") == "0":
            return [{"op": "add_head", "block": 0}]
        return []


class NotAPolicy:
    pass


class Probing:
    """Asks for the block inputs and a validation probe; logs what it saw and random draws."""

    needs_probe = True

    def validation_probe(self, step):
        return 16

    def check(self, view):
        b = view.blocks[0]
        m = view.metrics
        view.emit("saw", block=0, probe_shape=list(b.probe.shape), valid_shape=list(b.valid.shape),
                  valid_sum=int(b.valid.sum()), probe_examples=m.probe_examples,
                  probe_loss=m.probe_loss, draw=view.uniform(), pick=view.randint(1000))
        return []


class SelfInterrupt:
    """Sends this process SIGINT (Ctrl-C) in the middle of its check at step `at`; the check must
    run to its end (the run then stops after the step with a checkpoint)."""

    def __init__(self, at=20):
        self.at = at
        self.checks = 0

    def check(self, view):
        import signal
        self.checks += 1
        if view.step == self.at and not os.environ.get("GF_TEST_NO_KILL"):
            os.kill(os.getpid(), signal.SIGINT)
        view.emit("after_kill", checks=self.checks)
        return [{"op": "add_head", "block": 0}] if view.step == self.at else []


class MuteEven:
    """Leaves head `head` of block 0 out of every even training step (muted_in_training)."""

    def __init__(self, head=0, bad=False):
        self.head, self.bad, self.asked = head, bad, 0

    def muted_in_training(self, step):
        self.asked += 1
        if self.bad:
            return "head 0"
        return [(0, self.head)] if step % 2 == 0 else []

    def check(self, view):
        return []

    def summary(self):
        return {"asked": self.asked}


class MuteHalf:
    """Leaves head `head` of block 0 out of a share `share` of every training batch
    (muted_on_examples)."""

    def __init__(self, head=0, share=0.5, bad=False):
        self.head, self.share, self.bad, self.asked = head, share, bad, 0

    def muted_on_examples(self, step):
        self.asked += 1
        if self.bad:
            return [(0, self.head)]
        return ([(0, self.head)], self.share)

    def check(self, view):
        return []

    def summary(self):
        return {"asked": self.asked}


class TwinRound:
    """Grows one head on block 0 at the check of step `grow` and keeps a twin of the model without
    it (twin_without) until the check of step `until`, where it takes the head back
    (`take_back`) or keeps it; every check it emits what it read of the probe and the twin's."""

    made = 0  # instances built in this process (the twin builds no policy of its own)

    def __init__(self, grow=10, until=30, take_back=True, whole=False):
        self.grow, self.until, self.take_back, self.whole = grow, until, take_back, whole
        self.head = None
        TwinRound.made += 1

    def summary(self):
        return {"made": TwinRound.made}

    def validation_probe(self, step):
        return 64

    def twin_without(self, step):
        if self.whole:
            return [(0, -1)]
        return [(0, self.head)] if self.head is not None and step < self.until else []

    def check(self, view):
        t = view.metrics.twin
        view.emit("read", block=0, probe_loss=view.metrics.probe_loss,
                  twin_loss=-1.0 if t is None else t.loss,
                  twin_since=-1 if t is None else t.since,
                  twin_diff_sd=-1.0 if t is None or t.diff_sd is None else t.diff_sd)
        if view.step == self.grow:
            return [{"op": "add_head", "block": 0, "reason": "grown"}]
        if view.step == self.until and self.take_back and self.head is not None:
            return [{"op": "remove_head", "block": 0, "head": self.head, "reason": "taken back"}]
        return []

    def edited(self, edit, view):
        if edit["op"] == "add_head":
            self.head = edit["head"]
        elif edit["op"] == "remove_head" and edit["head"] == self.head:
            self.head = None


class LeaveOut:
    """Asks, at every check, for the probe with block `block` left out whole (gf.WHOLE_BLOCK), or
    with the malformed head `head` when given; its summary holds what the last check read."""

    def __init__(self, block=1, head=None):
        self.block, self.head, self.seen = block, head, {}

    def validation_probe(self, step):
        return 16

    def probe_ablations(self, view):
        import growformer as gf
        return [[(self.block, gf.WHOLE_BLOCK if self.head is None else self.head)]]

    def check(self, view):
        m = view.metrics
        for a in m.ablations:
            self.seen = {"probe_loss": m.probe_loss, "left_out_loss": a.loss,
                         "block": a.heads[0][0], "head": a.heads[0][1], "sets": len(m.ablations)}
        return []

    def summary(self):
        return self.seen


class TrialAfter:
    """Has the structure on trial after step `after` (on_trial), editing nothing."""

    def __init__(self, after=10, bad=False):
        self.after, self.bad = after, bad

    def on_trial(self, step):
        if self.bad:
            return "yes"
        return step > self.after

    def check(self, view):
        return []


class NumpyEdits:
    """Answers with numpy numbers where ints and numbers go: a block and head index from numpy
    (argmax, int64), event fields and summary values of numpy types. Adds a head at `at`,
    removes head 0 at `remove_at`."""

    def __init__(self, at=20, remove_at=30):
        self.at, self.remove_at = at, remove_at
        self.checks = 0

    def check(self, view):
        import numpy as np
        self.checks += 1
        block = np.argmax(np.array([1.0]))  # numpy.int64
        view.emit("numpy_check", block=block, checks=np.int64(self.checks), share=np.float32(0.5),
                  sizes=[np.int64(view.blocks[0].num_heads), np.float64(1.5)])
        if view.step == self.at:
            return [{"op": "add_head", "block": block, "reason": "numpy",
                     "info": {"checks": np.int32(self.checks)}}]
        if view.step == self.remove_at:
            return [{"op": "remove_head", "block": np.int64(0), "head": np.int64(view.blocks[0].heads[0])}]
        return []

    def summary(self):
        import numpy as np
        return {"checks": np.int64(self.checks), "share": np.float32(0.25)}

    def save_state(self):
        return str(self.checks)

    def load_state(self, text):
        self.checks = int(text)


class ImportsGrowformer:
    """Makes its edit with growformer.add_head: the package must be importable inside a policy,
    in the module as in the program."""

    def __init__(self, at=20):
        self.at = at

    def check(self, view):
        import growformer
        if view.step == self.at:
            view.emit("imported", file=growformer.__file__)
            return [growformer.add_head(0, reason="from-growformer")]
        return []


class RaisesOwnError:
    """Raises an exception of its own class (with an attribute) at step `at`."""

    class Failure(Exception):
        def __init__(self, step):
            super().__init__(f"gave up at step {step}")
            self.step = step

    def __init__(self, at=10):
        self.at = at

    def check(self, view):
        if view.step == self.at:
            self.fail(view.step)
        return []

    def fail(self, step):
        raise RaisesOwnError.Failure(step)


class RaisesInInit:
    """A constructor that raises: a ValueError of its own checks, another error of its own
    class, or a TypeError of its body (not of the keyword arguments it was given)."""

    class Unavailable(Exception):
        pass

    def __init__(self, kind="value", limit=3):
        if kind == "value":
            raise ValueError(f"limit {limit} is below the 4 heads it needs")
        if kind == "own":
            raise RaisesInInit.Unavailable("the schedule service is not reachable")
        if kind == "type":
            self.total = len(limit)

    def check(self, view):
        return []


class AddMany:
    """Asks for N heads in block 0 at the check of step `at`, all in one check."""

    def __init__(self, n=65534, at=10):
        self.n, self.at = n, at

    def check(self, view):
        if view.step != self.at:
            return []
        return [{"op": "add_head", "block": 0, "reason": "many"} for _ in range(self.n)]
