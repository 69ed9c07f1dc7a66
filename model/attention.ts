/**
 * Rotary embedding + grouped-query causal attention as one differentiable op, computed in plain
 * loops over the token-major layout the projections produce. For the short sequences this
 * project trains on, the op-by-op form spends most of its time outside arithmetic: head
 * transposes and splits, the bias add, a softmax over padded rows, and batched products that
 * the wasm backend runs slowly. Here a masked score (bias ≤ -1e8, i.e. causal or padding) is
 * skipped outright, which is exact: the op-by-op softmax gives it weight exp(-1e9) = 0.
 *
 * The equations are HF's: `q' = q cos + rotate_half(q) sin` (likewise k), query head h reads
 * key/value head `floor(h / nRep)`, `p = softmax(q'·k'/sqrt(hd) + bias)`, `out = p v`.
 *
 * Over 600 lines on purpose: the forward and backward kernels are unrolled by hand (the model is
 * one of the three places allowed to grow), and split apart they would share every index helper.
 *
 * @module
 */
import { tf } from './backend.ts';
import { attentionImpls } from './backend-ops.ts';
import { ModelError } from './errors.ts';

/** Bias at or below this is a masked position (the model uses -1e9). */
const maskedBelow = -1e8;

interface Dims {
  B: number;
  T: number;
  H: number;
  KV: number;
  hd: number;
  biasRows: number;
}

/** `x cos + rotate_half(x) sin` over every head of every token, into `out`. */
function rope(
  x: Float32Array,
  cos: Float32Array,
  sin: Float32Array,
  heads: number,
  d: Dims,
  out: Float32Array,
): void {
  const { hd } = d;
  const half = hd / 2;
  const tokens = d.B * d.T;
  for (let n = 0; n < tokens; n++) {
    const c = n * hd;
    for (let h = 0; h < heads; h++) {
      const o = (n * heads + h) * hd;
      for (let e = 0; e < half; e++)
        out[o + e] = x[o + e]! * cos[c + e]! - x[o + e + half]! * sin[c + e]!;
      for (let e = half; e < hd; e++)
        out[o + e] = x[o + e]! * cos[c + e]! + x[o + e - half]! * sin[c + e]!;
    }
  }
}

/** The transpose of {@link rope}: the gradient of x given the gradient of the rotated x, into `out`. */
function ropeBackward(
  g: Float32Array,
  cos: Float32Array,
  sin: Float32Array,
  heads: number,
  d: Dims,
  out: Float32Array,
): void {
  const { hd } = d;
  const half = hd / 2;
  const tokens = d.B * d.T;
  for (let n = 0; n < tokens; n++) {
    const c = n * hd;
    for (let h = 0; h < heads; h++) {
      const o = (n * heads + h) * hd;
      for (let e = 0; e < half; e++)
        out[o + e] = g[o + e]! * cos[c + e]! + g[o + e + half]! * sin[c + e + half]!;
      for (let e = half; e < hd; e++)
        out[o + e] = g[o + e]! * cos[c + e]! - g[o + e - half]! * sin[c + e - half]!;
    }
  }
}

/**
 * How many leading keys row i can attend: keys at or after the returned index are all masked
 * (for a causal mask, i + 1). A row with every key masked gets T: the op-by-op softmax of equal
 * -1e9 scores is uniform over all of them.
 */
function attendRange(bias: Float32Array, row: number, T: number): number {
  let end = T;
  while (end > 0 && bias[row + end - 1]! <= maskedBelow) end--;
  return end === 0 ? T : end;
}

/**
 * `out0[j] = x[x0..x0+hd) · y[yBase + j*yStride ..)` for j < n, and the same for a second row
 * `x1` into `out1` (pass x1 = -1 for one row). Two rows and four keys per pass keep eight sums in
 * registers and load each key once for both rows.
 */
