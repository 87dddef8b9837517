//! Random and hand-built game histories for replay, learner and checkpoint tests.
