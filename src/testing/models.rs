//! Fake [`crate::model::Model`]s for search tests (bandits, fixed trees).