function dots(
  x: Float32Array,
  x0: number,
  x1: number,
  y: Float32Array,
  yBase: number,
  yStride: number,
  n: number,
  hd: number,
  out0: Float64Array,
  out1: Float64Array,
): void {
  let j = 0;
  if (x1 >= 0) {
    for (; j + 4 <= n; j += 4) {
      const k0 = yBase + j * yStride;
      const k1 = k0 + yStride;
      const k2 = k1 + yStride;
      const k3 = k2 + yStride;
      let a0 = 0,
        a1 = 0,
        a2 = 0,
        a3 = 0,
        b0 = 0,
        b1 = 0,
        b2 = 0,
        b3 = 0;
      for (let e = 0; e < hd; e++) {
        const u = x[x0 + e]!;
        const w = x[x1 + e]!;
        const y0 = y[k0 + e]!;
        const y1 = y[k1 + e]!;
        const y2 = y[k2 + e]!;
        const y3 = y[k3 + e]!;
        a0 += u * y0;
        a1 += u * y1;
        a2 += u * y2;
        a3 += u * y3;
        b0 += w * y0;
        b1 += w * y1;
        b2 += w * y2;
        b3 += w * y3;
      }
      out0[j] = a0;
      out0[j + 1] = a1;
      out0[j + 2] = a2;
      out0[j + 3] = a3;
      out1[j] = b0;
      out1[j + 1] = b1;
      out1[j + 2] = b2;
      out1[j + 3] = b3;
    }
  }
  for (; j < n; j++) {
    const k0 = yBase + j * yStride;
    let a0 = 0;
    let b0 = 0;
    for (let e = 0; e < hd; e++) {
      a0 += x[x0 + e]! * y[k0 + e]!;
      if (x1 >= 0) b0 += x[x1 + e]! * y[k0 + e]!;
    }
    out0[j] = a0;
    if (x1 >= 0) out1[j] = b0;
  }
}

/**
 * `dst[d0 + e] = Σ_{j<n} w[w0 + j] · y[yBase + j*yStride + e]` for e < hd, and the same for a
 * second weight row `w1` into `d1` (pass w1 = -1 for one row); four features per pass. With
 * `accumulate` (one row, for short tails) the sums are added to `dst` instead.
 */
function mix(
  w: Float32Array,
  w0: number,
  w1: number,
  y: Float32Array,
  yBase: number,
  yStride: number,
  n: number,
  hd: number,
  dst: Float32Array,
  d0: number,
  d1: number,
  accumulate = false,
): void {
  if (accumulate) {
    for (let e = 0; e < hd; e++) {
      let a0 = 0;
      for (let j = 0; j < n; j++) a0 += w[w0 + j]! * y[yBase + j * yStride + e]!;
      dst[d0 + e] = dst[d0 + e]! + a0;
    }
    return;
  }
  let e = 0;
  for (; e + 4 <= hd; e += 4) {
    let a0 = 0,
      a1 = 0,
      a2 = 0,
      a3 = 0,
      b0 = 0,
      b1 = 0,
      b2 = 0,
      b3 = 0;
    if (w1 >= 0) {
      for (let j = 0; j < n; j++) {
        const p = w[w0 + j]!;
        const q = w[w1 + j]!;
        const o = yBase + j * yStride + e;
        const y0 = y[o]!;
        const y1 = y[o + 1]!;
        const y2 = y[o + 2]!;
        const y3 = y[o + 3]!;
        a0 += p * y0;
        a1 += p * y1;
        a2 += p * y2;
        a3 += p * y3;
        b0 += q * y0;
        b1 += q * y1;
        b2 += q * y2;
        b3 += q * y3;
      }
      dst[d1 + e] = b0;
      dst[d1 + e + 1] = b1;
      dst[d1 + e + 2] = b2;
      dst[d1 + e + 3] = b3;
    } else {
      for (let j = 0; j < n; j++) {
        const p = w[w0 + j]!;
        const o = yBase + j * yStride + e;
        a0 += p * y[o]!;
        a1 += p * y[o + 1]!;
        a2 += p * y[o + 2]!;
        a3 += p * y[o + 3]!;
      }
    }
    dst[d0 + e] = a0;
    dst[d0 + e + 1] = a1;
    dst[d0 + e + 2] = a2;
    dst[d0 + e + 3] = a3;
  }
  for (; e < hd; e++) {
    let a0 = 0;
    let b0 = 0;
    for (let j = 0; j < n; j++) {
      const yv = y[yBase + j * yStride + e]!;
      a0 += w[w0 + j]! * yv;
      if (w1 >= 0) b0 += w[w1 + j]! * yv;
    }
    dst[d0 + e] = a0;
    if (w1 >= 0) dst[d1 + e] = b0;
  }
}

