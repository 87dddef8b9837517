//! The target network's bootstrap values by observation, for as long as the target's weights
//! stay the same.
//!
//! A batch's n-step value targets bootstrap from the target network's value of the
//! observation `td_steps` later, and neighbouring positions of a game share those: between two
//! refreshes of the target (every `target_update_frequency` steps) the learner asks for the
//! same observation many times. The value of an observation depends on nothing else (each
//! board goes through the network alone), so a value kept from an earlier step of the same
//! target is the one a new pass would give. Keys are the observations' exact bits, so two
//! observations share a value only when they are equal; the cache holds at most a fixed
//! number of bytes of observations and is emptied whenever the target changes.

use std::collections::HashMap;

use foldhash::fast::RandomState;

/// Observation bytes the cache keeps at most (beyond this, new values are not kept).
pub const CACHE_BYTES: usize = 256 << 20;

/// Bootstrap values keyed by the observation's bits.
#[derive(Default)]
pub struct TargetValueCache {
    values: HashMap<Box<[u32]>, f32, RandomState>,
    bytes: usize,
    budget: usize,
    /// Observations asked for, and those answered from the cache, since the run began.
    lookups: u64,
    hits: u64,
}

impl TargetValueCache {
    /// A cache keeping at most `budget` bytes of observations.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    /// Forget every value: the target's weights changed.
    pub fn clear(&mut self) {
        self.values.clear();
        self.bytes = 0;
    }

    /// Observations asked for and those answered from the cache, since it was made.
    pub fn counts(&self) -> (u64, u64) {
        (self.hits, self.lookups)
    }

    /// The values of `observations` (`[n * obs_len]`): those seen since the last
    /// [`Self::clear`] from the cache, the others from `compute` (called once, with them in
    /// order, only when there are any) and kept while the budget allows.
    pub fn values<E>(
        &mut self,
        observations: &[f32],
        obs_len: usize,
        compute: impl FnOnce(&[f32]) -> Result<Vec<f32>, E>,
    ) -> Result<Vec<f32>, E> {
        let keys: Vec<Box<[u32]>> = observations
            .chunks_exact(obs_len.max(1))
            .map(|o| o.iter().map(|v| v.to_bits()).collect())
            .collect();
        let mut out: Vec<Option<f32>> = keys.iter().map(|k| self.values.get(k).copied()).collect();
        self.lookups += keys.len() as u64;
        let missing: Vec<usize> = (0..keys.len()).filter(|&i| out[i].is_none()).collect();
        self.hits += (keys.len() - missing.len()) as u64;
        if !missing.is_empty() {
            let unknown: Vec<f32> = missing
                .iter()
                .flat_map(|&i| observations[i * obs_len..(i + 1) * obs_len].iter().copied())
                .collect();
            let computed = compute(&unknown)?;
            for (&i, v) in missing.iter().zip(computed) {
                out[i] = Some(v);
                let size = obs_len * std::mem::size_of::<u32>();
                if self.bytes + size <= self.budget && !self.values.contains_key(&keys[i]) {
                    self.values.insert(keys[i].clone(), v);
                    self.bytes += size;
                }
            }
        }
        Ok(out.into_iter().map(|v| v.unwrap_or(0.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value computed by a pass that counts the observations it is given: the value of
    /// `[a, b]` is `a + 10 b`.
    fn pass(calls: &mut Vec<usize>) -> impl FnMut(&[f32]) -> Result<Vec<f32>, ()> + '_ {
        move |obs: &[f32]| {
            calls.push(obs.len() / 2);
            Ok(obs.chunks_exact(2).map(|o| o[0] + 10.0 * o[1]).collect())
        }
    }

    #[test]
    fn seen_observations_come_from_the_cache_until_it_is_cleared() {
        let mut cache = TargetValueCache::new(1 << 20);
        let mut calls = Vec::new();
        let first = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(
            cache.values(&first, 2, pass(&mut calls)).unwrap(),
            vec![21.0, 43.0]
        );
        // One known observation, one new one, the known one again.
        let second = [3.0, 4.0, 5.0, 6.0, 3.0, 4.0];
        assert_eq!(
            cache.values(&second, 2, pass(&mut calls)).unwrap(),
            vec![43.0, 65.0, 43.0]
        );
        assert_eq!(calls, vec![2, 1], "only the new observation is computed");
        assert_eq!(cache.counts(), (2, 5));
        // All known: no pass at all.
        cache.values(&first, 2, pass(&mut calls)).unwrap();
        assert_eq!(calls.len(), 2);
        // A new target: everything is computed again.
        cache.clear();
        cache.values(&first, 2, pass(&mut calls)).unwrap();
        assert_eq!(calls, vec![2, 1, 2]);
    }

    #[test]
    fn observations_differing_in_any_bit_are_different_keys() {
        let mut cache = TargetValueCache::new(1 << 20);
        let mut calls = Vec::new();
        cache.values(&[0.0, 1.0], 2, pass(&mut calls)).unwrap();
        // -0.0 equals 0.0 as a float but not as bits: computed, not looked up.
        let v = cache.values(&[-0.0, 1.0], 2, pass(&mut calls)).unwrap();
        assert_eq!(v, vec![10.0]);
        assert_eq!(calls, vec![1, 1]);
    }

    #[test]
    fn past_its_budget_the_cache_keeps_no_more_values_but_answers_all() {
        // Room for one observation of two values.
        let mut cache = TargetValueCache::new(8);
        let mut calls = Vec::new();
        let obs = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(
            cache.values(&obs, 2, pass(&mut calls)).unwrap(),
            vec![21.0, 43.0]
        );
        assert_eq!(
            cache.values(&obs, 2, pass(&mut calls)).unwrap(),
            vec![21.0, 43.0]
        );
        assert_eq!(calls, vec![2, 1], "the second observation was not kept");
    }

    #[test]
    fn an_error_of_the_pass_comes_back_and_keeps_nothing() {
        let mut cache = TargetValueCache::new(1 << 20);
        let failed: Result<Vec<f32>, &str> = cache.values(&[1.0, 2.0], 2, |_| Err("no target"));
        assert_eq!(failed, Err("no target"));
        let mut calls = Vec::new();
        cache.values(&[1.0, 2.0], 2, pass(&mut calls)).unwrap();
        assert_eq!(calls, vec![1]);
    }
}
