// The per-step uniform of a training plan (one buffer, written once per step before the
// step's command buffer is submitted; packed by engine/plan.py `pack_step`, 32 bytes):
//   step   1-based optimizer step t (dropout masks and the guard's first bad step use it)
//   offset first row of this batch in the epoch's shuffled order (data.wgsl)
//   seed   the run's seed (dropout)
//   slot   metrics ring slot, (t - 1) % METRICS_RING (loss.wgsl)
//   lr     learning rate at step t; a0..a2 the optimizer's per-step scalars (optim.wgsl)
struct Step { step: u32, offset: u32, seed: u32, slot: u32, lr: f32, a0: f32, a1: f32, a2: f32 }