/** Softmax of row `s` over its first `end` scores into `probs[po..)`, or uniform when all are masked. */
function softmaxRow(
  s: Float64Array,
  end: number,
  allMasked: boolean,
  T: number,
  probs: Float32Array,
  po: number,
): void {
  if (allMasked) {
    // Every key masked: in float32 each score rounds to -1e9, so the op-by-op softmax is uniform.
    for (let j = 0; j < end; j++) probs[po + j] = 1 / T;
    return;
  }
  let max = -Infinity;
  for (let j = 0; j < end; j++) if (s[j]! > max) max = s[j]!;
  let z = 0;
  for (let j = 0; j < end; j++) z += s[j] = Math.exp(s[j]! - max);
  for (let j = 0; j < end; j++) probs[po + j] = s[j]! / z;
}

/**
 * Forward pass; returns the output `[B, T, H*hd]` and the probabilities `[B, H, T, T]`. Rows go
 * in pairs through {@link dots} and {@link mix}; a pair shares the keys both attend to.
 */
function forwardLoops(
  qr: Float32Array,
  kr: Float32Array,
  v: Float32Array,
  bias: Float32Array,
  d: Dims,
  scale: number,
) {
  const { B, T, H, KV, hd } = d;
  const nRep = H / KV;
  const qStride = H * hd;
  const kStride = KV * hd;
  const out = new Float32Array(B * T * H * hd);
  const probs = new Float32Array(B * H * T * T);
  const s0 = new Float64Array(T);
  const s1 = new Float64Array(T);
  const ends = new Int32Array(T);
  const allMasked = new Uint8Array(T);
  for (let b = 0; b < B; b++) {
    const biasB = (d.biasRows === 1 ? 0 : b) * T * T;
    for (let i = 0; i < T; i++) {
      ends[i] = attendRange(bias, biasB + i * T, T);
      allMasked[i] = bias[biasB + i * T + ends[i]! - 1]! <= maskedBelow ? 1 : 0;
    }
    for (let h = 0; h < H; h++) {
      const kBase = b * T * kStride + Math.floor(h / nRep) * hd;
      for (let i = 0; i < T; i += 2) {
        const pair = i + 1 < T;
        const endA = ends[i]!;
        const endB = pair ? ends[i + 1]! : 0;
        const common = pair ? Math.min(endA, endB) : endA;
        const qa = (b * T + i) * qStride + h * hd;
        const qb = qa + qStride;
        dots(qr, qa, pair ? qb : -1, kr, kBase, kStride, common, hd, s0, s1);
        if (endA > common)
          dots(
            qr,
            qa,
            -1,
            kr,
            kBase + common * kStride,
            kStride,
            endA - common,
            hd,
            s0.subarray(common),
            s1,
          );
        if (pair && endB > common)
          dots(
            qr,
            qb,
            -1,
            kr,
            kBase + common * kStride,
            kStride,
            endB - common,
            hd,
            s1.subarray(common),
            s0,
          );
        const rows = pair ? 2 : 1;
        for (let r = 0; r < rows; r++) {
          const s = r === 0 ? s0 : s1;
          const end = r === 0 ? endA : endB;
          const bi = biasB + (i + r) * T;
          for (let j = 0; j < end; j++) s[j] = s[j]! * scale + bias[bi + j]!;
          softmaxRow(s, end, allMasked[i + r] === 1, T, probs, ((b * H + h) * T + i + r) * T);
        }
        const pa = ((b * H + h) * T + i) * T;
        mix(probs, pa, pair ? pa + T : -1, v, kBase, kStride, common, hd, out, qa, qb);
        const tail = kBase + common * kStride;
        if (endA > common)
          mix(probs, pa + common, -1, v, tail, kStride, endA - common, hd, out, qa, -1, true);
        if (pair && endB > common)
          mix(probs, pa + T + common, -1, v, tail, kStride, endB - common, hd, out, qb, -1, true);
      }
    }
  }
  return { out, probs };
}

