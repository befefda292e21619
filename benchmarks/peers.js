// SeedNet training steps and an n x n GEMM in jax-js and TensorFlow.js (WebGPU backends), for
// benchmarks/run.py. SeedNet as in /work/shared/DESIGN.md and models/seednet.onnx:
// conv1 Conv2d(1,8,3) relu conv2 Conv2d(8,16,3) relu conv3 Conv2d(16,24,3) relu
// BatchNorm2d(24) flatten fc1 Linear(11616,32) relu Dropout(0.3) fc2 Linear(32,10)
// BatchNorm1d(10) log_softmax; NLL loss; Adam (lr 1e-3). Batch statistics only (the running
// statistics, a few hundred flops, are left out). Random inputs: speed does not depend on them.
import { init, defaultDevice, numpy as np, nn, lax, random, jit, valueAndGrad,
  blockUntilReady, tree } from "./node_modules/@jax-js/jax/dist/index.js";

const SHAPES = { w1: [8, 1, 3, 3], b1: [8], w2: [16, 8, 3, 3], b2: [16], w3: [24, 16, 3, 3],
  b3: [24], g1: [24], be1: [24], f1: [32, 11616], fb1: [32], f2: [10, 32], fb2: [10], g2: [10],
  be2: [10] };
const EPS = 1e-5, B1 = 0.9, B2 = 0.999, LR = 1e-3;

function values(shape, seed, scale) {  // deterministic pseudo-random floats in [-scale, scale)
  const n = shape.reduce((a, b) => a * b, 1);
  const out = new Float32Array(n);
  let s = seed * 2654435761 >>> 0;
  for (let i = 0; i < n; i++) {
    s = (s * 1664525 + 1013904223) >>> 0;
    out[i] = (s / 4294967296 * 2 - 1) * scale;
  }
  return out;
}

function initial() {
  const out = {};
  let seed = 1;
  for (const [k, shape] of Object.entries(SHAPES)) {
    const fan = shape.length > 1 ? shape.slice(1).reduce((a, b) => a * b, 1) : 0;
    out[k] = k.startsWith("g") ? new Float32Array(shape[0]).fill(1)
      : values(shape, seed++, fan ? 1 / Math.sqrt(fan) : 0.01);
  }
  return out;
}

function batchData(batch) {
  const x = values([batch, 1, 28, 28], 99, 1.5);
  const y = new Int32Array(batch).map((_, i) => (i * 7) % 10);
  return { x, y };
}

// ------------------------------------------------------------------------------------ jax-js
let jaxReady = null;

function jaxForwardLoss(p, x, y, key) {
  const conv = (h, w, b) => nn.relu(lax.convGeneralDilated(h, w, [1, 1], "VALID")
    .add(b.reshape([1, -1, 1, 1])));
  let h = conv(x, p.w1, p.b1);
  h = conv(h, p.w2, p.b2);
  h = conv(h, p.w3, p.b3);
  const mean = np.mean(h.ref, [0, 2, 3], { keepdims: true });
  const c = h.sub(mean);
  const v = np.mean(c.ref.mul(c.ref), [0, 2, 3], { keepdims: true });
  h = c.mul(np.reciprocal(np.sqrt(v.add(EPS))))
    .mul(p.g1.reshape([1, -1, 1, 1])).add(p.be1.reshape([1, -1, 1, 1]));
  h = h.reshape([h.shape[0], -1]);
  h = nn.relu(np.matmul(h, p.f1.transpose()).add(p.fb1));
  const keep = random.bernoulli(key, 0.7, h.shape);
  h = np.where(keep, h.mul(1 / 0.7), 0);
  h = np.matmul(h, p.f2.transpose()).add(p.fb2);
  const m2 = np.mean(h.ref, 0, { keepdims: true });
  const c2 = h.sub(m2);
  const v2 = np.mean(c2.ref.mul(c2.ref), 0, { keepdims: true });
  h = c2.mul(np.reciprocal(np.sqrt(v2.add(EPS)))).mul(p.g2).add(p.be2);
  const logp = nn.logSoftmax(h, -1);
  return np.mean(np.sum(logp.mul(nn.oneHot(y, 10)), -1)).mul(-1);
}

