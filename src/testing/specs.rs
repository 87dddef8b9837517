//! Tiny network specs for fast network, loss, learner and checkpoint tests.