/** Backward pass of {@link forwardLoops}: gradients of the rotated q, rotated k and v. */
function backwardLoops(
  dOut: Float32Array,
  qr: Float32Array,
  kr: Float32Array,
  v: Float32Array,
  probs: Float32Array,
  bias: Float32Array,
  d: Dims,
  scale: number,
) {
  const { B, T, H, KV, hd } = d;
  const nRep = H / KV;
  const qStride = H * hd;
  const kStride = KV * hd;
  const dq = new Float32Array(qr.length);
  const dk = new Float32Array(kr.length);
  const dv = new Float32Array(v.length);
  const dS = new Float32Array(T * T);
  const s0 = new Float64Array(T);
  const s1 = new Float64Array(T);
  const ends = new Int32Array(T);
  const starts = new Int32Array(T);
  for (let b = 0; b < B; b++) {
    const biasB = (d.biasRows === 1 ? 0 : b) * T * T;
    for (let i = 0; i < T; i++) ends[i] = attendRange(bias, biasB + i * T, T);
    // Rows before starts[j] never attend key j.
    for (let j = 0; j < T; j++) {
      let i = 0;
      while (i < T && ends[i]! <= j) i++;
      starts[j] = i;
    }
    for (let h = 0; h < H; h++) {
      const kBase = b * T * kStride + Math.floor(h / nRep) * hd;
      const qBase = b * T * qStride + h * hd;
      const pBase = (b * H + h) * T * T;
      for (let i = 0; i < T; i += 2) {
        const pair = i + 1 < T;
        const endA = ends[i]!;
        const endB = pair ? ends[i + 1]! : 0;
        const common = pair ? Math.min(endA, endB) : endA;
        const qa = qBase + i * qStride;
        const qb = qa + qStride;
        // dP = dOut · v for the keys each row attends to.
        dots(dOut, qa, pair ? qb : -1, v, kBase, kStride, common, hd, s0, s1);
        if (endA > common)
          dots(
            dOut,
            qa,
            -1,
            v,
            kBase + common * kStride,
            kStride,
            endA - common,
            hd,
            s0.subarray(common),
            s1,
          );
        if (pair && endB > common)
          dots(
            dOut,
            qb,
            -1,
            v,
            kBase + common * kStride,
            kStride,
            endB - common,
            hd,
            s1.subarray(common),
            s0,
          );
        for (let r = 0; r < (pair ? 2 : 1); r++) {
          const dp = r === 0 ? s0 : s1;
          const end = r === 0 ? endA : endB;
          const po = pBase + (i + r) * T;
          const so = (i + r) * T;
          let rowDot = 0;
          for (let j = 0; j < end; j++) rowDot += probs[po + j]! * dp[j]!;
          for (let j = 0; j < end; j++) dS[so + j] = probs[po + j]! * (dp[j]! - rowDot) * scale;
          for (let j = end; j < T; j++) dS[so + j] = 0;
        }
        // dq = dS · k'.
        mix(dS, i * T, pair ? (i + 1) * T : -1, kr, kBase, kStride, common, hd, dq, qa, qb);
        const tail = kBase + common * kStride;
        if (endA > common)
          mix(dS, i * T + common, -1, kr, tail, kStride, endA - common, hd, dq, qa, -1, true);
        if (pair && endB > common)
          mix(dS, (i + 1) * T + common, -1, kr, tail, kStride, endB - common, hd, dq, qb, -1, true);
      }
      for (let j = 0; j < T; j++) {
        const ko = kBase + j * kStride;
        const i0 = starts[j]!;
        let e = 0;
        for (; e + 4 <= hd; e += 4) {
          let v0 = 0,
            v1 = 0,
            v2 = 0,
            v3 = 0,
            k0 = 0,
            k1 = 0,
            k2 = 0,
            k3 = 0;
          for (let i = i0; i < T; i++) {
            const qo = qBase + i * qStride + e;
            const p = probs[pBase + i * T + j]!;
            const g = dS[i * T + j]!;
            v0 += p * dOut[qo]!;
            v1 += p * dOut[qo + 1]!;
            v2 += p * dOut[qo + 2]!;
            v3 += p * dOut[qo + 3]!;
            k0 += g * qr[qo]!;
            k1 += g * qr[qo + 1]!;
            k2 += g * qr[qo + 2]!;
            k3 += g * qr[qo + 3]!;
          }
          dv[ko + e] = dv[ko + e]! + v0;
          dv[ko + e + 1] = dv[ko + e + 1]! + v1;
          dv[ko + e + 2] = dv[ko + e + 2]! + v2;
          dv[ko + e + 3] = dv[ko + e + 3]! + v3;
          dk[ko + e] = dk[ko + e]! + k0;
          dk[ko + e + 1] = dk[ko + e + 1]! + k1;
          dk[ko + e + 2] = dk[ko + e + 2]! + k2;
          dk[ko + e + 3] = dk[ko + e + 3]! + k3;
        }
        for (; e < hd; e++) {
          let av = 0;
          let ak = 0;
          for (let i = i0; i < T; i++) {
            const qo = qBase + i * qStride + e;
            av += probs[pBase + i * T + j]! * dOut[qo]!;
            ak += dS[i * T + j]! * qr[qo]!;
          }
          dv[ko + e] = dv[ko + e]! + av;
          dk[ko + e] = dk[ko + e]! + ak;
        }
      }
    }
  }
  return { dq, dk, dv };
}