const jaxStep = jit((p, m, v, x, y, key, c1, c2) => {
  const [loss, g] = valueAndGrad(jaxForwardLoss)(tree.ref(p), x, y, key);
  const np_ = {}, nm = {}, nv = {};
  for (const k of Object.keys(SHAPES)) {
    const gk = g[k];
    nm[k] = m[k].mul(B1).add(gk.ref.mul(1 - B1));
    nv[k] = v[k].mul(B2).add(gk.ref.mul(gk).mul(1 - B2));
    // p - lr * (m / c1) / (sqrt(v / c2) + eps)
    np_[k] = p[k].sub(nm[k].ref.div(c1.ref).mul(LR)
      .div(np.sqrt(nv[k].ref.div(c2.ref)).add(1e-8)));
  }
  c1.dispose(); c2.dispose();
  return [np_, nm, nv, loss];
});

async function jaxSeednet(batch, steps, warmup) {
  if (!jaxReady) jaxReady = init("webgpu").then(() => defaultDevice("webgpu"));
  await jaxReady;
  const init0 = initial();
  let p = {}, m = {}, v = {};
  for (const [k, shape] of Object.entries(SHAPES)) {
    p[k] = np.array(init0[k]).reshape(shape);
    m[k] = np.zeros(shape);
    v[k] = np.zeros(shape);
  }
  const d = batchData(batch);
  const x = np.array(d.x).reshape([batch, 1, 28, 28]);
  const y = np.array(d.y, { dtype: np.int32 });
  let loss = null, t0 = 0;
  for (let t = 1; t <= warmup + steps; t++) {
    if (t === warmup + 1) { if (loss) await loss.blockUntilReady(); t0 = performance.now(); }
    if (loss) loss.dispose();
    [p, m, v, loss] = jaxStep(p, m, v, x.ref, y.ref, random.key(t),
      np.array(1 - B1 ** t), np.array(1 - B2 ** t));
  }
  // lazy: the last step's parameter and moment updates run only when waited for
  for (const t of [p, m, v]) for (const k of Object.keys(t)) await t[k].blockUntilReady();
  await loss.blockUntilReady();
  const ms = (performance.now() - t0) / steps;
  const last = (await loss.data())[0];
  tree.dispose([p, m, v, x, y]);
  return { ms, loss: last };
}

async function jaxGemm(n, reps) {
  if (!jaxReady) jaxReady = init("webgpu").then(() => defaultDevice("webgpu"));
  await jaxReady;
  const a = np.array(values([n, n], 5, 1)).reshape([n, n]);
  const b = np.array(values([n, n], 6, 1)).reshape([n, n]);
  const mm = jit((a, b) => np.matmul(a, b));
  let c = mm(a.ref, b.ref);
  await c.blockUntilReady();
  c.dispose();
  // jax-js is lazy: a result never read is never computed (an earlier version read only the
  // last of `reps` products and so timed one GEMM as `reps`). Every product is kept and
  // waited for; `ok` checks one computed element of each against the float64 dot product.
  const out = [];
  const t0 = performance.now();
  for (let i = 0; i < reps; i++) out.push(mm(a.ref, b.ref));
  for (const r of out) await r.blockUntilReady();
  const ms = (performance.now() - t0) / reps;
  const ok = await gemmOk(out, n, (r) => r.data());
  a.dispose(); b.dispose();
  return { ms, gflops: 2 * n ** 3 / ms / 1e6, ok, read: reps };
}

// Every result of a timed GEMM (``outs``, read with ``read``: a Promise of a Float32Array; it
// frees the result: jax-js's data() does) checked at element [n-1, n-1] against the float64 dot product of the inputs.
async function gemmOk(outs, n, read) {
  const a = values([n, n], 5, 1), b = values([n, n], 6, 1);
  let want = 0;
  for (let k = 0; k < n; k++) want += a[(n - 1) * n + k] * b[k * n + n - 1];
  let ok = true;
  for (const r of outs) {
    const got = (await read(r))[n * n - 1];
    ok = ok && Math.abs(got - want) <= 1e-3 * Math.sqrt(n) + 1e-4 * Math.abs(want);
  }
  return ok;
}

