//! Matryoshka truncation: keep the first N components of another embedder's
//! vectors and renormalise, for models trained so that prefixes still work
//! (nomic-embed-text, text-embedding-3-*); smaller vectors, smaller index.

use super::{l2_normalise, EmbedError, Embedder};

/// Wraps an embedder and cuts its vectors to `dim` components.
pub(crate) struct Matryoshka {
    /// The embedder whose vectors are cut.
    inner: Box<dyn Embedder>,
    /// Components kept.
    dim: usize,
    /// The inner id with `@dim`, so a change of truncation re-embeds.
    model_id: String,
}

impl Matryoshka {
    /// Fails when `dim` is zero or not smaller than the inner dimension
    /// (truncating to the full size would only rename the model).
    pub(crate) fn new(inner: Box<dyn Embedder>, dim: usize) -> Result<Self, EmbedError> {
        if dim == 0 || dim >= inner.dim() {
            return Err(EmbedError::Config(format!(
                "truncate_dim must be between 1 and {} for {} (got {dim})",
                inner.dim().saturating_sub(1),
                inner.model_id()
            )));
        }
        let model_id = format!("{}@{dim}", inner.model_id());
        Ok(Self {
            inner,
            dim,
            model_id,
        })
    }
}

impl Embedder for Matryoshka {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = self.inner.embed(texts)?;
        for v in &mut vectors {
            v.truncate(self.dim);
            l2_normalise(v);
        }
        Ok(vectors)
    }

    fn preempt(&self) {
        self.inner.preempt();
    }

    fn max_batch(&self) -> usize {
        self.inner.max_batch()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gives every text the vector (1, 2, 2, 4) / 5.
    struct Fixed;

    impl Embedder for Fixed {
        fn model_id(&self) -> &str {
            "fixed"
        }
        fn dim(&self) -> usize {
            4
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            Ok(texts.iter().map(|_| vec![0.2, 0.4, 0.4, 0.8]).collect())
        }
    }

    #[test]
    fn truncates_and_renormalises() -> anyhow::Result<()> {
        let m = Matryoshka::new(Box::new(Fixed), 3)?;
        assert_eq!(m.dim(), 3);
        assert_eq!(m.model_id(), "fixed@3");
        let vectors = m.embed(&["a", "b"])?;
        assert_eq!(vectors.len(), 2);
        for v in vectors {
            let want = [1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0];
            assert!(
                v.iter().zip(want).all(|(x, y)| (x - y).abs() < 1e-6),
                "{v:?}"
            );
        }
        Ok(())
    }

    #[test]
    fn impossible_dimensions_are_refused() {
        for dim in [0, 4, 5] {
            let err = Matryoshka::new(Box::new(Fixed), dim).map(|_| ());
            assert!(matches!(err, Err(EmbedError::Config(_))), "dim {dim}");
        }
    }
}
