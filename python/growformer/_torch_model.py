"""The torch.nn.Modules of growformer.to_torch (_torch.py says what they compute): a model's
blocks rebuilt from its parameters, each with the heads it has now. Imported by to_torch once
PyTorch is known to import."""
import torch
import torch.nn.functional as F
from torch import nn

from ._torch import _block_layout, _num_blocks


class _Params:
    """The experiment's parameters (name -> nested lists) as frozen torch Parameters of DTYPE."""

    def __init__(self, params, dtype):
        self.params, self.dtype = params, dtype

    def __call__(self, name):
        return nn.Parameter(self.tensor(name), requires_grad=False)

    def tensor(self, name):
        return torch.tensor(self.params[name], dtype=self.dtype)

    def stacked(self, names):
        """The parameters NAMES stacked along a new first axis (one per head)."""
        return nn.Parameter(torch.stack([self.tensor(n) for n in names]), requires_grad=False)


def causal_conv(x, w, b, stride):
    """growformer's depthwise_conv1d_causal: x (B, T, C), w (C, K): output row t reads input
    rows t * stride - (K - 1) .. t * stride (zeros before the first)."""
    K = w.shape[1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w[:, None, :], b, stride=stride, groups=w.shape[0])
    return y.transpose(1, 2)


class AttentionBlock(nn.Module):
    """An mha or hkt block: its heads' projections stacked (heads, ...) per level, the output
    maps, b_o; hkt's coarser levels and fusion weights; hybrid_conv heads' gates."""

    def __init__(self, p, b, att):
        super().__init__()
        pre = f"layers.{b}.attn."
        self.head_ids = _block_layout(p.params, b)
        hkt = att["plugin"] == "hkt"
        self.L = int(att.get("levels", 1)) if hkt else 1
        self.stride = int(att.get("stride", 2))
        share = bool(att.get("share_qk", False))

        def stack(key):
            return p.stacked([f"{pre}heads.{h}.{key}" for h in self.head_ids])

        sfx = lambda l: "" if l == 0 or share else f"_l{l}"  # noqa: E731
        self.w_q = nn.ParameterList([stack("w_q" + sfx(l)) for l in range(self.L)])
        self.b_q = nn.ParameterList([stack("b_q" + sfx(l)) for l in range(self.L)])
        self.w_k = nn.ParameterList([stack("w_k" + sfx(l)) for l in range(self.L)])
        self.b_k = nn.ParameterList([stack("b_k" + sfx(l)) for l in range(self.L)])
        self.w_v, self.b_v, self.w_o = stack("w_v"), stack("b_v"), stack("w_o")
        self.b_o = p(pre + "b_o")
        self.hybrid = (att.get("head") or {}).get("plugin") == "hybrid_conv"
        if self.hybrid:  # the heads' convolutions as one of H * d_v channels
            w, bias = stack("conv_w"), stack("conv_b")
            self.conv_w = nn.Parameter(w.reshape(-1, w.shape[-1]), requires_grad=False)
            self.conv_b = nn.Parameter(bias.reshape(-1), requires_grad=False)
            self.beta = stack("beta")
        self.down = nn.ParameterList([p(f"{pre}down.{l}.{k}") for l in range(1, self.L)
                                      for k in ("dw", "dw_b", "pw", "pw_b")])
        self.input_fusion = hkt and att.get("fusion", "static") == "input"
        if hkt:
            self.fusion = nn.ParameterList([p(pre + "fusion.w"), p(pre + "fusion.b")] if self.input_fusion
                                           else [p(pre + "fusion.logits")])
        self.causal = bool(att.get("causal", False))
        self.mean = att.get("combine", "sum") == "mean" and len(self.head_ids) > 1
        self.scale = 1.0 / float(self.w_q[0].shape[-1]) ** 0.5

    def project(self, x, w, b):
        return torch.einsum("btd,hde->bhte", x, w) + b[None, :, None, :]

    def lam(self, x, valid):
        """The level weights: (1, L) static, or (B, L) from the masked mean of the input."""
        if not self.input_fusion:
            return torch.softmax(self.fusion[0], dim=0)[None, :]
        w = valid.to(x.dtype)[..., None]
        pooled = (x * w).sum(dim=1) / w.sum(dim=1)
        return torch.softmax(torch.matmul(pooled, self.fusion[0]) + self.fusion[1], dim=-1)

    def coarse_scores(self, x, valid, s):
        """hkt: S (scaled by lambda_0) plus the coarser levels' scores, each lambda_l times the
        level's scores through the index map up(S_l)[i, j] = S_l[i / s^l, j / s^l]."""
        T = x.shape[1]
        lam = self.lam(x, valid)  # (B or 1, L)
        s = s * lam[:, 0, None, None, None]
        pos = torch.arange(T, device=x.device)
        xl, block = x, 1
        for l in range(1, self.L):
            dw, dw_b, pw, pw_b = self.down[4 * (l - 1): 4 * l]
            xl = torch.matmul(causal_conv(xl, dw, dw_b, self.stride), pw) + pw_b
            block *= self.stride
            ql = self.project(xl, self.w_q[l], self.b_q[l])
            kl = self.project(xl, self.w_k[l], self.b_k[l])
            sl = torch.matmul(ql, kl.transpose(-1, -2)) * self.scale
            idx = torch.div(pos, block, rounding_mode="floor")
            up = sl.index_select(2, idx).index_select(3, idx) * lam[:, l, None, None, None]
            if self.causal:  # only key blocks wholly at or before the query
                usable = pos[None, :] < torch.div(pos + 1, block, rounding_mode="floor")[:, None] * block
                up = up * usable.to(up.dtype)
            s = s + up
        return s

    def scores(self, x, valid):
        """(B, heads, T, T) scores, masked (padded keys; later keys when causal)."""
        q, k = self.project(x, self.w_q[0], self.b_q[0]), self.project(x, self.w_k[0], self.b_k[0])
        s = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        if self.L > 1:
            s = self.coarse_scores(x, valid, s)
        keep = valid[:, None, None, :]
        if self.causal:
            T = x.shape[1]
            past = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            keep = keep & past[None, None, :, :]
        return s.masked_fill(~keep, float("-inf"))

    def forward(self, x, valid):
        v = self.project(x, self.w_v, self.b_v)
        o = torch.matmul(torch.softmax(self.scores(x, valid), dim=-1), v)
        if self.hybrid:  # conv + sigmoid(beta) (attention - conv), per head
            B, H, T, dv = v.shape
            vc = v.transpose(1, 2).reshape(B, T, H * dv)
            conv = causal_conv(vc, self.conv_w, self.conv_b, 1)
            conv = conv.reshape(B, T, H, dv).transpose(1, 2)
            o = conv + torch.sigmoid(self.beta)[None, :, :, None] * (o - conv)
        y = torch.einsum("bhte,hed->btd", o, self.w_o)
        if self.mean:
            y = y / len(self.head_ids)
        return y + self.b_o


