//! EfficientZero's projection and prediction heads (Ye et al. 2021, after SimSiam): the
//! self-supervised temporal consistency loss compares `predictor(projector(g(s, a)))`, the
//! dynamics' latent, with `projector(h(o'))`, the representation of the real next observation
//! under a stop-gradient. Present when `NetworkSpec::projection_dim > 0`; neither search nor
//! inference uses them.

use candle_core::{DType, Tensor};

use super::layers::{DenseBlock, Linear};
use super::params::ParamBuilder;
use super::{NetworkError, NetworkSpec};

/// Projector (latent -> `projection_dim`) and predictor (`projection_dim` -> `projection_dim`),
/// each Linear -> LayerNorm -> ReLU -> Linear.
#[derive(Clone, Debug)]
pub struct Projection {
    projector: (DenseBlock, Linear),
    predictor: (DenseBlock, Linear),
}

impl Projection {
    pub fn new(pb: &mut ParamBuilder, spec: &NetworkSpec) -> Result<Self, NetworkError> {
        let latent: usize = spec.latent_shape().iter().product();
        let p = spec.projection_dim;
        pb.push("projection");
        let projector = (
            DenseBlock::new(pb, "projector_hidden", latent, p),
            Linear::new(pb, "projector_out", p, p, false),
        );
        let predictor = (
            DenseBlock::new(pb, "predictor_hidden", p, p),
            Linear::new(pb, "predictor_out", p, p, false),
        );
        pb.pop();
        Ok(Self {
            projector: (projector.0?, projector.1?),
            predictor: (predictor.0?, predictor.1?),
        })
    }

    /// # Shapes
    /// `latent`: `[B, ...latent_shape]` -> `[B, projection_dim]` f32; through the predictor
    /// too when `predict` (the online branch of the consistency loss).
    pub fn forward(&self, latent: &Tensor, predict: bool) -> candle_core::Result<Tensor> {
        let flat = latent.flatten_from(1)?;
        let mut x = self
            .projector
            .1
            .forward(&self.projector.0.forward(&flat)?)?;
        if predict {
            x = self.predictor.1.forward(&self.predictor.0.forward(&x)?)?;
        }
        x.to_dtype(DType::F32)
    }
}
