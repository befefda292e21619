// The dashboard's speed and machine card: images/s, ms/step, achieved GFLOP/s and its % of the
// adapter's peak (peak.js: known GPUs' fp32 peaks), the GPU memory the run holds, and the
// adapter and browser it runs on.
//
// Achieved GFLOP/s = 3 × 2 × (multiply-adds per image, from the model summary) × batch
// / (measured ms per step) / 1e6, i.e. × images/s / 1e9: a multiply-add is 2 FLOPs (forward =
// 2 × MACs), and a training step costs about 3 forward passes (the forward, plus the
// backward's gradients of the inputs and of the weights, each about one forward): the usual
// 6 FLOPs per parameter use per sample (Kaplan et al. 2020, "Scaling Laws for Neural Language
// Models", section 2.1: forward 2N, backward 4N). Layers without multiply-adds (ReLU, pooling,
// BatchNorm, the optimizer) are not counted.

import { $, humanBytes } from "../lib/util.js";
import { appState } from "./state.js";
import { peakOf, percentOfPeak } from "./peak.js";

export const FLOPS_PER_MAC_TRAINING = 3 * 2;

/** The browser's name and version, e.g. "Chrome 131", "Firefox 133", "Safari 18.1". */
export function browserName() {
  const brands = navigator.userAgentData?.brands ?? [];
  const real = brands.filter((b) => !/not.?a.?brand/i.test(b.brand));
  const best = real.find((b) => b.brand !== "Chromium") ?? real[0];
  if (best) return `${best.brand} ${best.version}`;
  const ua = navigator.userAgent;
  const m = ua.match(/(Firefox|Edg|OPR|Chrome|CriOS)\/(\d+)/) ??
    ua.match(/Version\/([\d.]+).*(Safari)/)?.slice(0, 3).reverse();
  if (!m) return ua;
  const names = { Edg: "Edge", OPR: "Opera", CriOS: "Chrome" };
  return `${names[m[1]] ?? m[1]} ${m[2]}`;
}

/** The adapter's name from the `adapter` message's info. */
export function adapterName(info) {
  if (!info) return "–";
  return info.description ||
    [info.vendor, info.architecture, info.device].filter(Boolean).join(" ") || "WebGPU adapter";
}

/** Training GFLOP/s at ``imagesPerS`` for a model of ``macs`` multiply-adds per image. */
export const gflops = (macs, imagesPerS) => (FLOPS_PER_MAC_TRAINING * macs * imagesPerS) / 1e9;

/** Redraw the card from appState (progress, summary, adapter, memory). */
export function renderStats() {
  const p = appState.progress;
  const ips = p?.images_per_s;
  const batch = appState.config?.batch_size;
  const macs = appState.summary?.totals?.macs;
  const has = ips > 0 && p?.step > 0;
  $("stat-ips").textContent = has ? Math.round(ips).toLocaleString() : "–";
  $("stat-ms").textContent = has && batch ? (1000 * batch / ips).toFixed(1) : "–";
  const now = has && macs ? gflops(macs, ips) : null;
  $("stat-gflops").textContent = now == null ? "–" : now.toFixed(2);
  const peak = peakOf(appState.adapter);
  const pct = now == null ? null : percentOfPeak(now, peak);
  $("stat-peak").textContent = !peak ? "peak unknown"
    : `${pct == null ? "–" : `${pct < 1 ? pct.toFixed(2) : pct.toFixed(1)}%`} of ` +
      `${peak.tflops} TFLOP/s (${peak.name})`;
  $("stat-peak").title = peak ? `fp32 peak: ${peak.source}`
    : "WebGPU does not tell the peak; this adapter is not in the page's table of known GPUs";
  $("stat-memory").textContent = appState.memoryBytes != null ? humanBytes(appState.memoryBytes)
    : "–";
  $("stat-adapter").textContent = adapterName(appState.adapter);
  $("stat-browser").textContent = browserName();
}
