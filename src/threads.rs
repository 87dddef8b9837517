//! Running two pieces of work side by side on the rayon pool.

/// `a()` on this thread and `b()` on the rayon pool, side by side. Unlike `rayon::join`
/// called from outside the pool, which hands both closures to the pool and puts the caller to
/// sleep until they are done, the caller computes `a` itself: one thread hand-off, not two.
pub fn side_by_side<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    if rayon::current_thread_index().is_some() {
        return rayon::join(a, b);
    }
    let mut second = None;
    let first = rayon::in_place_scope(|scope| {
        scope.spawn(|_| second = Some(b()));
        a()
    });
    (
        first,
        second.expect("the scope waits for its spawned closure"),
    )
}