type AttentionFn = (
  q: tf.Tensor,
  k: tf.Tensor,
  v: tf.Tensor,
  cos: tf.Tensor,
  sin: tf.Tensor,
  bias: tf.Tensor,
) => tf.Tensor;

/**
 * Differentiable RoPE + causal grouped-query attention over token-major projections.
 *
 * @param q `[B, T, H*hd]` query projections (before RoPE)
 * @param k `[B, T, KV*hd]`, v `[B, T, KV*hd]`
 * @param cos `[B, T, hd]`, sin `[B, T, hd]`: the rotary tables at each token's position
 * @param bias `[B or 1, T, T]` additive mask (0 attend, -1e9 masked)
 * @returns `[B, T, H*hd]`, heads concatenated as `o_proj` expects
 */
export function fusedAttention(
  q: tf.Tensor3D,
  k: tf.Tensor3D,
  v: tf.Tensor3D,
  cos: tf.Tensor3D,
  sin: tf.Tensor3D,
  bias: tf.Tensor3D,
  heads: { H: number; KV: number; hd: number },
): tf.Tensor3D {
  const impl = attentionImpls.get(tf.getBackend());
  if (impl) return impl.fused(q, k, v, cos, sin, bias, heads);
  const [B, T] = q.shape;
  const d: Dims = { B, T, ...heads, biasRows: bias.shape[0] };
  const scale = 1 / Math.sqrt(heads.hd);
  const fn = tf.customGrad(((
    qT: tf.Tensor,
    kT: tf.Tensor,
    vT: tf.Tensor,
    cT: tf.Tensor,
    sT: tf.Tensor,
    bT: tf.Tensor,
  ) => {
    const cosA = cT.dataSync() as Float32Array;
    const sinA = sT.dataSync() as Float32Array;
    const qr = new Float32Array(qT.size);
    const kr = new Float32Array(kT.size);
    rope(qT.dataSync() as Float32Array, cosA, sinA, d.H, d, qr);
    rope(kT.dataSync() as Float32Array, cosA, sinA, d.KV, d, kr);
    const vA = vT.dataSync() as Float32Array;
    const biasA = bT.dataSync() as Float32Array;
    const { out, probs } = forwardLoops(qr, kr, vA, biasA, d, scale);
    return {
      value: tf.tensor3d(out, [B, T, d.H * d.hd]),
      gradFunc: (dy: tf.Tensor) => {
        const g = backwardLoops(dy.dataSync() as Float32Array, qr, kr, vA, probs, biasA, d, scale);
        const dq = new Float32Array(qr.length);
        const dk = new Float32Array(kr.length);
        ropeBackward(g.dq, cosA, sinA, d.H, d, dq);
        ropeBackward(g.dk, cosA, sinA, d.KV, d, dk);
        return [
          tf.tensor3d(dq, qT.shape as [number, number, number]),
          tf.tensor3d(dk, kT.shape as [number, number, number]),
          tf.tensor3d(g.dv, vT.shape as [number, number, number]),
          tf.zerosLike(cT),
          tf.zerosLike(sT),
          tf.zerosLike(bT),
        ];
      },
    };
  }) as unknown as Parameters<typeof tf.customGrad>[0]) as unknown as AttentionFn;
  return fn(q, k, v, cos, sin, bias) as tf.Tensor3D;
}

