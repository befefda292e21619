// The header of the 2-D convolution kernels (conv2d.wgsl, conv2d_wgrad.wgsl): their Params
// (ops/conv.py _params) and the window's override constants.

struct Params {
  N: u32, C: u32, H: u32, W: u32,
  K: u32, OH: u32, OW: u32, G: u32,
  has_bias: u32, splits: u32, mask: u32, relu: u32,  // relu: forward applies max(y, 0)
}
// mask (input gradients: `forward` on dy, `backward_input`): y = 0 where m <= 0, m bound as `b`:
// the layer's input when it is the output of an in-place ReLU whose backward is fused here.

// The window is specialised per layer (pipeline-overridable constants): loops over the kernel
// taps then have constant trip counts, which CPU adapters unroll.
override KH: u32 = 3u;
override KW: u32 = 3u;
override sh: u32 = 1u;
override sw: u32 = 1u;
override ph: u32 = 0u;
override pw: u32 = 0u;
override dh: u32 = 1u;
override dw: u32 = 1u;
