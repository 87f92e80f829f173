//! Samplers. (Placeholder until the sampler API lands from the `sampling` branch.)

pub mod grammar;
