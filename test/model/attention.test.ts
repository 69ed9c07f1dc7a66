import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { fusedAttention, fusedAttentionWithCache } from '../../model/attention.ts';
import { initBackend, tf } from '../../model/backend.ts';
import { attentionLimits } from '../../model/backend-ops.ts';

const [B, T, H, KV, hd] = [2, 5, 4, 2, 6];
const values = (n: number, s: number): Float32Array =>
  Float32Array.from({ length: n }, (_, i) => Math.sin(0.7 * i + s));

/** The op-by-op equations (HF's), independent of attention.ts. */
function reference(
  q: tf.Tensor,
  k: tf.Tensor,
  v: tf.Tensor,
  cos: tf.Tensor,
  sin: tf.Tensor,
  bias: tf.Tensor,
): tf.Tensor {
  const heads = (x: tf.Tensor, n: number): tf.Tensor =>
    tf.transpose(tf.reshape(x, [B, T, n, hd]), [0, 2, 1, 3]);
  const c = tf.reshape(cos, [B, 1, T, hd]);
  const s = tf.reshape(sin, [B, 1, T, hd]);
  const rotateHalf = (x: tf.Tensor): tf.Tensor => {
    const [a, b] = tf.split(x, 2, 3);
    return tf.concat([tf.neg(b!), a!], 3);
  };
  const rope = (x: tf.Tensor): tf.Tensor => tf.add(tf.mul(x, c), tf.mul(rotateHalf(x), s));
  // Query head h reads key/value head floor(h / nRep) (HF's repeat_kv).
  const repeat = (x: tf.Tensor): tf.Tensor =>
    tf.concat(
      Array.from({ length: H }, (_, h) =>
        tf.slice(x, [0, Math.floor(h / (H / KV)), 0, 0], [B, 1, T, hd]),
      ),
      1,
    );
  const qh = rope(heads(q, H));
  const kh = repeat(rope(heads(k, KV)));
  const vh = repeat(heads(v, KV));
  const scores = tf.add(
    tf.div(tf.matMul(qh, kh, false, true), Math.sqrt(hd)),
    tf.reshape(bias, [bias.shape[0]!, 1, T, T]),
  );
  const out = tf.matMul(tf.softmax(scores), vh);
  return tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [B, T, H * hd]);
}

function inputs() {
  const pos = Array.from({ length: B * T }, (_, i) => (i % T) + 3);
  const angle = (p: number, e: number): number => p / Math.pow(10000, (2 * (e % (hd / 2))) / hd);
  // Row 0 causal; row 1 left-padded by two, so its first two queries see no key at all.
  const bias = new Float32Array(B * T * T);
  for (let b = 0; b < B; b++) {
    for (let i = 0; i < T; i++)
      for (let j = 0; j < T; j++) if (j > i || (b === 1 && j < 2)) bias[(b * T + i) * T + j] = -1e9;
  }
  return {
    q: tf.tensor3d(values(B * T * H * hd, 1), [B, T, H * hd]),
    k: tf.tensor3d(values(B * T * KV * hd, 2), [B, T, KV * hd]),
    v: tf.tensor3d(values(B * T * KV * hd, 3), [B, T, KV * hd]),
    cos: tf.tensor3d(
      pos.flatMap((p) => Array.from({ length: hd }, (_, e) => Math.cos(angle(p, e)))),
      [B, T, hd],
    ),
    sin: tf.tensor3d(
      pos.flatMap((p) => Array.from({ length: hd }, (_, e) => Math.sin(angle(p, e)))),
      [B, T, hd],
    ),
    bias: tf.tensor3d(bias, [B, T, T]),
  };
}

function close(a: tf.Tensor, b: tf.Tensor, tol: number, what: string): void {
  const x = a.dataSync();
  const y = b.dataSync();
  assert.is(x.length, y.length, what);
  for (let i = 0; i < x.length; i++)
    assert.ok(Math.abs(x[i]! - y[i]!) <= tol, `${what}[${i}]: ${x[i]} vs ${y[i]}`);
}

// torch also in blocks (attentionLimits): of one query row of one kv head's two query heads
// (2 × 5 keys = 10 scores), and of two rows with a shorter last block.
const runs = [
  ['cpu', 0],
  ['wasm', 0],
  ['torch', 0],
  ['torch', 12],
  ['torch', 25],
] as const;
for (const [backend, maxScores] of runs) {
  const blocks = maxScores ? `, blocks of at most ${maxScores} scores` : '';
  test(`fused attention equals the op-by-op equations, values and gradients (${backend}${blocks})`, async () => {
    await initBackend(backend);
    const before = tf.memory().numTensors;
    const saved = attentionLimits.maxScores;
    attentionLimits.maxScores = maxScores;
    try {
      check();
    } finally {
      attentionLimits.maxScores = saved;
    }
    assert.is(tf.memory().numTensors, before);
  });
}