/** `[B, T, heads*hd]` token-major → `[B, heads, T, hd]` head-major (the KV cache's layout). */
function toHeadMajor(
  x: Float32Array,
  B: number,
  T: number,
  heads: number,
  hd: number,
): Float32Array {
  const out = new Float32Array(x.length);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < heads; h++) {
        const src = ((b * T + t) * heads + h) * hd;
        out.set(x.subarray(src, src + hd), ((b * heads + h) * T + t) * hd);
      }
    }
  }
  return out;
}

/**
 * {@link fusedAttention} without gradients that also returns the rotated keys and the values in
 * the KV cache's layout `[B, KV, T, hd]`, for prefilling a cache.
 */
export function fusedAttentionWithCache(
  q: tf.Tensor3D,
  k: tf.Tensor3D,
  v: tf.Tensor3D,
  cos: tf.Tensor3D,
  sin: tf.Tensor3D,
  bias: tf.Tensor3D,
  heads: { H: number; KV: number; hd: number },
): { out: tf.Tensor3D; k: tf.Tensor4D; v: tf.Tensor4D } {
  const impl = attentionImpls.get(tf.getBackend());
  if (impl) return impl.withCache(q, k, v, cos, sin, bias, heads);
  const [B, T] = q.shape;
  const d: Dims = { B, T, ...heads, biasRows: bias.shape[0] };
  const cosA = cos.dataSync() as Float32Array;
  const sinA = sin.dataSync() as Float32Array;
  const qr = new Float32Array(q.size);
  const kr = new Float32Array(k.size);
  rope(q.dataSync() as Float32Array, cosA, sinA, d.H, d, qr);
  rope(k.dataSync() as Float32Array, cosA, sinA, d.KV, d, kr);
  const vA = v.dataSync() as Float32Array;
  const { out } = forwardLoops(qr, kr, vA, bias.dataSync() as Float32Array, d, 1 / Math.sqrt(d.hd));
  const cacheShape: [number, number, number, number] = [B, d.KV, T, d.hd];
  return {
    out: tf.tensor3d(out, [B, T, d.H * d.hd]),
    k: tf.tensor4d(toHeadMajor(kr, B, T, d.KV, d.hd), cacheShape),
    v: tf.tensor4d(toHeadMajor(vA, B, T, d.KV, d.hd), cacheShape),
  };
}

/** Whether the current backend runs decoding's cached attention as one op ({@link fusedAttentionWithPast}). */
export function hasFusedAttentionWithPast(): boolean {
  return !!attentionImpls.get(tf.getBackend())?.withPast;
}

/**
 * {@link fusedAttentionWithCache} after a cache: `T` new tokens attend to `pastK`/`pastV`
 * `[B, KV, Tp, hd]` and to themselves under `bias` `[B or 1, T, Tp + T]`; returns the output and
 * the grown cache. Only where the backend has it ({@link hasFusedAttentionWithPast}).
 */
export function fusedAttentionWithPast(
  q: tf.Tensor3D,
  k: tf.Tensor3D,
  v: tf.Tensor3D,
  cos: tf.Tensor3D,
  sin: tf.Tensor3D,
  bias: tf.Tensor3D,
  pastK: tf.Tensor4D,
  pastV: tf.Tensor4D,
  heads: { H: number; KV: number; hd: number },
): { out: tf.Tensor3D; k: tf.Tensor4D; v: tf.Tensor4D } {
  const withPast = attentionImpls.get(tf.getBackend())?.withPast;
  if (!withPast)
    throw new ModelError('MODEL_BACKEND', `no fused cached attention on ${tf.getBackend()}`);
  return withPast(q, k, v, cos, sin, bias, pastK, pastV, heads);
}
