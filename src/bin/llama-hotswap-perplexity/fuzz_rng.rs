//! Test support: the mutation source of the tool's fuzz-target replays.

/// The fuzz replays' mutation source (a xorshift64 stream from `seed`): one generator for
/// every harness of the tool, so their seeded mutations stay reproducible.
pub fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
