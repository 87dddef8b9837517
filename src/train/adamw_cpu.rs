//! AdamW's update as in-place kernels over f32 CPU storage: three passes per parameter
//! (first moment, second moment, parameter) that create no tensor and allocate nothing,
//! where the update written with tensor ops creates about twenty tensors per parameter.
//! [`super::optimizer::AdamW`] uses them when every parameter and gradient is f32 on the CPU.

use candle_core::{CpuStorage, DType, InplaceOp2, InplaceOp3, Layout, Storage, Tensor};

/// Whether `t` is an f32 tensor on the CPU (and the CPU fast paths are on,
/// `network::fused::set_host_paths`).
pub fn on_cpu_f32(t: &Tensor) -> bool {
    crate::network::fused::host_paths() && t.device().is_cpu() && t.dtype() == DType::F32
}

fn contiguous<'a>(storage: &'a CpuStorage, layout: &Layout) -> candle_core::Result<&'a [f32]> {
    let data = storage.as_slice::<f32>()?;
    match layout.contiguous_offsets() {
        Some((start, end)) => Ok(&data[start..end]),
        None => candle_core::bail!("AdamW kernel: tensor is not contiguous"),
    }
}

fn contiguous_mut<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
) -> candle_core::Result<&'a mut [f32]> {
    let (start, end) = layout
        .contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg("AdamW kernel: tensor is not contiguous".into()))?;
    match storage {
        CpuStorage::F32(data) => Ok(&mut data[start..end]),
        _ => candle_core::bail!("AdamW kernel: expects f32 storage"),
    }
}

/// The sum of squares of a contiguous f32 CPU tensor, read in place (no copy, no op).
pub fn sum_of_squares(t: &Tensor) -> candle_core::Result<f64> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        candle_core::bail!("sum_of_squares: not a CPU tensor");
    };
    Ok(contiguous(cpu, layout)?
        .iter()
        .map(|&g| f64::from(g) * f64::from(g))
        .sum())
}

/// `moment = decay * moment + (1 - decay) * (clip * g)^power` for power 1 or 2, in place.
pub struct MomentUpdate {
    pub decay: f32,
    pub clip: f32,
    pub squared: bool,
}

impl InplaceOp2 for MomentUpdate {
    fn name(&self) -> &'static str {
        "cumind-adamw-moment"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        grad: &CpuStorage,
        grad_l: &Layout,
    ) -> candle_core::Result<()> {
        let moment = contiguous_mut(dst, dst_l)?;
        let grad = contiguous(grad, grad_l)?;
        if moment.len() != grad.len() {
            candle_core::bail!(
                "AdamW kernel: {} moments for {} gradients",
                moment.len(),
                grad.len()
            );
        }
        let keep = self.decay;
        let take = 1.0 - self.decay;
        if self.squared {
            for (m, &g) in moment.iter_mut().zip(grad) {
                let g = g * self.clip;
                *m = keep * *m + take * g * g;
            }
        } else {
            for (m, &g) in moment.iter_mut().zip(grad) {
                *m = keep * *m + take * g * self.clip;
            }
        }
        Ok(())
    }
}

/// `p = p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)` with `m_hat = m / bias1` and
/// `v_hat = v / bias2`, in place.
pub struct ParameterUpdate {
    pub learning_rate: f32,
    pub weight_decay: f32,
    pub bias1: f32,
    pub bias2: f32,
    pub eps: f32,
}

impl InplaceOp3 for ParameterUpdate {
    fn name(&self) -> &'static str {
        "cumind-adamw-parameter"
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dst_l: &Layout,
        m: &CpuStorage,
        m_l: &Layout,
        v: &CpuStorage,
        v_l: &Layout,
    ) -> candle_core::Result<()> {
        let p = contiguous_mut(dst, dst_l)?;
        let m = contiguous(m, m_l)?;
        let v = contiguous(v, v_l)?;
        if p.len() != m.len() || p.len() != v.len() {
            candle_core::bail!("AdamW kernel: parameter and moments differ in length");
        }
        let decay = 1.0 - self.learning_rate * self.weight_decay;
        for ((p, &m), &v) in p.iter_mut().zip(m).zip(v) {
            let update = (m / self.bias1) / ((v / self.bias2).sqrt() + self.eps);
            *p = *p * decay - update * self.learning_rate;
        }
        Ok(())
    }
}
