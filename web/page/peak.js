// The adapter's peak fp32 throughput, for the dashboard's "% of peak". WebGPU does not expose
// a peak FLOP/s, so this is a small table of known GPUs matched on the adapter info's words
// (description, device, vendor, architecture: browsers often leave the description empty, and
// an architecture alone names no chip: an Ampere may be an A100 or a laptop's RTX 3050). An
// adapter no row matches has no peak: the page says "peak unknown" (SwiftShader, llvmpipe,
// and any GPU not listed here).
//
// Each number is the vendor's published fp32 (non-tensor-core) peak, boost clock, dense.

/** `[pattern, name, peak TFLOP/s fp32, source]`, the first match wins (more specific first). */
export const PEAKS = [
  [/\bH200\b/i, "NVIDIA H200", 67, "NVIDIA H200 Tensor Core GPU datasheet (SXM, FP32)"],
  [/\bH100\b.*\bPCIe\b/i, "NVIDIA H100 PCIe", 51, "NVIDIA H100 datasheet (PCIe, FP32)"],
  [/\bH100\b/i, "NVIDIA H100 SXM", 67, "NVIDIA H100 datasheet (SXM, FP32)"],
  [/\bA100\b/i, "NVIDIA A100", 19.5, "NVIDIA A100 datasheet (FP32)"],
  [/\bRTX 4090\b/i, "NVIDIA GeForce RTX 4090", 82.6,
    "NVIDIA Ada GPU architecture whitepaper (peak FP32 TFLOPS, non-tensor)"],
  [/\bRTX 3090\b(?! ?Ti)/i, "NVIDIA GeForce RTX 3090", 35.6,
    "NVIDIA Ampere GA102 GPU architecture whitepaper (peak FP32 TFLOPS, non-tensor)"],
  [/\bApple M1\b(?! (Pro|Max|Ultra))/i, "Apple M1 (8-core GPU)", 2.6,
    "Apple M1 announcement (2.6 TFLOPS)"],
];

/** The known peak of the adapter of ``info`` ({vendor, architecture, device, description}):
 *  `{name, tflops, source}`, or null when no row of PEAKS matches (peak unknown). */
export function peakOf(info) {
  if (!info) return null;
  const words = ["description", "device", "vendor", "architecture"]
    .map((k) => info[k]).filter(Boolean).join(" ");
  const row = PEAKS.find(([re]) => re.test(words));
  return row ? { name: row[1], tflops: row[2], source: row[3] } : null;
}

/** Achieved ``gflopsNow`` as a percentage of ``peak`` (peakOf's answer); null when unknown. */
export const percentOfPeak = (gflopsNow, peak) =>
  peak && gflopsNow >= 0 ? (100 * gflopsNow) / (1000 * peak.tflops) : null;