// ----------------------------------------------------------------------------- TensorFlow.js
let tfReady = null;

async function tfSeednet(batch, steps, warmup) {
  if (!tfReady) tfReady = tf.setBackend("webgpu").then(() => tf.ready());
  await tfReady;
  const init0 = initial();
  const p = {};
  for (const [k, shape] of Object.entries(SHAPES)) {
    let t = tf.tensor(init0[k], shape);
    if (k.startsWith("w")) t = tf.transpose(t, [2, 3, 1, 0]);  // OIHW -> HWIO (NHWC convolutions)
    p[k] = tf.variable(t);
  }
  const d = batchData(batch);
  const x = tf.tensor(d.x, [batch, 28, 28, 1]);
  const y = tf.oneHot(tf.tensor1d(d.y, "int32"), 10);
  const opt = tf.train.adam(LR, B1, B2, 1e-8);
  const loss = () => {
    const conv = (h, w, b) => tf.relu(tf.add(tf.conv2d(h, w, 1, "valid"), b));
    let h = conv(conv(conv(x, p.w1, p.b1), p.w2, p.b2), p.w3, p.b3);
    const s1 = tf.moments(h, [0, 1, 2]);
    h = tf.batchNorm(h, s1.mean, s1.variance, p.be1, p.g1, EPS);
    h = tf.reshape(h, [batch, -1]);  // NHWC order: the same weights permuted
    h = tf.dropout(tf.relu(tf.add(tf.matMul(h, p.f1, false, true), p.fb1)), 0.3);
    h = tf.add(tf.matMul(h, p.f2, false, true), p.fb2);
    const s2 = tf.moments(h, [0]);
    h = tf.batchNorm(h, s2.mean, s2.variance, p.be2, p.g2, EPS);
    return tf.neg(tf.mean(tf.sum(tf.mul(tf.logSoftmax(h), y), 1)));
  };
  let t0 = 0, last = 0;
  for (let t = 1; t <= warmup + steps; t++) {
    if (t === warmup + 1) t0 = performance.now();
    const keep = t === warmup + steps || t === warmup;
    const cost = tf.tidy(() => opt.minimize(loss, keep));
    if (cost) { last = (await cost.data())[0]; cost.dispose(); }
    if (t === warmup) t0 = performance.now();
  }
  const ms = (performance.now() - t0) / steps;
  tf.dispose([x, y, ...Object.values(p)]);
  opt.dispose();
  return { ms, loss: last };
}

async function tfGemm(n, reps) {
  if (!tfReady) tfReady = tf.setBackend("webgpu").then(() => tf.ready());
  await tfReady;
  const a = tf.tensor(values([n, n], 5, 1), [n, n]);
  const b = tf.tensor(values([n, n], 6, 1), [n, n]);
  let c = tf.matMul(a, b);
  await c.data();
  c.dispose();
  // TF.js runs each op when called (eager): all `reps` products are queued, the last read
  // waits for the queue; every product is then checked as jax-js's
  const out = [];
  const t0 = performance.now();
  for (let i = 0; i < reps; i++) out.push(tf.matMul(a, b));
  await out[reps - 1].data();
  const ms = (performance.now() - t0) / reps;
  const ok = await gemmOk(out, n, async (r) => {
    const d = await r.data();
    r.dispose();
    return d;
  });
  tf.dispose([a, b]);
  return { ms, gflops: 2 * n ** 3 / ms / 1e6, ok, read: reps };
}

async function adapterInfo() {
  const ad = await navigator.gpu?.requestAdapter();
  const i = ad?.info ?? {};
  return { vendor: i.vendor, architecture: i.architecture, device: i.device,
    description: i.description };
}

globalThis.peers = {
  async run(lib, what, batch, steps, warmup) {
    const fn = { "jax-js": { seednet: jaxSeednet, gemm: jaxGemm },
      tfjs: { seednet: tfSeednet, gemm: tfGemm } }[lib][what];
    const r = what === "gemm" ? await fn(batch, steps) : await fn(batch, steps, warmup);
    return { lib, what, batch, steps, ...r, adapter: await adapterInfo() };
  },
};