function check(): void {
  tf.tidy(() => {
    const x = inputs();
    const w = tf.tensor3d(values(B * T * H * hd, 4), [B, T, H * hd]);
    const loss = (f: typeof reference) => (q: tf.Tensor, k: tf.Tensor, v: tf.Tensor) =>
      tf.sum(tf.mul(f(q, k, v, x.cos, x.sin, x.bias), w)) as tf.Scalar;
    const fused = (
      q: tf.Tensor,
      k: tf.Tensor,
      v: tf.Tensor,
      c: tf.Tensor,
      s: tf.Tensor,
      b: tf.Tensor,
    ) =>
      fusedAttention(
        q as tf.Tensor3D,
        k as tf.Tensor3D,
        v as tf.Tensor3D,
        c as tf.Tensor3D,
        s as tf.Tensor3D,
        b as tf.Tensor3D,
        { H, KV, hd },
      );
    close(
      fused(x.q, x.k, x.v, x.cos, x.sin, x.bias),
      reference(x.q, x.k, x.v, x.cos, x.sin, x.bias),
      1e-5,
      'out',
    );
    const got = tf.grads(loss(fused))([x.q, x.k, x.v]);
    const want = tf.grads(loss(reference))([x.q, x.k, x.v]);
    ['dq', 'dk', 'dv'].forEach((name, i) => close(got[i]!, want[i]!, 1e-5, name));
  });
}

test('torch: attention in blocks gives the values and gradients of the whole attention', async () => {
  await initBackend('torch');
  const saved = attentionLimits.maxScores;
  const run = (maxScores: number) => {
    attentionLimits.maxScores = maxScores;
    const x = inputs();
    const w = tf.tensor3d(values(B * T * H * hd, 4), [B, T, H * hd]);
    const f = (q: tf.Tensor, k: tf.Tensor, v: tf.Tensor) =>
      fusedAttention(q as tf.Tensor3D, k as tf.Tensor3D, v as tf.Tensor3D, x.cos, x.sin, x.bias, {
        H,
        KV,
        hd,
      });
    const cached = fusedAttentionWithCache(x.q, x.k, x.v, x.cos, x.sin, x.bias, { H, KV, hd });
    return [
      f(x.q, x.k, x.v),
      cached.out,
      ...tf.grads((q, k, v) => tf.sum(tf.mul(f(q, k, v), w)))([x.q, x.k, x.v]),
    ];
  };
  try {
    tf.tidy(() => {
      const whole = run(0);
      for (const maxScores of [12, 25]) {
        const blocked = run(maxScores);
        ['out', 'cached out', 'dq', 'dk', 'dv'].forEach((name, i) =>
          close(blocked[i]!, whole[i]!, 1e-6, `${name} (blocks of ${maxScores})`),
        );
      }
    });
  } finally {
    attentionLimits.maxScores = saved;
  }
});

test('the cache variant returns the same output and rotated keys / values in [B, KV, T, hd]', async () => {
  await initBackend('wasm');
  tf.tidy(() => {
    const x = inputs();
    const r = fusedAttentionWithCache(x.q, x.k, x.v, x.cos, x.sin, x.bias, { H, KV, hd });
    close(r.out, fusedAttention(x.q, x.k, x.v, x.cos, x.sin, x.bias, { H, KV, hd }), 1e-6, 'out');
    assert.equal(r.k.shape, [B, KV, T, hd]);
    close(r.v, tf.transpose(tf.reshape(x.v, [B, T, KV, hd]), [0, 2, 1, 3]), 0, 'v');
    // Position of token 0 is 3 for both rows: its rotated key is x cos + rotate_half(x) sin.
    const k0 = x.k.dataSync().slice(0, hd);
    const c = x.cos.dataSync();
    const s = x.sin.dataSync();
    const want = Array.from(
      k0,
      (val, e) => val * c[e]! + (e < hd / 2 ? -k0[e + hd / 2]! : k0[e - hd / 2]!) * s[e]!,
    );
    const got = r.k.dataSync().slice(0, hd);
    want.forEach((w, e) => assert.ok(Math.abs(got[e]! - w) < 1e-6));
  });
});

test.run();
