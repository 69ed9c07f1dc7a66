"""PyTorch-eager reference for rtjob's torch backend: the same Qwen3-shaped model as rtjob's
(RMSNorm, rotate-half RoPE, grouped-query attention with per-head q/k RMSNorm, SwiGLU MLP, tied
embeddings; HF transformers' Qwen3 equations written out, since transformers is not installed
where this runs), random weights of the same distribution, a next-token NLL, torch.optim.AdamW
(betas 0.9/0.95, global-norm clipping at 1.0, as rtjob's trainer) and KV-cache decode.

Two ways to run it:

  python3 bench/torch_reference.py CONFIG.json --serve [--layers N] [--vocab V] [--batch B]
      [--seq T] [--threads 1]
    bench/torch.ts's peer: builds the model, prints {"ready": ...} and then answers one JSON line
    per command read from stdin, so that the TypeScript side can interleave its own rounds:
      {"cmd": "train"}                          -> {"ms": one training step, "cpuMs": its CPU time}
      {"cmd": "decode", "batch": 8, "prompt": 32, "new": 16} -> {"ms", "cpuMs": the decode steps}
      {"cmd": "profile"}                        -> {"kernels": torch.profiler's table of one step}

  python3 bench/torch_reference.py CONFIG.json [--layers N] [--batch 8] [--seq 512] [--steps 3]
      [--precision fp32|tf32|bf16] [--decode-batch 32]
    scripts/gpu-torch-bench.sh's one-shot run (CUDA when present): prints one JSON object.

Token ids come from the same formulas as bench/torch.ts's (speed does not depend on them).
"""
import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("config")
p.add_argument("--serve", action="store_true")
p.add_argument("--layers", type=int)
p.add_argument("--vocab", type=int)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--steps", type=int, default=3)
p.add_argument("--threads", type=int, default=0)
p.add_argument("--precision", default="tf32", choices=["fp32", "tf32", "bf16"])
p.add_argument("--decode-batch", type=int, default=32)
a = p.parse_args()
if a.threads > 0:
    torch.set_num_threads(a.threads)