class Layer(nn.Module):
    """One block: attention and the MLP, each after a layer norm, each added to the residual."""

    def __init__(self, p, b, cfg):
        super().__init__()
        pre = f"layers.{b}."
        self.ln1_g, self.ln1_b = p(pre + "ln1.gamma"), p(pre + "ln1.beta")
        self.ln2_g, self.ln2_b = p(pre + "ln2.gamma"), p(pre + "ln2.beta")
        self.fc1_w, self.fc1_b = p(pre + "mlp.fc1.w"), p(pre + "mlp.fc1.b")
        self.fc2_w, self.fc2_b = p(pre + "mlp.fc2.w"), p(pre + "mlp.fc2.b")
        self.attn = AttentionBlock(p, b, cfg["attention"])
        self.d = int(cfg["d_model"])  # a constant, for the ONNX export

    def forward(self, x, valid):
        d = self.d
        x = x + self.attn(F.layer_norm(x, (d,), self.ln1_g, self.ln1_b, 1e-5), valid)
        h = F.layer_norm(x, (d,), self.ln2_g, self.ln2_b, 1e-5)
        h = F.gelu(torch.matmul(h, self.fc1_w) + self.fc1_b)
        return x + torch.matmul(h, self.fc2_w) + self.fc2_b


class GrowformerClassifier(nn.Module):
    """A growformer classifier rebuilt in PyTorch: forward(ids, valid=None) -> logits."""

    def __init__(self, cfg, params, pad_id, classes, dtype):
        super().__init__()
        p = _Params(params, dtype)
        self.pad_id = int(pad_id)
        self.num_classes = int(classes)
        self.cls_pool = cfg.get("pool", "mean") == "cls"
        self.max_len = int(cfg["max_len"])
        self.max_tokens = self.max_len - 1 if self.cls_pool else self.max_len
        self.embed, self.pos = p("embed"), p("pos")
        if self.cls_pool:
            self.cls = p("cls")
        self.layers = nn.ModuleList([Layer(p, b, cfg) for b in range(_num_blocks(params))])
        self.final_norm = bool(cfg.get("final_norm", True))
        if self.final_norm:
            self.lnf_g, self.lnf_b = p("ln_f.gamma"), p("ln_f.beta")
        self.d = int(cfg["d_model"])
        self.cls_w, self.cls_b = p("classifier.w"), p("classifier.b")
        self.heads_per_block = [len(l.attn.head_ids) for l in self.layers]

    def forward(self, ids, valid=None):
        if valid is None:
            valid = ids != self.pad_id
        valid = valid.to(torch.bool)
        x = self.embed[ids]
        if self.cls_pool:
            B = ids.shape[0]
            x = torch.cat([self.cls.expand(B, 1, -1), x], dim=1)
            valid = torch.cat([torch.ones(B, 1, dtype=torch.bool, device=ids.device), valid], dim=1)
        x = x + self.pos[: x.shape[1]]
        for layer in self.layers:
            x = layer(x, valid)
        if self.final_norm:
            x = F.layer_norm(x, (self.d,), self.lnf_g, self.lnf_b, 1e-5)
        if self.cls_pool:
            pooled = x[:, 0]
        else:
            w = valid.to(x.dtype)[..., None]
            pooled = (x * w).sum(dim=1) / w.sum(dim=1)
        return torch.matmul(pooled, self.cls_w) + self.cls_b

    def encode(self, token_lists):
        """(ids, valid) of token id lists: truncated to the model's positions and padded
        to the longest, as growformer's batches are."""
        rows = [list(t)[: self.max_tokens] for t in token_lists]
        T = max(1, max((len(r) for r in rows), default=1))
        ids = torch.full((len(rows), T), self.pad_id, dtype=torch.long)
        valid = torch.zeros((len(rows), T), dtype=torch.bool)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            valid[i, : len(r)] = True
        return ids, valid