cfg = json.load(open(a.config))
L = a.layers or cfg["num_hidden_layers"]
D, I = cfg["hidden_size"], cfg["intermediate_size"]
V = a.vocab or cfg["vocab_size"]
H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = a.precision != "fp32"
torch.backends.cudnn.allow_tf32 = a.precision != "fp32"
autocast = torch.autocast(dev, dtype=torch.bfloat16, enabled=a.precision == "bf16")
torch.manual_seed(0)


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = lambda *s: torch.nn.Parameter(torch.randn(*s) * 0.02)
        o = lambda *s: torch.nn.Parameter(torch.ones(*s))
        self.embed = g(V, D)
        self.layers = torch.nn.ModuleList()
        for _ in range(L):
            m = torch.nn.Module()
            m.ln1, m.ln2, m.qn, m.kn = o(D), o(D), o(hd), o(hd)
            m.q, m.k, m.v, m.o = g(H * hd, D), g(KV * hd, D), g(KV * hd, D), g(D, H * hd)
            m.gate, m.up, m.down = g(I, D), g(I, D), g(D, I)
            self.layers.append(m)
        self.norm = o(D)
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(4096).float(), inv)
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1), persistent=False)
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1), persistent=False)

    def rope(self, x, pos):
        c, s = self.cos[pos][:, None], self.sin[pos][:, None]  # [B,1,T,hd]
        rot = torch.cat([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
        return x * c + rot * s

    def forward(self, ids, past=None):
        B, T = ids.shape
        Tp = 0 if past is None else past[0][0].shape[2]
        pos = torch.arange(Tp, Tp + T, device=ids.device)[None].expand(B, T)
        h = F.embedding(ids, self.embed)
        present = []
        for i, m in enumerate(self.layers):
            x = rms(h, m.ln1)
            q = rms((x @ m.q.t()).view(B, T, H, hd), m.qn).transpose(1, 2)
            k = rms((x @ m.k.t()).view(B, T, KV, hd), m.kn).transpose(1, 2)
            v = (x @ m.v.t()).view(B, T, KV, hd).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            if past is not None:
                k = torch.cat([past[i][0], k], 2)
                v = torch.cat([past[i][1], v], 2)
            present.append((k, v))
            ke = k.repeat_interleave(H // KV, 1)
            ve = v.repeat_interleave(H // KV, 1)
            if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2
                att = F.scaled_dot_product_attention(q, ke, ve, is_causal=past is None)
            else:  # torch 1.13 (Debian's): the same equations composed
                s = (q @ ke.transpose(-1, -2)) / hd**0.5
                if past is None:
                    s = s + torch.full((T, T), float("-inf"), device=s.device).triu(1)
                att = torch.softmax(s, -1) @ ve
            h = h + att.transpose(1, 2).reshape(B, T, H * hd) @ m.o.t()
            y = rms(h, m.ln2)
            h = h + (F.silu(y @ m.gate.t()) * (y @ m.up.t())) @ m.down.t()
        return rms(h, self.norm) @ self.embed.t(), present


def sync():
    if dev == "cuda":
        torch.cuda.synchronize()


def token_ids(B, T, mul_b, mul_t):
    """The same ids as bench/torch.ts: (b * mul_b + t * mul_t) % V."""
    b = torch.arange(B)[:, None]
    t = torch.arange(T)[None, :]
    return ((b * mul_b + t * mul_t) % V).to(dev)


model = Model().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
ids = token_ids(a.batch, a.seq, 7919, 104729)


def step():
    t0 = time.perf_counter()
    with autocast:
        logits, _ = model(ids[:, :-1])
    logp = torch.log_softmax(logits.float(), -1)
    loss = -logp.gather(-1, ids[:, 1:, None]).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    sync()
    return time.perf_counter() - t0


@torch.no_grad()
def decode(batch, prompt, new):
    """Prefill `prompt` tokens per row, one warm-up step, then `new` timed KV-cache steps."""
    with autocast:
        prompts = token_ids(batch, prompt, 31, 17)
        logits, past = model(prompts)
        logits, past = model(torch.full((batch, 1), 5, device=dev), past)
        sync()
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(new):
            tok = ((torch.arange(batch, device=dev) + i) % 1000)[:, None]
            logits, past = model(tok, past)
            logits[:, -1].float().cpu()  # the caller reads the next-token logits, as rtjob's do
        sync()
    return time.perf_counter() - t0, time.process_time() - c0


def profile():
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    with prof(activities=[ProfilerActivity.CPU], profile_memory=True) as pr:
        step()
    rows = []
    for e in pr.key_averages():
        rows.append({"name": e.key, "calls": e.count, "selfMs": e.self_cpu_time_total / 1000,
                     "totalMs": e.cpu_time_total / 1000,
                     "selfBytes": max(0, e.self_cpu_memory_usage)})
    rows.sort(key=lambda r: -r["selfMs"])
    return rows


if a.serve:
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"ready": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                                "params": params}}), flush=True)
    for line in sys.stdin:
        c = json.loads(line)
        if c["cmd"] == "train":
            c0 = time.process_time()
            r = {"ms": step() * 1000, "cpuMs": (time.process_time() - c0) * 1000}
        elif c["cmd"] == "decode":
            w, cpu = decode(c["batch"], c["prompt"], c["new"])
            r = {"ms": w * 1000, "cpuMs": cpu * 1000}
        elif c["cmd"] == "profile":
            r = {"kernels": profile()}
        else:
            r = {"error": f"unknown command {c['cmd']}"}
        print(json.dumps(r), flush=True)
    sys.exit(0)

out = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__,
       "precision": a.precision, "layers": L, "batch": a.batch, "seq": a.seq}
out["params"] = sum(p.numel() for p in model.parameters())
step()
times = [step() for _ in range(a.steps)]
out["train"] = {"secondsPerStep": times, "tokensPerSecond": a.batch * a.seq / min(times)}
if dev == "cuda":
    out["train"]["peakGiB"] = torch.cuda.max_memory_allocated() / 2**30
new = 32
out["decode"] = {"batch": a.decode_batch, "newTokens": new,
                 "tokensPerSecond": a.decode_batch * new / decode(a.decode_batch, 64, new)[0]}
print(json.dumps(out))
